#include "chat/chat_format.hpp"

// Stub: family detection and the plans are being written (issue 29).
namespace okapi::chat {

std::string_view family_name(Family family) {
  switch (family) {
    case Family::ContentOnly: return "content-only";
    case Family::Generic: return "generic";
    case Family::Hermes: return "hermes";
    case Family::Llama3: return "llama3";
    case Family::Mistral: return "mistral";
    case Family::MistralArgs: return "mistral-args";
    case Family::GptOss: return "gpt-oss";
    case Family::DeepSeekR1: return "deepseek-r1";
    case Family::DeepSeekV3: return "deepseek-v3";
    case Family::Qwen3Coder: return "qwen3-coder";
    case Family::Glm45: return "glm-4.5";
    case Family::FunctionaryV32: return "functionary-v3.2";
    case Family::CommandR7B: return "command-r7b";
  }
  return "unknown";
}

ReasoningFormat parse_reasoning_format(std::string_view name) {
  if (name == "none") return ReasoningFormat::None;
  if (name == "deepseek" || name == "deepseek-legacy") return ReasoningFormat::Deepseek;
  if (name == "auto") return ReasoningFormat::Auto;
  throw_error("unknown reasoning format '{}' (none, deepseek, auto)", name);
}

std::string_view reasoning_format_name(ReasoningFormat format) {
  switch (format) {
    case ReasoningFormat::None: return "none";
    case ReasoningFormat::Deepseek: return "deepseek";
    case ReasoningFormat::Auto: return "auto";
  }
  return "auto";
}

}  // namespace okapi::chat
