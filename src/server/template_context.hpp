// The variables llama-server gives every chat template besides the conversation (common/chat.cpp):
// `datetime` ("Nov 28 2026") and `date_string` ("28 Nov 2026") in local time, `functions` (the
// tools as JSON) for firefunction-v2, whose template reads it; then the server's
// --chat-template-kwargs and --reasoning (enable_thinking). A request's chat_template_kwargs
// override all of them.
#pragma once
#include <ctime>
#include <string_view>

#include <nlohmann/json.hpp>

namespace okapi::server {

using Json = nlohmann::ordered_json;

// --reasoning: thinking on or off in every prompt, or auto (on where the template supports it,
// unless a reasoning budget of 0 turns it off).
enum class ReasoningMode { Auto, On, Off };
ReasoningMode parse_reasoning_mode(std::string_view name);  // on|off|auto (and llama.cpp's true/false/1/0)

struct TemplateDefaults {
  Json kwargs = Json::object();  // --chat-template-kwargs
  ReasoningMode reasoning = ReasoningMode::Auto;
};

// The template variables a request starts from, before its own chat_template_kwargs.
Json template_context(const TemplateDefaults& defaults, const Json& tools, std::string_view template_source,
                      std::time_t now);

// --chat-template-kwargs: a JSON object (throws okapi::Error naming the flag otherwise).
Json parse_template_kwargs_flag(std::string_view text);

}  // namespace okapi::server
