// Internal error helpers of the Jinja renderer: every error becomes a chat::TemplateError whose
// message names the template and line.
#pragma once
#include <fmt/format.h>

#include <string>

#include "chat/chat_template.hpp"

namespace okapi::chat::jinja {

[[noreturn]] inline void fail_at(const std::string& template_name, int line, const std::string& message) {
  throw TemplateError(fmt::format("{}, line {}: {}", template_name, line, message));
}

}  // namespace okapi::chat::jinja
