// Jinja2's lexer with trim_blocks and lstrip_blocks on (as Hugging Face configures it): template
// text becomes data tokens and the insides of {{ }} / {% %} become expression tokens, with the
// same whitespace rules as jinja2/lexer.py (newlines normalized, one trailing newline dropped,
// `-` / `+` modifiers, raw blocks, comments, bracket balancing inside tags).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace okapi::jinja {

enum class TokenType { Data, VariableBegin, VariableEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Operator, End };

struct Token {
  TokenType type;
  std::string text;  // data text, name, unescaped string value, number text or operator
  int line = 1;
};

// Throws TemplateError (with template_name and line) on a lexical error.
std::vector<Token> tokenize(std::string_view source, const std::string& template_name);

}  // namespace okapi::jinja
