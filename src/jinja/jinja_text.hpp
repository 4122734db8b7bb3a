// Text helpers for the Jinja renderer: Python's view of a str as code points over okapi's UTF-8
// strings. Invalid UTF-8 bytes decode to U+DC80..U+DCFF (Python's "surrogateescape") and encode
// back to the same byte, so any input round-trips and nothing reads out of bounds.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace okapi::jinja {

std::u32string decode_utf8(std::string_view text);
std::string encode_utf8(std::u32string_view code_points);
void append_utf8(std::string& out, char32_t code_point);
std::size_t count_code_points(std::string_view text);
// The byte offset where each code point of `text` starts (as decode_utf8 splits it), then text.size().
std::vector<std::size_t> code_point_offsets(std::string_view text);

// Python's str.isspace() (and the regex \s of Jinja's lexer) for one code point.
bool is_python_space(char32_t c);
bool is_python_printable(char32_t c);
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_cased_letter(char32_t c);
bool is_alpha(char32_t c);
bool is_digit(char32_t c);

std::string upper(std::string_view text);
std::string lower(std::string_view text);
std::string title(std::string_view text);       // Python str.title()
std::string capitalize(std::string_view text);  // Python str.capitalize()

// str.strip / lstrip / rstrip: chars empty strips whitespace, else any code point of chars.
std::string strip(std::string_view text, bool left, bool right, const std::u32string* chars);
// The same as the byte range [first, second) of text that is kept.
std::pair<std::size_t, std::size_t> strip_range(std::string_view text, bool left, bool right, const std::u32string* chars);

// Python repr() of a str: quotes chosen as Python does, escapes for non-printable code points.
std::string python_repr(std::string_view text);

}  // namespace okapi::jinja
