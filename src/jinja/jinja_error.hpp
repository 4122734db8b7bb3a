// Internal error helpers of the Jinja renderer: every error becomes a jinja::TemplateError whose
// message names the template and line.
#pragma once
#include <fmt/format.h>

#include <string>

#include "jinja/chat_template.hpp"

namespace okapi::jinja {

[[noreturn]] inline void fail_at(const std::string& template_name, int line, const std::string& message) {
  throw TemplateError(fmt::format("{}, line {}: {}", template_name, line, message));
}

}  // namespace okapi::jinja
