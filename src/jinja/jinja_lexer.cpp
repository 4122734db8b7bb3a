#include "jinja/jinja_lexer.hpp"

#include <array>
#include <cctype>

#include "jinja/jinja_error.hpp"
#include "jinja/jinja_text.hpp"

namespace okapi::jinja {

namespace {

// Jinja2 normalizes \r\n and \r to \n and drops one trailing newline (keep_trailing_newline off).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length of the Python-whitespace code point at pos, or 0.
std::size_t space_at(std::string_view s, std::size_t pos) {
  if (pos >= s.size()) return 0;
  const auto c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return is_python_space(c) ? 1 : 0;
  std::size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (pos + length > s.size()) return 0;
  const std::u32string cps = decode_utf8(s.substr(pos, length));
  return cps.size() == 1 && is_python_space(cps[0]) ? length : 0;
}

std::size_t skip_spaces(std::string_view s, std::size_t pos) {
  while (std::size_t n = space_at(s, pos)) pos += n;
  return pos;
}

std::string rstrip_spaces(std::string_view text) { return strip(text, false, true, nullptr); }

bool all_spaces(std::string_view text) {
  if (text.empty()) return false;
  for (char32_t c : decode_utf8(text)) {
    if (!is_python_space(c)) return false;
  }
  return true;
}

int count_newlines(std::string_view text) {
  int n = 0;
  for (char c : text) n += c == '\n' ? 1 : 0;
  return n;
}

bool is_name_start(unsigned char c) { return std::isalpha(c) || c == '_' || c >= 0x80; }
bool is_name_char(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : source_(normalize_newlines(source)), name_(name) {}

  std::vector<Token> run() {
    std::size_t pos = 0;
    bool line_starting = true;
    const std::string_view s = source_;
    while (pos < s.size()) {
      // The next tag opener ({{, {%, {#) from pos.
      std::size_t open = pos;
      while (true) {
        open = s.find('{', open);
        if (open == std::string_view::npos || open + 1 >= s.size()) {
          open = std::string_view::npos;
          break;
        }
        const char next = s[open + 1];
        if (next == '{' || next == '%' || next == '#') break;
        ++open;
      }
      if (open == std::string_view::npos) {
        emit(TokenType::Data, std::string(s.substr(pos)));
        line_ += count_newlines(s.substr(pos));
        return finish();
      }
      const char kind = s[open + 1];
      const char sign = open + 2 < s.size() && (s[open + 2] == '-' || s[open + 2] == '+') ? s[open + 2] : '\0';
      std::string text(s.substr(pos, open - pos));
      const int text_newlines = count_newlines(text);
      if (sign == '-') {
        text = rstrip_spaces(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: blocks and comments only
        const std::size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_start > 0 || line_starting) && all_spaces(std::string_view(text).substr(line_start))) {
          text.resize(line_start);
        }
      }
      emit(TokenType::Data, text);
      line_ += text_newlines;
      pos = open + 2 + (sign != '\0' ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(pos, line_starting);
      } else if (kind == '%' && raw_begin(pos, pos)) {
        pos = lex_raw(pos, line_starting);
      } else {
        pos = lex_tag(pos, kind == '{', line_starting);
      }
    }
    return finish();
  }

 private:
  std::vector<Token> finish() {
    tokens_.push_back(Token{TokenType::End, "", line_});
    return std::move(tokens_);
  }

  void emit(TokenType type, std::string text) {
    if (type == TokenType::Data && text.empty()) return;
    tokens_.push_back(Token{type, std::move(text), line_});
  }

  [[noreturn]] void fail(const std::string& message) { fail_at(name_, line_, message); }

  // Matches a tag end at pos for a block (`+%}`, `-%}\s*`, `%}\n?`) or a comment (`#`), giving
  // the position after it and whether the match ended with a newline.
  bool block_end(std::size_t pos, char closer, std::size_t& after, bool& ended_newline) const {
    const std::string_view s = source_;
    if (pos + 2 < s.size() + 0 && (s[pos] == '+' || s[pos] == '-') && s[pos + 1] == closer && s[pos + 2] == '}') {
      after = pos + 3;
      if (s[pos] == '-') after = skip_spaces(s, after);
    } else if (pos + 1 < s.size() && s[pos] == closer && s[pos + 1] == '}') {
      after = pos + 2;
      if (after < s.size() && s[after] == '\n') ++after;  // trim_blocks
    } else {
      return false;
    }
    ended_newline = s[after - 1] == '\n';
    return true;
  }

  std::size_t lex_comment(std::size_t pos, bool& line_starting) {
    const std::string_view s = source_;
    for (std::size_t p = pos; p < s.size(); ++p) {
      std::size_t after = 0;
      if (block_end(p, '#', after, line_starting)) {
        line_ += count_newlines(s.substr(pos, after - pos));
        return after;
      }
    }
    fail("Missing end of comment tag");
  }

  // `{%[-+]? \s* raw \s* (-%}\s* | %})` with pos after the opener's sign.
  bool raw_begin(std::size_t pos, std::size_t& after) const {
    const std::string_view s = source_;
    std::size_t p = skip_spaces(s, pos);
    if (s.substr(p, 3) != "raw") return false;
    p = skip_spaces(s, p + 3);
    if (s.substr(p, 3) == "-%}") {
      after = skip_spaces(s, p + 3);
      return true;
    }
    if (s.substr(p, 2) == "%}") {
      after = p + 2;
      return true;
    }
    return false;
  }

  std::size_t lex_raw(std::size_t pos, bool& line_starting) {
    const std::string_view s = source_;
    std::size_t after_begin = pos;
    raw_begin(pos, after_begin);
    line_ += count_newlines(s.substr(pos, after_begin - pos));
    const bool raw_line_starting = s[after_begin - 1] == '\n';
    for (std::size_t p = after_begin; p + 1 < s.size(); ++p) {
      if (s[p] != '{' || s[p + 1] != '%') continue;
      const char sign = p + 2 < s.size() && (s[p + 2] == '-' || s[p + 2] == '+') ? s[p + 2] : '\0';
      std::size_t q = skip_spaces(s, p + 2 + (sign ? 1 : 0));
      if (s.substr(q, 6) != "endraw") continue;
      q = skip_spaces(s, q + 6);
      std::size_t after = 0;
      bool ended_newline = false;
      if (!block_end(q, '%', after, ended_newline)) continue;
      std::string text(s.substr(after_begin, p - after_begin));
      const int newlines = count_newlines(text);
      if (sign == '-') {
        text = rstrip_spaces(text);
      } else if (sign != '+') {
        const std::size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_start > 0 || raw_line_starting) && all_spaces(std::string_view(text).substr(line_start))) text.resize(line_start);
      }
      emit(TokenType::Data, text);
      line_ += newlines + count_newlines(s.substr(p, after - p));
      line_starting = ended_newline;
      return after;
    }
    fail("Missing end of raw directive");
  }

  std::size_t lex_tag(std::size_t pos, bool variable, bool& line_starting) {
    const std::string_view s = source_;
    tokens_.push_back(Token{variable ? TokenType::VariableBegin : TokenType::BlockBegin, "", line_});
    std::vector<char> balancing;
    while (true) {
      if (balancing.empty()) {
        std::size_t after = 0;
        bool ended_newline = false;
        bool matched = false;
        if (variable) {
          if (s.substr(pos, 3) == "-}}") {
            after = skip_spaces(s, pos + 3);
            matched = true;
          } else if (s.substr(pos, 2) == "}}") {
            after = pos + 2;
            matched = true;
          }
          if (matched) ended_newline = s[after - 1] == '\n';
        } else {
          matched = block_end(pos, '%', after, ended_newline);
        }
        if (matched) {
          tokens_.push_back(Token{variable ? TokenType::VariableEnd : TokenType::BlockEnd, "", line_});
          line_ += count_newlines(s.substr(pos, after - pos));
          line_starting = ended_newline;
          return after;
        }
      }
      if (pos >= s.size()) {
        fail(variable ? "unexpected end of template, expected end of print statement ('}}')"
                      : "unexpected end of template, expected end of block statement ('%}')");
      }
      if (const std::size_t n = space_at(s, pos)) {
        if (s[pos] == '\n') ++line_;
        pos += n;
        continue;
      }
      const auto c = static_cast<unsigned char>(s[pos]);
      if (std::isdigit(c)) {
        pos = lex_number(pos);
      } else if (is_name_start(c)) {
        std::size_t end = pos + 1;
        while (end < s.size() && is_name_char(static_cast<unsigned char>(s[end]))) ++end;
        emit_token(TokenType::Name, std::string(s.substr(pos, end - pos)));
        pos = end;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        pos = lex_operator(pos, balancing);
      }
    }
  }

  void emit_token(TokenType type, std::string text) { tokens_.push_back(Token{type, std::move(text), line_}); }

  // Jinja2's float_re / integer_re (with `_` separators), float tried first.
  std::size_t lex_number(std::size_t pos) {
    const std::string_view s = source_;
    auto digits = [&](std::size_t p) {  // (\d+_)*\d+ ; returns end or p when none
      std::size_t q = p;
      while (true) {
        std::size_t r = q;
        while (r < s.size() && std::isdigit(static_cast<unsigned char>(s[r]))) ++r;
        if (r == q) return q == p ? p : q - 1;  // a trailing '_' is not part of it
        q = r;
        if (q < s.size() && s[q] == '_' && q + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[q + 1]))) {
          ++q;
          continue;
        }
        return q;
      }
    };
    auto exponent = [&](std::size_t p) -> std::size_t {
      if (p >= s.size() || (s[p] != 'e' && s[p] != 'E')) return 0;
      std::size_t q = p + 1;
      if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
      const std::size_t end = digits(q);
      return end == q ? 0 : end;
    };
    auto strip_underscores = [](std::string_view text) {
      std::string out;
      for (char ch : text) {
        if (ch != '_') out.push_back(ch);
      }
      return out;
    };
    const bool after_dot = pos > 0 && s[pos - 1] == '.';
    const std::size_t int_end = digits(pos);
    if (!after_dot) {
      std::size_t float_end = 0;
      if (int_end < s.size() && s[int_end] == '.') {
        const std::size_t frac_end = digits(int_end + 1);
        if (frac_end > int_end + 1) {
          float_end = frac_end;
          if (std::size_t e = exponent(frac_end)) float_end = e;
        }
      }
      if (float_end == 0) float_end = exponent(int_end);
      if (float_end != 0) {
        emit_token(TokenType::Float, strip_underscores(s.substr(pos, float_end - pos)));
        return float_end;
      }
    }
    // Integers: 0b / 0o / 0x prefixes, [1-9](_?\d)*, 0(_?0)*
    if (s[pos] == '0' && pos + 1 < s.size() && std::string_view("bBoOxX").find(s[pos + 1]) != std::string_view::npos) {
      const char base = static_cast<char>(std::tolower(static_cast<unsigned char>(s[pos + 1])));
      auto valid = [base](char ch) {
        const auto u = static_cast<unsigned char>(ch);
        if (base == 'b') return ch == '0' || ch == '1';
        if (base == 'o') return ch >= '0' && ch <= '7';
        return std::isxdigit(u) != 0;
      };
      std::size_t q = pos + 2;
      while (q < s.size()) {
        if (valid(s[q])) {
          ++q;
        } else if (s[q] == '_' && q + 1 < s.size() && valid(s[q + 1])) {
          q += 2;
        } else {
          break;
        }
      }
      if (q > pos + 2) {
        emit_token(TokenType::Integer, strip_underscores(s.substr(pos, q - pos)));
        return q;
      }
    }
    std::size_t end = pos + 1;
    if (s[pos] == '0') {
      while (end < s.size() && (s[end] == '0' || (s[end] == '_' && end + 1 < s.size() && s[end + 1] == '0'))) ++end;
    } else {
      end = int_end;
    }
    emit_token(TokenType::Integer, strip_underscores(s.substr(pos, end - pos)));
    return end;
  }

  // A quoted string with Python's unicode-escape rules for backslashes.
  std::size_t lex_string(std::size_t pos) {
    const std::string_view s = source_;
    const char quote = s[pos];
    std::size_t end = pos + 1;
    while (end < s.size() && s[end] != quote) end += s[end] == '\\' ? 2 : 1;
    if (end >= s.size()) fail("unexpected char " + python_repr(std::string(1, quote)) + " at " + std::to_string(pos));
    const std::string_view body = s.substr(pos + 1, end - pos - 1);
    emit_token(TokenType::String, unescape(body));
    line_ += count_newlines(body);
    return end + 1;
  }

  std::string unescape(std::string_view body) {
    std::string out;
    for (std::size_t i = 0; i < body.size(); ++i) {
      if (body[i] != '\\' || i + 1 >= body.size()) {
        out.push_back(body[i]);
        continue;
      }
      const char e = body[++i];
      auto hex = [&](std::size_t count) {
        std::uint32_t code = 0;
        for (std::size_t k = 1; k <= count; ++k) {
          if (i + k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + k]))) {
            fail("truncated escape in string literal");
          }
          code = code * 16 + static_cast<std::uint32_t>(std::stoi(std::string(1, body[i + k]), nullptr, 16));
        }
        i += count;
        if (code > 0x10FFFF) fail("illegal Unicode character in string literal");
        append_utf8(out, static_cast<char32_t>(code));
      };
      switch (e) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          if (e >= '0' && e <= '7') {
            std::uint32_t code = static_cast<std::uint32_t>(e - '0');
            for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
              code = code * 8 + static_cast<std::uint32_t>(body[++i] - '0');
            }
            append_utf8(out, static_cast<char32_t>(code));
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    return out;
  }

  std::size_t lex_operator(std::size_t pos, std::vector<char>& balancing) {
    const std::string_view s = source_;
    static constexpr std::array<std::string_view, 6> kTwoChar = {"//", "**", "==", "!=", ">=", "<="};
    for (auto op : kTwoChar) {
      if (s.substr(pos, 2) == op) {
        emit_token(TokenType::Operator, std::string(op));
        return pos + 2;
      }
    }
    const char c = s[pos];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      fail("unexpected char " + python_repr(encode_utf8(decode_utf8(s.substr(pos, 1)))) + " at " + std::to_string(pos));
    }
    if (c == '{') balancing.push_back('}');
    if (c == '(') balancing.push_back(')');
    if (c == '[') balancing.push_back(']');
    if (c == '}' || c == ')' || c == ']') {
      if (balancing.empty()) fail(fmt::format("unexpected '{}'", c));
      if (balancing.back() != c) fail(fmt::format("unexpected '{}', expected '{}'", c, balancing.back()));
      balancing.pop_back();
    }
    emit_token(TokenType::Operator, std::string(1, c));
    return pos + 1;
  }

  std::string source_;
  const std::string& name_;
  std::vector<Token> tokens_;
  int line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& template_name) {
  return Lexer(source, template_name).run();
}

}  // namespace okapi::jinja
