// llama.cpp's built-in chat templates (src/llama-chat.cpp: the names --chat-template takes, and
// the formats llama-server's --no-jinja renders), carried as Jinja sources that write what
// llama.cpp's llm_chat_apply_template writes, byte for byte (message text parts joined with "\n"
// before, as llama-server does). Being Jinja, they render through okapi's one template path:
// message text stays caller text, so control tokens in it are never read as such.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace okapi::runtime {

// Every built-in name, sorted (chatml, command-r, deepseek3, gemma, llama2, llama3, ...).
const std::vector<std::string>& builtin_template_names();

// The Jinja source of built-in template `name`, or nullopt for a name llama.cpp does not have.
std::optional<std::string> builtin_template(std::string_view name);

// llama.cpp's llm_chat_detect_template: the built-in that a template (a name, or a model's Jinja
// source) is, from the markers in it; nullopt when it resembles none.
std::optional<std::string> detect_builtin_template(std::string_view template_text);

}  // namespace okapi::runtime
