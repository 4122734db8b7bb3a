// Test helper for tests/jinja/jinja_oracle.py: renders chat templates with okapi's renderer.
// stdin: a JSON array of requests {template, messages, tools?, add_generation_prompt, bos_token,
// eos_token, extra?, now?}; stdout: a JSON array of results {ok: true, prompt} or
// {ok: false, error: "raise_exception" | "TemplateError", message}.
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "jinja/chat_template.hpp"

int main() {
  using nlohmann::ordered_json;
  const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  const ordered_json requests = ordered_json::parse(input);
  ordered_json results = ordered_json::array();
  for (const auto& request : requests) {
    ordered_json result;
    try {
      const auto chat_template = okapi::jinja::ChatTemplate::parse(request.at("template").get<std::string>());
      okapi::jinja::RenderInputs inputs;
      inputs.messages = request.value("messages", ordered_json::array());
      inputs.tools = request.value("tools", ordered_json());
      inputs.add_generation_prompt = request.value("add_generation_prompt", true);
      inputs.bos_token = request.value("bos_token", "<s>");
      inputs.eos_token = request.value("eos_token", "</s>");
      inputs.extra = request.value("extra", ordered_json::object());
      if (request.contains("now")) inputs.now = request.at("now").get<std::time_t>();
      result = {{"ok", true}, {"prompt", chat_template.render(inputs)}};
    } catch (const okapi::jinja::TemplateRaised& e) {
      result = {{"ok", false}, {"error", "raise_exception"}, {"message", e.what()}};
    } catch (const okapi::jinja::TemplateError& e) {
      result = {{"ok", false}, {"error", "TemplateError"}, {"message", e.what()}};
    }
    results.push_back(result);
  }
  std::cout << results.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  return 0;
}
