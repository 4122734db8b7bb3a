#include "server/template_context.hpp"

#include <array>

#include "core/error.hpp"

namespace okapi::server {

namespace {

std::string local_time(std::time_t now, const char* format) {
  std::tm local{};
  localtime_r(&now, &local);
  std::array<char, 64> buffer{};
  const size_t n = std::strftime(buffer.data(), buffer.size(), format, &local);
  return std::string(buffer.data(), n);
}

}  // namespace

ReasoningMode parse_reasoning_mode(std::string_view name) {
  // llama.cpp's is_truthy / is_falsey / is_autoy.
  if (name == "on" || name == "enabled" || name == "true" || name == "1") return ReasoningMode::On;
  if (name == "off" || name == "disabled" || name == "false" || name == "0") return ReasoningMode::Off;
  if (name == "auto" || name == "-1") return ReasoningMode::Auto;
  throw_usage_error("--reasoning takes on, off or auto, got '{}'", name);
}

Json template_context(const TemplateDefaults& defaults, const Json& tools, std::string_view template_source,
                      std::time_t now) {
  Json context = Json::object();
  context["datetime"] = local_time(now, "%b %d %Y");
  context["date_string"] = local_time(now, "%d %b %Y");
  // firefunction-v2 appends `functions` to its system prompt (llama.cpp's handler gave it the
  // tools so); other templates do not get the name, which some test with `is defined`.
  if (template_source.find("Available functions as JSON spec") != std::string_view::npos)
    context["functions"] = tools.is_array() && !tools.empty() ? tools.dump(2) : std::string();
  for (const auto& [key, value] : defaults.kwargs.items()) context[key] = value;
  if (defaults.reasoning != ReasoningMode::Auto) context["enable_thinking"] = defaults.reasoning == ReasoningMode::On;
  return context;
}

Json parse_template_kwargs_flag(std::string_view text) {
  Json parsed = Json::parse(text, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object())
    throw_usage_error("--chat-template-kwargs must be a JSON object, e.g. '{{\"enable_thinking\": false}}', got '{}'",
                      text);
  return parsed;
}

}  // namespace okapi::server
