// Jinja2's parser (jinja2/parser.py) over okapi's tokens: statements and expressions with the same
// precedence, and a bounded nesting depth so hostile templates cannot exhaust the stack.
#pragma once
#include <string>
#include <vector>

#include "jinja/jinja_ast.hpp"
#include "jinja/jinja_lexer.hpp"

namespace okapi::jinja {

inline constexpr int kMaxParseDepth = 256;

// Throws TemplateError (template name and line) on a syntax error.
StmtList parse_template(const std::vector<Token>& tokens, const std::string& template_name);

}  // namespace okapi::jinja
