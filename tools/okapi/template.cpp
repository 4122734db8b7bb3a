// okapi template render|parse|info (-m MODEL | --template FILE): a chat template as okapi serve
// uses it, for people writing and debugging templates.
//   render --messages F.json [--tools F.json] [--no-generation-prompt] [--kwargs JSON]: the prompt,
//     printed exactly as rendered (no newline added);
//   parse --text F [--tools F.json] [--reasoning-format none|deepseek|auto] [--thinking-forced-open]:
//     the assistant message (content, reasoning_content, tool_calls) the server would return for a
//     model output, as JSON;
//   info: the family detected from the template, its reasoning markers and what it supports.
// With -m the template is the model's (tokenizer.chat_template, or ChatML when it has none, as the
// server falls back) and bos_token / eos_token are its vocabulary's, through runtime::ChatPrompt;
// -m with --template uses that file with the model's tokens. --template alone takes bos_token /
// eos_token from --bos / --eos (empty by default).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "chat/chat_format.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_output.hpp"
#include "jinja/chat_template.hpp"
#include "runtime/chat_prompt.hpp"
#include "runtime/engine.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

using Json = nlohmann::ordered_json;

struct TemplateSource {
  std::string model;
  std::string template_file;
  std::string bos;
  std::string eos;
};

struct RenderArgs {
  std::string messages;
  std::string tools;
  std::string kwargs;
  bool no_generation_prompt = false;
};

struct ParseArgs {
  std::string text;
  std::string tools;
  std::string reasoning_format = "auto";
  bool thinking_forced_open = false;
};

// A JSON file, with a message that names it when it is not JSON.
Json read_json_file(const std::string& path, std::string_view what) {
  const std::string text = read_input_file(path, what);
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw_error("{} {}: not valid JSON: {}", what, path, e.what());
  }
}

Json read_messages(const std::string& path) {
  Json messages = read_json_file(path, "messages file");
  if (!messages.is_array()) throw_error("messages file {}: must hold a JSON array of messages, not {}", path, messages.type_name());
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object()) {
      throw_error("messages file {}: message {} must be an object, not {}", path, i, messages[i].type_name());
    }
  }
  return messages;
}

Json read_tools(const std::string& path) {
  if (path.empty()) return nullptr;
  Json tools = read_json_file(path, "tools file");
  if (!tools.is_array()) throw_error("tools file {}: must hold a JSON array of tools, not {}", path, tools.type_name());
  return tools;
}

// The template and its bos / eos texts: through the server's ChatPrompt with a model, else the file.
class LoadedTemplate {
 public:
  explicit LoadedTemplate(const TemplateSource& source) {
    if (!source.model.empty()) {
      engine_ = runtime::Engine::load(source.model, runtime::EngineOptions{});
      prompt_ = std::make_unique<runtime::ChatPrompt>(*engine_, source.template_file);
      template_ = std::make_unique<jinja::ChatTemplate>(jinja::ChatTemplate::parse(prompt_->source(), prompt_->origin()));
      return;
    }
    template_ = std::make_unique<jinja::ChatTemplate>(
        jinja::ChatTemplate::parse(read_input_file(source.template_file, "chat template file"), source.template_file));
    bos_ = source.bos;
    eos_ = source.eos;
  }

  std::string render(jinja::RenderInputs inputs) const {
    try {
      if (prompt_) return prompt_->render(std::move(inputs));
      inputs.bos_token = bos_;
      inputs.eos_token = eos_;
      return template_->render(inputs);
    } catch (const jinja::TemplateRaised& e) {
      throw_error("the chat template refused the conversation: {}", e.what());
    }
  }

  const jinja::ChatTemplate& chat_template() const { return *template_; }
  std::string origin() const { return prompt_ ? prompt_->origin() : "file"; }

 private:
  std::unique_ptr<runtime::Engine> engine_;
  std::unique_ptr<runtime::ChatPrompt> prompt_;
  std::unique_ptr<jinja::ChatTemplate> template_;
  std::string bos_, eos_;
};

void write(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

void render(const TemplateSource& source, const RenderArgs& args) {
  jinja::RenderInputs inputs;
  inputs.messages = read_messages(args.messages);
  inputs.tools = read_tools(args.tools);
  inputs.add_generation_prompt = !args.no_generation_prompt;
  if (!args.kwargs.empty()) {
    try {
      inputs.extra = Json::parse(args.kwargs);
    } catch (const Json::parse_error& e) {
      throw_usage_error("--kwargs: not valid JSON: {}", e.what());
    }
    if (!inputs.extra.is_object()) throw_usage_error("--kwargs must be a JSON object, not {}", inputs.extra.type_name());
  }
  const LoadedTemplate loaded(source);
  write(loaded.render(std::move(inputs)));
  std::fflush(stdout);
}

void parse(const TemplateSource& source, const ParseArgs& args) {
  chat::ChatRequest request;
  request.reasoning_format = chat::parse_reasoning_format(args.reasoning_format);
  request.tools = read_tools(args.tools);
  const std::string text = read_input_file(args.text, "model output file");
  const LoadedTemplate loaded(source);
  const chat::ChatFormat format = chat::detect_format(loaded.chat_template());
  chat::ParseOptions options = chat::plan(format, request, {}).parse;
  if (args.thinking_forced_open) options.thinking_forced_open = true;
  const chat::ChatMessage message = chat::parse_output(text, false, options);
  write(dump_json(message.to_json(), 2) + "\n");
  std::fflush(stdout);
}

void info(const TemplateSource& source) {
  const LoadedTemplate loaded(source);
  const chat::ChatFormat format = chat::detect_format(loaded.chat_template());
  Json out;
  out["template"] = loaded.origin();
  out["family"] = std::string(chat::family_name(format.family));
  out["reasoning_start"] = format.reasoning_start;
  out["reasoning_end"] = format.reasoning_end;
  out["supports_tools"] = format.supports_tools;
  out["supports_enable_thinking"] = format.supports_enable_thinking;
  write(dump_json(std::move(out), 2) + "\n");
  std::fflush(stdout);
}

// -m / --template / --bos / --eos on one subcommand; returns a check for its callback.
auto add_source_flags(CLI::App* cmd, const std::shared_ptr<TemplateSource>& source) {
  auto* model = cmd->add_option("-m,--model", source->model, "GGUF model: its chat template and BOS/EOS texts");
  auto* file = cmd->add_option("--template,--chat-template-file", source->template_file, "chat template file (Jinja)");
  auto* bos = cmd->add_option("--bos", source->bos, "bos_token's text with --template alone (default: empty)");
  auto* eos = cmd->add_option("--eos", source->eos, "eos_token's text with --template alone (default: empty)");
  bos->excludes(model);
  eos->excludes(model);
  const std::string name = cmd->get_name();
  return [model, file, name] {
    if (model->count() == 0 && file->count() == 0) throw_usage_error("template {}: give a model with -m or a template with --template", name);
  };
}

}  // namespace

void register_template(CLI::App& app, VerbResult& result) {
  auto* cmd = app.add_subcommand("template", "render a chat template, or parse a model's output as the server does");
  cmd->require_subcommand(1);

  auto render_source = std::make_shared<TemplateSource>();
  auto render_args = std::make_shared<RenderArgs>();
  auto* render_cmd = cmd->add_subcommand("render", "print the prompt a conversation renders to (exactly, no newline added)");
  auto render_check = add_source_flags(render_cmd, render_source);
  render_cmd->add_option("--messages", render_args->messages, "JSON file: the messages array")->required();
  render_cmd->add_option("--tools", render_args->tools, "JSON file: the tools array (OpenAI format)");
  render_cmd->add_flag("--no-generation-prompt", render_args->no_generation_prompt, "add_generation_prompt = false");
  render_cmd->add_option("--kwargs,--chat-template-kwargs", render_args->kwargs,
                         "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'");
  render_cmd->callback([render_source, render_args, render_check, &result] {
    render_check();
    if (result.dry_run) return;
    render(*render_source, *render_args);
    result.exit_code = 0;
  });

  auto parse_source = std::make_shared<TemplateSource>();
  auto parse_args = std::make_shared<ParseArgs>();
  auto* parse_cmd = cmd->add_subcommand("parse", "print the assistant message (JSON) the server would return for a model output");
  auto parse_check = add_source_flags(parse_cmd, parse_source);
  parse_cmd->add_option("--text", parse_args->text, "file with the model's output (exact bytes)")->required();
  parse_cmd->add_option("--tools", parse_args->tools, "JSON file: the tools array of the request");
  parse_cmd->add_option("--reasoning-format", parse_args->reasoning_format, "none | deepseek | auto (default auto)")
      ->check(CLI::IsMember({"none", "deepseek", "deepseek-legacy", "auto"}));
  parse_cmd->add_flag("--thinking-forced-open", parse_args->thinking_forced_open,
                      "the prompt ended inside the reasoning block: the output starts in it");
  parse_cmd->callback([parse_source, parse_args, parse_check, &result] {
    parse_check();
    if (result.dry_run) return;
    parse(*parse_source, *parse_args);
    result.exit_code = 0;
  });

  auto info_source = std::make_shared<TemplateSource>();
  auto* info_cmd = cmd->add_subcommand("info", "print the detected tool-call family, reasoning markers and features (JSON)");
  auto info_check = add_source_flags(info_cmd, info_source);
  info_cmd->callback([info_source, info_check, &result] {
    info_check();
    if (result.dry_run) return;
    info(*info_source);
    result.exit_code = 0;
  });
}

}  // namespace okapi::cli
