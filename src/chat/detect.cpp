// Family detection: the template's source markers say which tool-call syntax it speaks; where
// several families share a marker (<tool_call> for Hermes, Qwen3-Coder and GLM-4.5; [TOOL_CALLS]
// with or without [ARGS]; DeepSeek R1's and V3's call blocks), a probe conversation with one tool
// call is rendered with okapi's own Jinja engine and the rendering decides. Never the file name.
#include <string>
#include <string_view>

#include "chat/chat_format.hpp"

namespace okapi::chat {
namespace {

constexpr std::string_view kProbeFunction = "okapi_probe_function";
constexpr std::string_view kProbeArgument = "okapi_probe_argument";
constexpr std::string_view kProbeTool = "okapi_probe_tool";

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

Json probe_tools(std::string_view name) {
  return Json::array({{{"type", "function"},
                       {"function",
                        {{"name", name},
                         {"description", "A probe."},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{kProbeArgument, {{"type", "string"}}}}},
                           {"required", Json::array({kProbeArgument})}}}}}}});
}

// Renders a conversation in which the assistant called the probe function and got a result;
// empty when the template refuses every variant (some want arguments as a string, some reject a
// system-less start or a final tool message).
std::string render_tool_call_probe(const jinja::ChatTemplate& chat_template) {
  for (const bool arguments_as_string : {false, true}) {
    Json arguments = {{kProbeArgument, "okapi_probe_value"}};
    Json call = {{"id", "call12345"},  // 9 alphanumerics: Mistral's templates insist
                 {"type", "function"},
                 {"function",
                  {{"name", kProbeFunction}, {"arguments", arguments_as_string ? Json(arguments.dump()) : arguments}}}};
    Json messages = Json::array({
        {{"role", "user"}, {"content", "Probe the tool."}},
        {{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({call})}},
        {{"role", "tool"}, {"tool_call_id", "call12345"}, {"name", kProbeFunction}, {"content", "probe result"}},
    });
    jinja::RenderInputs inputs;
    inputs.messages = messages;
    inputs.tools = probe_tools(kProbeFunction);
    inputs.add_generation_prompt = true;
    inputs.bos_token = "<s>";
    inputs.eos_token = "</s>";
    inputs.now = 0;
    try {
      return chat_template.render(inputs);
    } catch (const jinja::TemplateError&) {
      // try the next variant
    }
  }
  return {};
}

bool renders_tools(const jinja::ChatTemplate& chat_template) {
  jinja::RenderInputs inputs;
  inputs.messages = Json::array({{{"role", "user"}, {"content", "Hello."}}});
  inputs.tools = probe_tools(kProbeTool);
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  inputs.now = 0;
  try {
    return contains(chat_template.render(inputs), kProbeTool);
  } catch (const jinja::TemplateError&) {
    return false;
  }
}

Family family_of(std::string_view source, const jinja::ChatTemplate& chat_template) {
  if (contains(source, "<|channel|>")) return Family::GptOss;
  if (contains(source, "<|START_ACTION|>")) return Family::CommandR7B;
  if (contains(source, ">>>all") || (contains(source, ">>>") && contains(source, "recipient"))) {
    return Family::FunctionaryV32;
  }
  const bool deepseek = contains(source, "tool▁calls▁begin") || contains(source, "tool▁call▁begin");
  const bool tool_call_tag = contains(source, "<tool_call>");
  const bool mistral = contains(source, "[TOOL_CALLS]");
  if (!deepseek && !tool_call_tag && !mistral) {
    if (contains(source, "<|python_tag|>") || contains(source, "ipython")) return Family::Llama3;
    return Family::Generic;
  }
  // Ambiguous markers: what the template writes for a call decides.
  const std::string rendered = render_tool_call_probe(chat_template);
  const std::string name(kProbeFunction);
  if (deepseek) {
    if (!rendered.empty()) {
      if (contains(rendered, "function<｜tool▁sep｜>" + name)) return Family::DeepSeekR1;
      if (contains(rendered, name + "<｜tool▁sep｜>")) return Family::DeepSeekV3;
    }
    return contains(source, "```json") ? Family::DeepSeekR1 : Family::DeepSeekV3;
  }
  if (mistral) {
    if (!rendered.empty()) return contains(rendered, "[ARGS]") ? Family::MistralArgs : Family::Mistral;
    return contains(source, "[ARGS]") ? Family::MistralArgs : Family::Mistral;
  }
  if (!rendered.empty()) {
    if (contains(rendered, "<function=" + name)) return Family::Qwen3Coder;
    if (contains(rendered, "<arg_key>" + std::string(kProbeArgument))) return Family::Glm45;
    if (contains(rendered, "<tool_call>")) return Family::Hermes;
  }
  if (contains(source, "<function=") && contains(source, "<parameter=")) return Family::Qwen3Coder;
  if (contains(source, "<arg_key>")) return Family::Glm45;
  return Family::Hermes;
}

}  // namespace

ChatFormat detect_format(const jinja::ChatTemplate& chat_template) {
  const std::string_view source = chat_template.source();
  ChatFormat format;
  format.family = family_of(source, chat_template);
  // gpt-oss's analysis channel is its reasoning; the GptOss parser reads the channels itself, so
  // no reasoning markers are set for it.
  if (format.family == Family::CommandR7B) {
    format.reasoning_start = "<|START_THINKING|>";
    format.reasoning_end = "<|END_THINKING|>";
  } else if (format.family != Family::GptOss && contains(source, "<think>")) {
    format.reasoning_start = "<think>";
    format.reasoning_end = "</think>";
  }
  format.supports_tools = renders_tools(chat_template);
  format.supports_enable_thinking = contains(source, "enable_thinking");
  return format;
}

}  // namespace okapi::chat
