// libFuzzer target for okapi's chat-template renderer (src/jinja): any bytes as a template, parsed
// and rendered over a small conversation with tools. Templates come from HTTP clients, so the only
// allowed outcomes are a prompt or a jinja::TemplateError (TemplateRaised included): a crash, a
// sanitizer report, another exception or a hang (libFuzzer's -timeout) is a finding; so is a
// render_spans() whose spans do not join to render()'s text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "jinja/chat_template.hpp"

namespace {

const okapi::jinja::RenderInputs& inputs() {
  static const okapi::jinja::RenderInputs value = [] {
    okapi::jinja::RenderInputs r;
    r.messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris? \u00fc \ud83e\udd8a"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "n": [1, 2.5, null, true]}}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21}"}])");
    r.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather for a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
    r.bos_token = "<s>";
    r.eos_token = "</s>";
    r.extra = {{"enable_thinking", true}};
    r.now = 1785067200;
    return r;
  }();
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    const auto chat_template = okapi::jinja::ChatTemplate::parse(source, "fuzz");
    const std::string prompt = chat_template.render(inputs());
    if (prompt.size() > (std::size_t{16} << 20)) {
      std::fprintf(stderr, "jinja_fuzz: output of %zu bytes passed the 16 MiB limit\n", prompt.size());
      std::abort();
    }
    // The spans by origin: the same text, none empty, caller and template text alternating.
    const auto spans = chat_template.render_spans(inputs());
    std::string joined;
    for (std::size_t i = 0; i < spans.size(); ++i) {
      if (spans[i].text.empty() || (i > 0 && spans[i].user == spans[i - 1].user)) {
        std::fprintf(stderr, "jinja_fuzz: malformed span %zu of %zu\n", i, spans.size());
        std::abort();
      }
      joined += spans[i].text;
    }
    if (joined != prompt) {
      std::fprintf(stderr, "jinja_fuzz: the spans do not join to the rendered text\n");
      std::abort();
    }
  } catch (const okapi::jinja::TemplateError&) {
    // a clean refusal
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jinja_fuzz: unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
