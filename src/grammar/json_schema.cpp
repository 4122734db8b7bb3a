#include "grammar/json_schema.hpp"

#include "grammar/grammar.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include <fmt/format.h>

// The rule shapes follow llama.cpp's common/json-schema-to-grammar.cpp (so grammars written for
// llama-server read the same), with these differences, all so that every string the grammar
// matches is valid under the schema (a random walk through the grammar never produces an invalid
// instance):
//  - what cannot be expressed is a SchemaError, never silently dropped (llama.cpp ignores `not`,
//    `uniqueItems`, `multipleOf`, ... and degrades an unsupported `pattern` to any string);
//  - `pattern` text is JSON-encoded inside the string (a `"` or `\` in the pattern becomes an
//    escape), `.` and classes never match a raw `"`, `\` or control character;
//  - `char` never writes a surrogate \u escape (nlohmann and strict parsers reject lone ones);
//  - `number` exponents have at most 2 digits (a double holds them);
//  - `date` only has real days of real months (no 02-30), years 1000-9999;
//  - `allOf` merges every keyword (types, enums, bounds), distributes over `anyOf`/`oneOf`;
//    keywords beside `$ref`/`anyOf`/`oneOf` constrain too (llama.cpp ignores them);
//  - `required` names missing from `properties` are still required;
//  - `number` takes `minimum`/`maximum` (rounded inwards to integers).
namespace okapi::grammar {
namespace {

// Bounds against hostile schemas: nesting of schemas (and $ref chains), repetition counts the
// matcher would unroll, alternatives from distributing allOf over anyOf, the grammar's size.
constexpr int kMaxDepth = 128;
constexpr int kMaxRepetition = 1000;
constexpr size_t kMaxAlternatives = 64;
constexpr size_t kMaxGrammarBytes = size_t{4} << 20;
constexpr int kMaxPatternDepth = 64;
constexpr size_t kMaxProperties = 1000;
// Schemas visited for one grammar: keywords beside anyOf copy a subschema into every branch, so
// nested ones would multiply the work.
constexpr size_t kMaxVisits = 100000;
// Integers beyond 16 digits are not generated (as llama.cpp: [1-9] [0-9]{0,15}).
constexpr int64_t kMaxMagnitude = 9999999999999999;

const char* const kSpaceRule = R"(| " " | "\n"{1,2} [ \t]{0,20})";

struct BuiltinRule {
  const char* name;
  const char* body;
  std::vector<const char*> deps;
};

const std::vector<BuiltinRule>& builtin_rules() {
  static const std::vector<BuiltinRule> rules = {
      {"boolean", R"(("true" | "false"))", {}},
      {"decimal-part", "[0-9]{1,16}", {}},
      {"integral-part", "[0] | [1-9] [0-9]{0,15}", {}},
      // The exponent has at most 2 digits (llama.cpp: up to 16), so numbers stay within a double:
      // strict parsers (nlohmann, the server's) refuse 1e5822980910019706.
      {"number", R"(("-"? integral-part) ("." decimal-part)? ([eE] [-+]? [0-9]{1,2})?)", {"integral-part", "decimal-part"}},
      {"integer", R"(("-"? integral-part))", {"integral-part"}},
      {"value", "object | array | string | number | boolean | null", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", R"("{" space ( string ":" space value ("," space string ":" space value)* )? space "}")", {"space", "string", "value"}},
      {"array", R"("[" space ( value ("," space value)* )? space "]")", {"space", "value"}},
      {"uuid", R"("\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"")", {}},
      {"char", R"([^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})))", {}},
      {"string", R"("\"" char* "\"")", {"char"}},
      {"null", R"("null")", {}},
      {"space", kSpaceRule, {}},
      // Formats. Days exist in their month (February stops at 28: the year is not known).
      {"date",
       R"([1-9] [0-9]{3} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [1-2] [0-9] | "30" ) | "02" "-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ))",
       {}},
      {"time", R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))", {}},
      {"date-time", R"(date "T" time)", {"date", "time"}},
      {"date-string", R"("\"" date "\"")", {"date"}},
      {"time-string", R"("\"" time "\"")", {"time"}},
      {"date-time-string", R"("\"" date-time "\"")", {"date-time"}},
  };
  return rules;
}

const BuiltinRule* find_builtin(std::string_view name) {
  for (const BuiltinRule& rule : builtin_rules())
    if (name == rule.name) return &rule;
  return nullptr;
}

bool is_reserved_name(const std::string& name) { return name == "root" || find_builtin(name) != nullptr; }

// Keywords that constrain instances in ways a context-free grammar of JSON text cannot express
// (or that this converter does not): refused rather than ignored.
const std::set<std::string, std::less<>>& unsupported_keywords() {
  static const std::set<std::string, std::less<>> keywords = {
      "not", "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired",
      "dependentSchemas", "dependencies", "unevaluatedProperties", "unevaluatedItems", "contains",
      "minContains", "maxContains", "$dynamicRef", "$recursiveRef", "contentSchema"};
  return keywords;
}

// Keywords that say nothing about which instances are valid, or that are handled where the
// schema is combined (allOf siblings): never a reason to merge.
bool is_annotation(std::string_view key) {
  static const std::set<std::string, std::less<>> keys = {
      "title", "description", "examples", "default", "$schema", "$id", "$comment", "deprecated", "readOnly",
      "writeOnly", "$defs", "definitions", "$anchor", "$dynamicAnchor", "$vocabulary", "contentMediaType",
      "contentEncoding", "nullable", "discriminator", "example", "strict"};
  return keys.count(key) > 0 || key.substr(0, 2) == "x-";
}

std::string pointer_escape(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

[[noreturn]] void fail(const std::string& pointer, const std::string& keyword, const std::string& what) {
  throw SchemaError(fmt::format("JSON schema {}/{}: {}", pointer, pointer_escape(keyword), what), keyword);
}

std::string repeat_string(std::string_view text, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += text;
  return out;
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += separator;
    out += parts[i];
  }
  return out;
}

// item{min,max} as GBNF; with a separator, items are separated by it. max < 0: unbounded.
std::string build_repetition(const std::string& item, int min_items, int max_items, const std::string& separator = "") {
  const bool has_max = max_items >= 0;
  if (max_items == 0) return "";
  if (min_items == 0 && max_items == 1) return item + "?";
  if (separator.empty()) {
    if (min_items == 1 && !has_max) return item + "+";
    if (min_items == 0 && !has_max) return item + "*";
    return fmt::format("{}{{{},{}}}", item, min_items, has_max ? std::to_string(max_items) : "");
  }
  std::string result = item + " " +
                       build_repetition("(" + separator + " " + item + ")", min_items == 0 ? 0 : min_items - 1,
                                        has_max ? max_items - 1 : -1);
  if (min_items == 0) result = "(" + result + ")?";
  return result;
}

// Integers in [min, max] (either side may be open) as GBNF, llama.cpp's digit-range rules.
void build_min_max_int(int64_t min_value, int64_t max_value, std::string& out, int decimals_left = 16, bool top_level = true) {
  const bool has_min = min_value != std::numeric_limits<int64_t>::min();
  const bool has_max = max_value != std::numeric_limits<int64_t>::max();
  auto digit_range = [&](char from, char to) {
    out += "[";
    out += from;
    if (from != to) {
      out += "-";
      out += to;
    }
    out += "]";
  };
  auto more_digits = [&](int min_digits, int max_digits) {
    out += "[0-9]";
    if (min_digits == max_digits && min_digits == 1) return;
    out += "{" + std::to_string(min_digits);
    if (max_digits != min_digits) {
      out += ",";
      if (max_digits != std::numeric_limits<int>::max()) out += std::to_string(max_digits);
    }
    out += "}";
  };
  std::function<void(std::string_view, std::string_view)> uniform_range = [&](std::string_view from, std::string_view to) {
    size_t i = 0;
    while (i < from.size() && i < to.size() && from[i] == to[i]) ++i;
    if (i > 0) out += "\"" + std::string(from.substr(0, i)) + "\"";
    if (i < from.size() && i < to.size()) {
      if (i > 0) out += " ";
      const size_t sub_len = from.size() - i - 1;
      if (sub_len > 0) {
        const std::string_view from_sub = from.substr(i + 1), to_sub = to.substr(i + 1);
        const std::string sub_zeros = repeat_string("0", sub_len), sub_nines = repeat_string("9", sub_len);
        bool to_reached = false;
        out += "(";
        if (from_sub == sub_zeros) {
          digit_range(from[i], static_cast<char>(to[i] - 1));
          out += " ";
          more_digits(static_cast<int>(sub_len), static_cast<int>(sub_len));
        } else {
          out += "[";
          out += from[i];
          out += "] (";
          uniform_range(from_sub, sub_nines);
          out += ")";
          if (from[i] < to[i] - 1) {
            out += " | ";
            if (to_sub == sub_nines) {
              digit_range(static_cast<char>(from[i] + 1), to[i]);
              to_reached = true;
            } else {
              digit_range(static_cast<char>(from[i] + 1), static_cast<char>(to[i] - 1));
            }
            out += " ";
            more_digits(static_cast<int>(sub_len), static_cast<int>(sub_len));
          }
        }
        if (!to_reached) {
          out += " | ";
          digit_range(to[i], to[i]);
          out += " ";
          uniform_range(sub_zeros, to_sub);
        }
        out += ")";
      } else {
        out += "[";
        out += from[i];
        out += "-";
        out += to[i];
        out += "]";
      }
    }
  };

  if (has_min && has_max) {
    if (min_value < 0 && max_value < 0) {
      out += "\"-\" (";
      build_min_max_int(-max_value, -min_value, out, decimals_left, true);
      out += ")";
      return;
    }
    if (min_value < 0) {
      out += "\"-\" (";
      build_min_max_int(0, -min_value, out, decimals_left, true);
      out += ") | ";
      min_value = 0;
    }
    std::string min_s = std::to_string(min_value);
    const std::string max_s = std::to_string(max_value);
    for (size_t digits = min_s.size(); digits < max_s.size(); ++digits) {
      uniform_range(min_s, repeat_string("9", digits));
      min_s = std::string(1, '1');
      min_s += repeat_string("0", digits);
      out += " | ";
    }
    uniform_range(min_s, max_s);
    return;
  }
  const int less_decimals = std::max(decimals_left - 1, 1);
  if (has_min) {
    if (min_value < 0) {
      out += "\"-\" (";
      build_min_max_int(std::numeric_limits<int64_t>::min(), -min_value, out, decimals_left, false);
      out += ") | [0] | [1-9] ";
      more_digits(0, decimals_left - 1);
    } else if (min_value == 0) {
      if (top_level) {
        out += "[0] | [1-9] ";
        more_digits(0, less_decimals);
      } else {
        more_digits(1, decimals_left);
      }
    } else if (min_value <= 9) {
      const char c = static_cast<char>('0' + min_value);
      const char range_start = top_level ? '1' : '0';
      if (c > range_start) {
        digit_range(range_start, static_cast<char>(c - 1));
        out += " ";
        more_digits(1, less_decimals);
        out += " | ";
      }
      digit_range(c, '9');
      out += " ";
      more_digits(0, less_decimals);
    } else {
      const std::string min_s = std::to_string(min_value);
      const int len = static_cast<int>(min_s.size());
      const char c = min_s[0];
      if (c > '1') {
        digit_range(top_level ? '1' : '0', static_cast<char>(c - 1));
        out += " ";
        more_digits(len, less_decimals);
        out += " | ";
      }
      digit_range(c, c);
      out += " (";
      const std::string rest = min_s.substr(1);
      if (rest.size() > 1 && rest[0] == '0') {
        // "00" as a number is 0 and would allow one digit (llama.cpp lets 10 pass minimum 100):
        // as many digits at least as `rest`, and no smaller.
        uniform_range(rest, repeat_string("9", rest.size()));
        if (static_cast<int>(rest.size()) < less_decimals) {
          out += " | ";
          more_digits(static_cast<int>(rest.size()) + 1, less_decimals);
        }
      } else {
        build_min_max_int(std::stoll(rest), std::numeric_limits<int64_t>::max(), out, less_decimals, false);
      }
      out += ")";
      if (c < '9') {
        out += " | ";
        digit_range(static_cast<char>(c + 1), '9');
        out += " ";
        more_digits(len - 1, less_decimals);
      }
    }
    return;
  }
  if (has_max) {
    if (max_value >= 0) {
      if (top_level) {
        out += "\"-\" [1-9] ";
        more_digits(0, less_decimals);
        out += " | ";
      }
      build_min_max_int(0, max_value, out, decimals_left, true);
    } else {
      // top_level: the digits right after "-" may not start with 0 (llama.cpp passes false
      // here and writes "-05").
      out += "\"-\" (";
      build_min_max_int(-max_value, std::numeric_limits<int64_t>::max(), out, decimals_left, true);
      out += ")";
    }
  }
}

// ---- JSON types -------------------------------------------------------------------------------

const std::vector<std::string>& all_types() {
  static const std::vector<std::string> types = {"null", "boolean", "object", "array", "number", "integer", "string"};
  return types;
}

bool value_has_type(const Json& value, const std::string& type) {
  if (type == "null") return value.is_null();
  if (type == "boolean") return value.is_boolean();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    if (value.is_number_float()) {
      const double d = value.get<double>();
      return std::isfinite(d) && std::floor(d) == d;
    }
    return false;
  }
  return false;
}

// The types a schema's "type" allows (every type when absent); "number" includes "integer".
std::set<std::string> type_set(const Json& schema, const std::string& pointer) {
  std::set<std::string> types;
  if (!schema.contains("type")) {
    types.insert(all_types().begin(), all_types().end());
    return types;
  }
  const Json& type = schema.at("type");
  std::vector<Json> names;
  if (type.is_array()) names.assign(type.begin(), type.end());
  else names.push_back(type);
  if (names.empty()) fail(pointer, "type", "an empty list of types");
  for (const Json& name : names) {
    if (!name.is_string()) fail(pointer, "type", fmt::format("{} is not a type name", name.dump()));
    const std::string text = name.get<std::string>();
    if (std::find(all_types().begin(), all_types().end(), text) == all_types().end())
      fail(pointer, "type", fmt::format("unknown type \"{}\"", text));
    types.insert(text);
    if (text == "number") types.insert("integer");
  }
  return types;
}

bool value_matches_types(const Json& value, const std::set<std::string>& types) {
  for (const std::string& type : types)
    if (value_has_type(value, type)) return true;
  return false;
}

int count_keyword(const Json& schema, const char* key, const std::string& pointer) {
  const Json& value = schema.at(key);
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (std::floor(d) == d && d >= 0) return d >= 2147483647.0 ? std::numeric_limits<int>::max() : static_cast<int>(d);
  }
  if (value.is_number_unsigned()) {
    const uint64_t n = value.get<uint64_t>();
    return n > static_cast<uint64_t>(std::numeric_limits<int>::max()) ? std::numeric_limits<int>::max() : static_cast<int>(n);
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return static_cast<int>(std::min<int64_t>(value.get<int64_t>(), std::numeric_limits<int>::max()));
  fail(pointer, key, fmt::format("{} is not a non-negative integer", value.dump()));
}

// Repetition bounds from min/max keywords, checked and capped: a minimum above kMaxRepetition
// cannot be generated; a maximum above it is lowered to it (fewer items are still valid).
std::pair<int, int> repetition_bounds(const Json& schema, const char* min_key, const char* max_key, const std::string& pointer) {
  int min_count = schema.contains(min_key) ? count_keyword(schema, min_key, pointer) : 0;
  int max_count = schema.contains(max_key) ? count_keyword(schema, max_key, pointer) : -1;
  if (max_count >= 0 && min_count > max_count)
    fail(pointer, min_key, fmt::format("{} {} is above {} {}: nothing is valid", min_key, min_count, max_key, max_count));
  if (min_count > kMaxRepetition)
    fail(pointer, min_key, fmt::format("{} {} is more than the {} a grammar can require", min_key, min_count, kMaxRepetition));
  if (max_count > kMaxRepetition) max_count = kMaxRepetition;
  return {min_count, max_count};
}

// A numeric bound as a double; draft-4 boolean exclusive flags are read by the caller.
double number_keyword(const Json& schema, const char* key, const std::string& pointer) {
  const Json& value = schema.at(key);
  if (!value.is_number()) fail(pointer, key, fmt::format("{} is not a number", value.dump()));
  return value.get<double>();
}

// The integer bounds [lo, hi] that keep every generated number inside the schema's minimum,
// maximum and exclusive bounds (fractional bounds rounded inwards).
std::pair<std::optional<int64_t>, std::optional<int64_t>> integer_bounds(const Json& schema, const std::string& pointer) {
  std::optional<double> lo, hi;
  bool lo_exclusive = false, hi_exclusive = false;
  auto tighten_lo = [&](double v, bool exclusive) {
    if (!lo || v > *lo || (v == *lo && exclusive)) {
      lo = v;
      lo_exclusive = exclusive;
    }
  };
  auto tighten_hi = [&](double v, bool exclusive) {
    if (!hi || v < *hi || (v == *hi && exclusive)) {
      hi = v;
      hi_exclusive = exclusive;
    }
  };
  const bool draft4_min = schema.contains("exclusiveMinimum") && schema.at("exclusiveMinimum").is_boolean();
  const bool draft4_max = schema.contains("exclusiveMaximum") && schema.at("exclusiveMaximum").is_boolean();
  if (schema.contains("minimum"))
    tighten_lo(number_keyword(schema, "minimum", pointer), draft4_min && schema.at("exclusiveMinimum").get<bool>());
  if (schema.contains("maximum"))
    tighten_hi(number_keyword(schema, "maximum", pointer), draft4_max && schema.at("exclusiveMaximum").get<bool>());
  if (schema.contains("exclusiveMinimum") && !draft4_min) tighten_lo(number_keyword(schema, "exclusiveMinimum", pointer), true);
  if (schema.contains("exclusiveMaximum") && !draft4_max) tighten_hi(number_keyword(schema, "exclusiveMaximum", pointer), true);
  std::optional<int64_t> lo_int, hi_int;
  const double limit = static_cast<double>(kMaxMagnitude);
  if (lo) {
    double v = lo_exclusive ? std::floor(*lo) + 1 : std::ceil(*lo);
    if (v > limit) fail(pointer, "minimum", fmt::format("{} is beyond the 16-digit integers a grammar generates", *lo));
    lo_int = static_cast<int64_t>(std::max(v, -limit));
  }
  if (hi) {
    double v = hi_exclusive ? std::ceil(*hi) - 1 : std::floor(*hi);
    if (v < -limit) fail(pointer, "maximum", fmt::format("{} is beyond the 16-digit integers a grammar generates", *hi));
    hi_int = static_cast<int64_t>(std::min(v, limit));
  }
  if (lo_int && hi_int && *lo_int > *hi_int)
    fail(pointer, schema.contains("minimum") ? "minimum" : "exclusiveMinimum",
         fmt::format("no integer lies between the bounds {} and {}", *lo, *hi));
  return {lo_int, hi_int};
}

// ---- pattern (regular expression) to GBNF -------------------------------------------------------

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges normalize(Ranges ranges) {
  std::sort(ranges.begin(), ranges.end());
  Ranges out;
  for (const auto& r : ranges) {
    if (!out.empty() && r.first <= out.back().second + 1) out.back().second = std::max(out.back().second, r.second);
    else out.push_back(r);
  }
  return out;
}

Ranges complement(const Ranges& ranges, uint32_t max_code_point = 0x10FFFF) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& r : normalize(ranges)) {
    if (r.first > max_code_point) break;
    if (r.first > next) out.push_back({next, r.first - 1});
    next = r.second + 1;
  }
  if (next <= max_code_point) out.push_back({next, max_code_point});
  return out;
}

Ranges intersect(const Ranges& a, const Ranges& b) {
  Ranges out;
  for (const auto& x : normalize(a))
    for (const auto& y : normalize(b)) {
      const uint32_t lo = std::max(x.first, y.first), hi = std::min(x.second, y.second);
      if (lo <= hi) out.push_back({lo, hi});
    }
  return normalize(out);
}

bool contains(const Ranges& ranges, uint32_t c) {
  for (const auto& r : ranges)
    if (c >= r.first && c <= r.second) return true;
  return false;
}

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// How code point `c` is written inside a JSON string (its escape when it needs one).
std::string json_encoded(uint32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: break;
  }
  if (c < 0x20) return fmt::format("\\u{:04x}", c);
  std::string out;
  append_utf8(out, c);
  return out;
}

std::string class_code_point(uint32_t c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return std::string(1, static_cast<char>(c));
  if (c < 0x100) return fmt::format("\\x{:02X}", c);
  if (c < 0x10000) return fmt::format("\\u{:04X}", c);
  return fmt::format("\\U{:08X}", c);
}

// Code points a JSON string may hold as they are (no escape): not `"`, `\`, controls, surrogates.
const Ranges& raw_json_ranges() {
  static const Ranges ranges = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xD7FF}, {0xE000, 0x10FFFF}};
  return ranges;
}

// A GBNF expression for one code point of `set`, as JSON string text. Control characters other
// than tab, newline and carriage return are left out (rarely meant; keeps negated classes small).
std::string charset_expression(const Ranges& set) {
  const Ranges raw = intersect(set, raw_json_ranges());
  std::vector<std::string> alternatives;
  if (!raw.empty()) {
    std::string cls = "[";
    for (const auto& r : raw) {
      cls += class_code_point(r.first);
      if (r.second != r.first) {
        if (r.second != r.first + 1) cls += '-';
        cls += class_code_point(r.second);
      }
    }
    alternatives.push_back(cls + "]");
  }
  for (uint32_t c : {uint32_t{'"'}, uint32_t{'\\'}, uint32_t{'\n'}, uint32_t{'\r'}, uint32_t{'\t'}})
    if (contains(set, c)) alternatives.push_back(gbnf_literal(json_encoded(c)));
  if (alternatives.empty()) return "";
  if (alternatives.size() == 1) return alternatives[0];
  return "(" + join(alternatives, " | ") + ")";
}

// ASCII forms of \d \w \s (Python's are Unicode-wide; generating ASCII stays valid); their
// complements are taken within printable ASCII for the same reason.
Ranges shorthand_ranges(char c) {
  switch (c) {
    case 'd': return {{'0', '9'}};
    case 'w': return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    case 's': return {{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}};
    case 'D': case 'W': case 'S': return intersect(complement(shorthand_ranges(static_cast<char>(c - 'A' + 'a'))), {{0x20, 0x7E}});
    default: return {};
  }
}

class PatternConverter {
 public:
  PatternConverter(std::string_view pattern, std::string pointer, std::function<std::string(const std::string&, const std::string&)> add_rule,
                   std::string name)
      : pattern_(pattern), pointer_(std::move(pointer)), add_rule_(std::move(add_rule)), name_(std::move(name)) {}

  // The GBNF of a whole JSON string whose content matches the pattern in full (an unanchored
  // pattern is matched in full too: such strings contain a match, so they are valid).
  std::string convert() {
    if (!pattern_.empty() && pattern_.front() == '^') pos_ = 1;
    end_ = pattern_.size();
    if (end_ > pos_ && pattern_[end_ - 1] == '$' && !(end_ >= 2 && pattern_[end_ - 2] == '\\')) --end_;
    std::string body = alternation(0);
    if (pos_ < end_) error(fmt::format("unbalanced ')' at offset {}", pos_));
    return "\"\\\"\" (" + body + ") \"\\\"\"";
  }

  // When the whole pattern is one single-character item repeated (^[a-z0-9-]+$, ^\d{5}$, ^.*$),
  // the GBNF of one character and the repetition bounds: a length range can then be combined with
  // the pattern. False (and nothing converted) for any other pattern.
  bool single_repeated_character(std::string& character, int& min_count, int& max_count) {
    pos_ = !pattern_.empty() && pattern_.front() == '^' ? 1 : 0;
    end_ = pattern_.size();
    if (end_ > pos_ && pattern_[end_ - 1] == '$' && !(end_ >= 2 && pattern_[end_ - 2] == '\\')) --end_;
    if (at_end() || peek() == '(' || peek() == '|' || peek() == ')') return false;
    const Item item = atom(0);
    std::vector<Item> items;
    quantify(item, items);
    if (pos_ != end_ || items.size() != 1) return false;
    character = item.literal ? gbnf_literal(item.text) : item.text;
    min_count = last_min_;
    max_count = last_max_;
    return true;
  }

 private:
  int last_min_ = 1, last_max_ = 1;  // the bounds of the last quantify()
  std::string pattern_;
  std::string pointer_;
  std::function<std::string(const std::string&, const std::string&)> add_rule_;
  std::string name_;
  size_t pos_ = 0, end_ = 0;
  int sub_rules_ = 0;

  [[noreturn]] void error(const std::string& what) const {
    fail(pointer_, "pattern", fmt::format("{} (pattern \"{}\")", what, pattern_));
  }

  bool at_end() const { return pos_ >= end_; }
  char peek() const { return pattern_[pos_]; }

  std::string alternation(int depth) {
    if (depth > kMaxPatternDepth) error("groups nested too deeply");
    std::vector<std::string> branches = {sequence(depth)};
    while (!at_end() && peek() == '|') {
      ++pos_;
      branches.push_back(sequence(depth));
    }
    return join(branches, " | ");
  }

  struct Item {
    std::string text;  // JSON text of a literal run, or a GBNF expression
    bool literal;
  };

  std::string sequence(int depth) {
    std::vector<Item> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      Item item = atom(depth);
      quantify(item, items);
    }
    // Consecutive literals merge into one GBNF literal.
    std::vector<std::string> parts;
    std::string literal;
    for (const Item& item : items) {
      if (item.literal) {
        literal += item.text;
        continue;
      }
      if (!literal.empty()) parts.push_back(gbnf_literal(literal));
      literal.clear();
      parts.push_back(item.text);
    }
    if (!literal.empty()) parts.push_back(gbnf_literal(literal));
    if (parts.empty()) return "\"\"";
    return join(parts, " ");
  }

  uint32_t read_code_point() {
    // Decodes one UTF-8 code point of the pattern (the schema is valid UTF-8: nlohmann checked it).
    const auto byte = static_cast<unsigned char>(pattern_[pos_++]);
    if (byte < 0x80) return byte;
    int extra = byte >= 0xF0 ? 3 : byte >= 0xE0 ? 2 : 1;
    uint32_t c = byte & (0x3F >> extra);
    while (extra-- > 0 && pos_ < end_) c = (c << 6) | (static_cast<unsigned char>(pattern_[pos_++]) & 0x3F);
    return c;
  }

  uint32_t read_hex(int digits) {
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      if (at_end() || !std::isxdigit(static_cast<unsigned char>(peek()))) error("a \\x or \\u escape needs hex digits");
      const char h = pattern_[pos_++];
      value = value * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
    }
    return value;
  }

  // After a backslash: a set of code points (\d, \n, \., ...). Errors for what has no grammar.
  Ranges escape(bool in_class) {
    if (at_end()) error("a trailing backslash");
    const char c = pattern_[pos_++];
    switch (c) {
      case 'd': case 'w': case 's': case 'D': case 'W': case 'S': return shorthand_ranges(c);
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 't': return {{'\t', '\t'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0': return {{0, 0}};
      case 'x': { const uint32_t v = read_hex(2); return {{v, v}}; }
      case 'u': { const uint32_t v = read_hex(4); return {{v, v}}; }
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        error("word boundaries (\\b) are not supported");
      case 'B': case 'A': case 'Z': case 'z': case 'G': error(fmt::format("the anchor \\{} is not supported", c));
      case 'p': case 'P': error("Unicode properties (\\p) are not supported");
      case 'k': error("back-references are not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') error("back-references are not supported");
    if (std::isalnum(static_cast<unsigned char>(c))) error(fmt::format("the escape \\{} is not supported", c));
    --pos_;
    const uint32_t cp = read_code_point();
    return {{cp, cp}};
  }

  Ranges character_class() {
    // pos_ is after '['.
    bool negated = false;
    if (!at_end() && peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges set;
    bool first = true;
    bool has_shorthand = false;
    while (true) {
      if (at_end()) error("an unterminated character class");
      if (peek() == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      Ranges low;
      bool single = true;
      if (peek() == '\\') {
        ++pos_;
        const char next = at_end() ? '\0' : peek();
        low = escape(true);
        if (std::string_view("dwsDWS").find(next) != std::string_view::npos) {
          single = false;
          has_shorthand = true;
        }
      } else if (peek() == '[' && pos_ + 1 < end_ && pattern_[pos_ + 1] == ':') {
        error("POSIX classes ([:alpha:]) are not supported");
      } else {
        const uint32_t c = read_code_point();
        low = {{c, c}};
      }
      if (single && pos_ + 1 < end_ && peek() == '-' && pattern_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t high;
        if (peek() == '\\') {
          ++pos_;
          const Ranges r = escape(true);
          if (r.size() != 1 || r[0].first != r[0].second) error("a range ending in a class shorthand");
          high = r[0].first;
        } else {
          high = read_code_point();
        }
        if (high < low[0].first) error("a character range out of order");
        set.push_back({low[0].first, high});
      } else {
        set.insert(set.end(), low.begin(), low.end());
      }
    }
    if (negated) {
      set = complement(set);
      // [^\d] in Python also excludes non-ASCII digits: stay in ASCII to be safe.
      if (has_shorthand) set = intersect(set, {{0x09, 0x0A}, {0x0D, 0x0D}, {0x20, 0x7E}});
    }
    return normalize(set);
  }

  Item charset_item(const Ranges& set) {
    const std::string expression = charset_expression(set);
    if (expression.empty()) error("a character class that matches no character a JSON string can hold");
    // A single printable code point reads best as a literal.
    if (set.size() == 1 && set[0].first == set[0].second) return {json_encoded(set[0].first), true};
    return {expression, false};
  }

  Item atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      if (!at_end() && peek() == '?') {
        ++pos_;
        if (!at_end() && peek() == ':') {
          ++pos_;
        } else if (!at_end() && (peek() == '<' || peek() == 'P')) {
          if (peek() == 'P') ++pos_;
          if (at_end() || peek() != '<' || (pos_ + 1 < end_ && (pattern_[pos_ + 1] == '=' || pattern_[pos_ + 1] == '!')))
            error("lookbehind and this group syntax are not supported");
          const size_t close = pattern_.find('>', pos_);
          if (close == std::string_view::npos || close >= end_) error("an unterminated group name");
          pos_ = close + 1;
        } else {
          error("lookahead, lookbehind and inline flags are not supported");
        }
      }
      std::string inner = alternation(depth + 1);
      if (at_end() || peek() != ')') error("an unbalanced '('");
      ++pos_;
      return {"(" + inner + ")", false};
    }
    if (c == '[') {
      ++pos_;
      return charset_item(character_class());
    }
    if (c == '.') {
      ++pos_;
      return {add_rule_("dot", charset_expression(complement({{'\n', '\n'}, {'\r', '\r'}}))), false};
    }
    if (c == '\\') {
      ++pos_;
      return charset_item(escape(false));
    }
    if (c == '^' || c == '$') error("anchors inside the pattern are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '{') error(fmt::format("nothing to repeat at offset {}", pos_));
    if (c == ']' || c == '}') {
      ++pos_;
      return {std::string(1, c), true};
    }
    const uint32_t cp = read_code_point();
    return {json_encoded(cp), true};
  }

  // Reads a quantifier after `item` (if any) and appends the result to `items`.
  void quantify(Item item, std::vector<Item>& items) {
    if (at_end()) {
      last_min_ = last_max_ = 1;
      items.push_back(std::move(item));
      return;
    }
    const char c = peek();
    int min_count = 0, max_count = -1;
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      min_count = c == '+' ? 1 : 0;
      max_count = c == '?' ? 1 : -1;
    } else if (c == '{' && braces(min_count, max_count)) {
    } else {
      last_min_ = last_max_ = 1;
      items.push_back(std::move(item));
      return;
    }
    last_min_ = min_count;
    last_max_ = max_count;
    if (!at_end() && peek() == '?') ++pos_;  // lazy: the same strings match in full
    else if (!at_end() && peek() == '+') error("possessive quantifiers are not supported");
    if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '{')) error("a quantifier after a quantifier");
    std::string expression = item.literal ? gbnf_literal(item.text) : item.text;
    if (min_count > 1 || max_count > 1) {
      // Bounded repetitions are unrolled by the matcher: give a compound item its own rule.
      if (!item.literal && expression.front() == '(')
        expression = add_rule_(name_ + "-" + std::to_string(++sub_rules_), expression);
    }
    std::string repeated = build_repetition(expression, min_count, max_count);
    if (repeated.empty()) repeated = "\"\"";
    items.push_back({repeated, false});
  }

  // {m}, {m,}, {m,n}; false (and pos_ unchanged) when the brace is a literal '{'.
  bool braces(int& min_count, int& max_count) {
    const size_t close = pattern_.find('}', pos_);
    if (close == std::string_view::npos || close >= end_) return false;
    const std::string_view inside = std::string_view(pattern_).substr(pos_ + 1, close - pos_ - 1);
    const size_t comma = inside.find(',');
    auto number = [&](std::string_view text, int& out) {
      if (text.empty() || text.size() > 9) return false;
      for (char d : text)
        if (!std::isdigit(static_cast<unsigned char>(d))) return false;
      out = std::stoi(std::string(text));
      return true;
    };
    if (comma == std::string_view::npos) {
      if (!number(inside, min_count)) return false;
      max_count = min_count;
    } else {
      if (!number(inside.substr(0, comma), min_count)) {
        if (comma != 0) return false;
        min_count = 0;
      }
      const std::string_view upper = inside.substr(comma + 1);
      if (upper.empty()) max_count = -1;
      else if (!number(upper, max_count)) return false;
    }
    pos_ = close + 1;
    if (max_count >= 0 && min_count > max_count) error("a repetition {m,n} with m > n");
    if (min_count > kMaxRepetition) error(fmt::format("a repetition of more than {}", kMaxRepetition));
    if (max_count > kMaxRepetition) max_count = kMaxRepetition;
    return true;
  }
};

}  // namespace

// A GBNF literal for `text` (bytes kept as they are; the grammar reads UTF-8).
std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '\r': out += "\\r"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\x{:02X}", static_cast<unsigned>(c));
        else out += c;
    }
  }
  return out + "\"";
}

// ---- the converter ------------------------------------------------------------------------------

struct GrammarBuilder::Impl {
  std::map<std::string, std::string> rules;
  size_t rule_bytes = 0;

  // Per add_schema call: the document its local $refs resolve against.
  const Json* document = nullptr;
  std::string ref_prefix;
  std::map<std::string, std::string> ref_rules;  // "$ref" -> rule name (set before the target is visited)
  int depth = 0;
  size_t visits = 0;
  // Objects and arrays entered (each matches a character before its members), and the $refs
  // being converted with the nesting they started at.
  int nesting = 0;
  std::map<std::string, int> open_refs;

  struct DepthGuard {
    Impl& impl;
    DepthGuard(Impl& owner, const std::string& pointer) : impl(owner) {
      if (++impl.visits > kMaxVisits)
        fail(pointer, "anyOf", fmt::format("the schema takes more than {} steps to convert (combinators multiply)", kMaxVisits));
      if (++impl.depth > kMaxDepth) {
        --impl.depth;
        fail(pointer, "$ref", fmt::format("schemas nest (or $refs chain) deeper than {}", kMaxDepth));
      }
    }
    ~DepthGuard() { --impl.depth; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };

  static std::string sanitize(const std::string& name) {
    std::string out;
    bool dash = false;
    for (char c : name) {
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '-') {
        out += c;
        dash = false;
      } else if (!dash) {
        out += '-';
        dash = true;
      }
    }
    if (out.empty() || out == "-") out = "empty";
    return out;
  }

  std::string add_rule(const std::string& name, const std::string& body) {
    const std::string key = sanitize(name);
    auto store = [&](const std::string& rule_name) {
      auto [it, inserted] = rules.emplace(rule_name, body);
      if (inserted) {
        rule_bytes += rule_name.size() + body.size() + 6;
        if (rule_bytes > kMaxGrammarBytes)
          throw SchemaError(fmt::format("JSON schema: the grammar would be larger than {} MiB", kMaxGrammarBytes >> 20), "$ref");
      }
      return rule_name;
    };
    auto found = rules.find(key);
    if (found == rules.end() || found->second == body) return store(key);
    for (int i = 0;; ++i) {
      const std::string candidate = key + std::to_string(i);
      auto it = rules.find(candidate);
      if (it == rules.end() || it->second == body) return store(candidate);
    }
  }

  std::string add_builtin(const std::string& name) {
    const BuiltinRule* rule = find_builtin(name);
    if (!rule) throw SchemaError(fmt::format("JSON schema: no built-in rule \"{}\"", name), "type");
    if (rules.count(name)) return name;  // with its dependencies (value and object name each other)
    rules[name] = rule->body;
    rule_bytes += name.size() + std::string_view(rule->body).size() + 6;
    for (const char* dep : rule->deps) add_builtin(dep);
    return name;
  }

  // A rule `rule_name` whose body is the built-in rule's body (llama.cpp names the top-level
  // rule "root" this way) or just the built-in's name.
  std::string visit_builtin(const std::string& rule_name, const std::string& type) {
    if (rule_name != "root") return add_builtin(type);
    for (const char* dep : find_builtin(type)->deps) add_builtin(dep);
    return add_rule("root", find_builtin(type)->body);
  }

  // ---- $ref ----

  const Json& resolve(const std::string& ref, const std::string& pointer) {
    if (ref.empty() || ref[0] != '#')
      fail(pointer, "$ref", fmt::format("\"{}\" is not a local reference (only \"#...\" within the schema is supported)", ref));
    std::string fragment = ref.substr(1);
    // Percent-decoding (URI fragment), then JSON pointer tokens.
    std::string decoded;
    for (size_t i = 0; i < fragment.size(); ++i) {
      if (fragment[i] == '%' && i + 2 < fragment.size() && std::isxdigit(static_cast<unsigned char>(fragment[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(fragment[i + 2]))) {
        decoded += static_cast<char>(std::stoi(fragment.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        decoded += fragment[i];
      }
    }
    if (!decoded.empty() && decoded[0] != '/')
      fail(pointer, "$ref", fmt::format("\"{}\": anchors are not supported, only JSON pointers", ref));
    const Json* target = document;
    size_t start = 1;
    while (start <= decoded.size() && !decoded.empty()) {
      size_t slash = decoded.find('/', start);
      if (slash == std::string::npos) slash = decoded.size();
      std::string token;
      for (size_t i = start; i < slash; ++i) {
        if (decoded[i] == '~' && i + 1 < slash && (decoded[i + 1] == '0' || decoded[i + 1] == '1')) {
          token += decoded[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          token += decoded[i];
        }
      }
      if (target->is_object() && target->contains(token)) {
        target = &target->at(token);
      } else if (target->is_array() && !token.empty() && token.size() < 10 &&
                 std::all_of(token.begin(), token.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); }) &&
                 std::stoul(token) < target->size()) {
        target = &target->at(std::stoul(token));
      } else {
        fail(pointer, "$ref", fmt::format("\"{}\" does not resolve: no \"{}\"", ref, token));
      }
      start = slash + 1;
    }
    return *target;
  }

  std::string visit_ref(const std::string& ref, const std::string& pointer) {
    auto found = ref_rules.find(ref);
    if (found != ref_rules.end()) {
      // Back to a $ref still being converted with no object or array in between: the rule would
      // call itself before matching anything (no instance, or a left-recursive grammar).
      auto open = open_refs.find(ref);
      if (open != open_refs.end() && open->second == nesting)
        fail(pointer, "$ref", fmt::format("\"{}\" refers back to itself without an object or array in between", ref));
      return found->second;
    }
    const Json& target = resolve(ref, pointer);
    const std::string fragment = ref.substr(1);
    // The rule's name is fixed before the target is visited, so that a recursive reference
    // inside the target finds it.
    std::string rule_name = sanitize(ref_prefix + "ref" + (fragment.empty() ? "-root" : fragment));
    if (rules.count(rule_name))
      for (int i = 0;; ++i)
        if (!rules.count(rule_name + std::to_string(i))) {
          rule_name += std::to_string(i);
          break;
        }
    ref_rules[ref] = rule_name;
    open_refs[ref] = nesting;
    const std::string visited = visit(target, rule_name, ref);
    open_refs.erase(ref);
    if (visited != rule_name && !rules.count(rule_name)) add_rule(rule_name, visited);
    return rule_name;
  }

  // ---- allOf, and keywords beside $ref / anyOf / oneOf ----

  // The schema without its combinators (the sibling keywords), or null when they are all
  // annotations.
  static Json siblings(const Json& schema) {
    Json rest = Json::object();
    for (const auto& [key, value] : schema.items()) {
      if (key == "allOf" || key == "anyOf" || key == "oneOf" || key == "$ref" || is_annotation(key)) continue;
      rest[key] = value;
    }
    return rest;
  }

  // Expands `schema` into alternatives, each a list of plain schemas (no $ref, allOf, anyOf,
  // oneOf) that must all hold.
  void expand(const Json& schema, const std::string& pointer, std::vector<std::vector<std::pair<Json, std::string>>>& alternatives,
              int ref_depth) {
    if (ref_depth > kMaxDepth) fail(pointer, "allOf", fmt::format("allOf and $refs nest deeper than {}", kMaxDepth));
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) fail(pointer, "allOf", "false: no value is valid");
      return;
    }
    if (!schema.is_object()) fail(pointer, "allOf", "a schema must be an object or a boolean");
    Json rest = siblings(schema);
    if (!rest.empty())
      for (auto& alternative : alternatives) alternative.push_back({rest, pointer});
    if (schema.contains("$ref")) {
      const Json& ref = schema.at("$ref");
      if (!ref.is_string()) fail(pointer, "$ref", "must be a string");
      expand(resolve(ref.get<std::string>(), pointer), ref.get<std::string>(), alternatives, ref_depth + 1);
    }
    if (schema.contains("allOf")) {
      const Json& parts = schema.at("allOf");
      if (!parts.is_array() || parts.empty()) fail(pointer, "allOf", "must be a non-empty array of schemas");
      for (size_t i = 0; i < parts.size(); ++i) expand(parts[i], fmt::format("{}/allOf/{}", pointer, i), alternatives, ref_depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!schema.contains(key)) continue;
      const Json& options = schema.at(key);
      if (!options.is_array() || options.empty()) fail(pointer, key, "must be a non-empty array of schemas");
      std::vector<std::vector<std::pair<Json, std::string>>> product;
      for (size_t i = 0; i < options.size(); ++i) {
        auto branch = alternatives;
        expand(options[i], fmt::format("{}/{}/{}", pointer, key, i), branch, ref_depth + 1);
        for (auto& alternative : branch) product.push_back(std::move(alternative));
        if (product.size() > kMaxAlternatives)
          fail(pointer, key, fmt::format("combining allOf with anyOf/oneOf makes more than {} alternatives", kMaxAlternatives));
      }
      alternatives = std::move(product);
    }
  }

  // One schema with every keyword of `parts` (which must all hold).
  static Json merge(const std::vector<std::pair<Json, std::string>>& parts, const std::string& pointer) {
    Json merged = Json::object();
    std::set<std::string> types(all_types().begin(), all_types().end());
    bool typed = false;
    std::optional<std::vector<Json>> values;  // enum ∩ const
    std::vector<const Json*> closing;         // parts with additionalProperties
    for (const auto& [part, part_pointer] : parts) {
      if (part.contains("type")) {
        typed = true;
        std::set<std::string> part_types = type_set(part, part_pointer), kept;
        std::set_intersection(types.begin(), types.end(), part_types.begin(), part_types.end(), std::inserter(kept, kept.end()));
        types = std::move(kept);
      }
      for (const char* key : {"enum", "const"}) {
        if (!part.contains(key)) continue;
        std::vector<Json> part_values;
        if (std::string_view(key) == "const") part_values.push_back(part.at(key));
        else if (part.at(key).is_array()) part_values.assign(part.at(key).begin(), part.at(key).end());
        else fail(part_pointer, key, "must be an array");
        if (!values) {
          values = part_values;
        } else {
          std::vector<Json> kept;
          for (const Json& v : *values)
            if (std::find(part_values.begin(), part_values.end(), v) != part_values.end()) kept.push_back(v);
          values = std::move(kept);
        }
      }
      if (part.contains("additionalProperties")) closing.push_back(&part);
      for (const auto& [key, value] : part.items()) {
        if (key == "type" || key == "enum" || key == "const" || key == "additionalProperties") continue;
        if (!merged.contains(key)) {
          merged[key] = value;
          continue;
        }
        Json& current = merged[key];
        if (current == value) continue;
        if (key == "properties" && value.is_object() && current.is_object()) {
          for (const auto& [name, property] : value.items()) {
            if (!current.contains(name)) current[name] = property;
            else if (current[name] != property) current[name] = Json{{"allOf", Json::array({current[name], property})}};
          }
        } else if (key == "required" && value.is_array() && current.is_array()) {
          for (const Json& name : value)
            if (std::find(current.begin(), current.end(), name) == current.end()) current.push_back(name);
        } else if (key == "items" && value.is_object() && current.is_object()) {
          current = Json{{"allOf", Json::array({current, value})}};
        } else if ((key == "minimum" || key == "exclusiveMinimum" || key == "minLength" || key == "minItems" ||
                    key == "minProperties") &&
                   value.is_number() && current.is_number()) {
          if (value.get<double>() > current.get<double>()) current = value;
        } else if ((key == "maximum" || key == "exclusiveMaximum" || key == "maxLength" || key == "maxItems" ||
                    key == "maxProperties") &&
                   value.is_number() && current.is_number()) {
          if (value.get<double>() < current.get<double>()) current = value;
        } else {
          fail(pointer, key, fmt::format("allOf parts disagree on \"{}\" ({} and {}) and cannot be merged", key, current.dump(), value.dump()));
        }
      }
    }
    // additionalProperties: a part that closes its object allows only its own properties.
    if (!closing.empty()) {
      Json additional = true;
      for (const Json* part : closing) {
        const Json& value = part->at("additionalProperties");
        if (value == true) continue;
        if (merged.contains("properties"))
          for (const auto& [name, property] : merged["properties"].items())
            if (!part->contains("properties") || !part->at("properties").contains(name))
              fail(pointer, "additionalProperties",
                   fmt::format("allOf: property \"{}\" is not allowed by a part with additionalProperties {}", name, value.dump()));
        if (additional == true) additional = value;
        else if (additional != value) additional = false;  // two different schemas: allow no extra keys
      }
      merged["additionalProperties"] = additional;
    }
    if (typed) {
      if (types.empty()) fail(pointer, "type", "allOf parts allow no common type");
      if (types.count("number")) types.erase("integer");
      if (types.size() == 1) merged["type"] = *types.begin();
      else merged["type"] = Json(std::vector<std::string>(types.begin(), types.end()));
    }
    if (values) {
      if (values->empty()) fail(pointer, "enum", "allOf parts allow no common value");
      merged["enum"] = Json(*values);
    }
    return merged;
  }

  bool needs_combining(const Json& schema) const {
    const bool has_ref = schema.contains("$ref");
    const bool has_any = schema.contains("anyOf"), has_one = schema.contains("oneOf");
    if (schema.contains("allOf")) return true;
    if (!has_ref && !has_any && !has_one) return false;
    if (int(has_ref) + int(has_any) + int(has_one) > 1) return true;
    return !siblings(schema).empty();
  }

  // ---- visiting ----

  std::string visit(const Json& schema, const std::string& name, const std::string& pointer) {
    DepthGuard guard(*this, pointer);
    const std::string rule_name = is_reserved_name(name) ? name + "-" : name.empty() ? "root" : name;
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) fail(pointer, "false", "the schema false allows no value");
      return add_rule(rule_name, add_builtin("value"));
    }
    if (!schema.is_object()) fail(pointer, "type", fmt::format("a schema must be an object or a boolean, not {}", schema.dump()));
    for (const auto& [key, value] : schema.items())
      if (unsupported_keywords().count(key)) fail(pointer, key, fmt::format("\"{}\" cannot be expressed as a grammar", key));

    if (needs_combining(schema)) {
      std::vector<std::vector<std::pair<Json, std::string>>> alternatives(1);
      expand(schema, pointer, alternatives, 0);
      if (alternatives.size() == 1) return visit(merge(alternatives[0], pointer), name, pointer);
      std::vector<std::string> names;
      for (size_t i = 0; i < alternatives.size(); ++i)
        names.push_back(visit(merge(alternatives[i], pointer), name + (name.empty() ? "alternative-" : "-") + std::to_string(i), pointer));
      return add_rule(rule_name, join(names, " | "));
    }
    if (schema.contains("$ref")) {
      const Json& ref = schema.at("$ref");
      if (!ref.is_string()) fail(pointer, "$ref", "must be a string");
      return add_rule(rule_name, visit_ref(ref.get<std::string>(), pointer));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!schema.contains(key)) continue;
      const Json& options = schema.at(key);
      if (!options.is_array() || options.empty()) fail(pointer, key, "must be a non-empty array of schemas");
      std::vector<std::string> names;
      for (size_t i = 0; i < options.size(); ++i)
        names.push_back(visit(options[i], name + (name.empty() ? "alternative-" : "-") + std::to_string(i), fmt::format("{}/{}/{}", pointer, key, i)));
      return add_rule(rule_name, join(names, " | "));
    }

    const std::set<std::string> types = type_set(schema, pointer);
    const bool typed = schema.contains("type");
    if (schema.contains("const") || schema.contains("enum")) {
      std::vector<Json> values;
      if (schema.contains("const")) values.push_back(schema.at("const"));
      else if (schema.at("enum").is_array()) values.assign(schema.at("enum").begin(), schema.at("enum").end());
      else fail(pointer, "enum", "must be an array");
      if (schema.contains("const") && schema.contains("enum")) {
        const Json& allowed = schema.at("enum");
        if (std::find(allowed.begin(), allowed.end(), values[0]) == allowed.end()) fail(pointer, "const", "the const value is not in enum");
      }
      const char* key = schema.contains("const") ? "const" : "enum";
      const auto others = grammar_without_values(schema, key, pointer);
      std::vector<std::string> literals;
      for (const Json& value : values) {
        if (typed && !value_matches_types(value, types)) continue;  // the type rules it out
        if (value.is_string() && !string_value_allowed(schema, value.get<std::string>())) continue;
        if (others) {
          Matcher matcher(others);
          if (!matcher.accept(value.dump()) || !matcher.can_end()) continue;
        }
        literals.push_back(gbnf_literal(value.dump()));
      }
      if (literals.empty()) fail(pointer, key, "no value is valid (the other keywords rule them all out)");
      return add_rule(rule_name, literals.size() == 1 && schema.contains("const") ? literals[0] : "(" + join(literals, " | ") + ")");
    }

    std::set<std::string> distinct_types = types;
    if (distinct_types.count("number")) distinct_types.erase("integer");
    if (typed && distinct_types.size() > 1) {
      // {"type": ["a", "b"], ...} is a choice between the types, each with the other keywords.
      std::vector<std::string> names, declared_order;
      for (const Json& entry : schema.at("type")) {
        const std::string type = entry.get<std::string>();
        if (!distinct_types.count(type) || std::find(declared_order.begin(), declared_order.end(), type) != declared_order.end()) continue;
        declared_order.push_back(type);
      }
      size_t i = 0;
      for (const std::string& type : declared_order) {
        Json alternative = schema;
        alternative["type"] = type;
        names.push_back(visit(alternative, name + (name.empty() ? "alternative-" : "-") + std::to_string(i++), pointer));
      }
      return add_rule(rule_name, join(names, " | "));
    }

    std::string type = typed ? *distinct_types.begin() : "";
    if (type.empty()) {
      // Without a type, the keywords say which type is meant (generating only that type is
      // valid: the other types' keywords do not apply to it).
      auto has_any = [&](std::initializer_list<const char*> keys) {
        for (const char* key : keys)
          if (schema.contains(key)) return true;
        return false;
      };
      if (has_any({"properties", "required", "minProperties", "maxProperties"}) ||
          (schema.contains("additionalProperties") && schema.at("additionalProperties") != true))
        type = "object";
      else if (has_any({"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "additionalItems"})) type = "array";
      else if (has_any({"pattern", "minLength", "maxLength", "format"})) type = "string";
      else if (has_any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})) type = "number";
      else return add_rule(rule_name, add_builtin("value"));
    }
    if (type == "object") return visit_object(schema, name, rule_name, pointer);
    if (type == "array") return visit_array(schema, name, rule_name, pointer);
    if (type == "string") return visit_string(schema, name, rule_name, pointer);
    if (type == "integer" || type == "number") return visit_number(schema, type, rule_name, pointer);
    if (type == "boolean") return visit_builtin(rule_name, "boolean");
    return visit_builtin(rule_name, "null");
  }

  // The grammar of `schema` without enum/const, when it has other constraining keywords (bounds,
  // patterns, formats, ...): an enum value is kept only when that grammar accepts its JSON text.
  std::shared_ptr<const Grammar> grammar_without_values(const Json& schema, const char* key, const std::string& pointer) {
    Json rest = Json::object();
    bool constrained = false;
    for (const auto& [k, v] : schema.items()) {
      if (k == "enum" || k == "const" || is_annotation(k)) continue;
      rest[k] = v;
      constrained = constrained || k != "type";
    }
    if (!constrained) return nullptr;
    Impl others;
    others.add_builtin("space");
    others.document = document;
    others.depth = depth;
    others.visits = visits;
    const std::string top = others.visit(rest, "", pointer);
    visits = others.visits;
    if (top != "root") others.add_rule("root", top);
    std::string text;
    for (const auto& [name, body] : others.rules) text += name + " ::= " + body + "\n";
    try {
      return Grammar::parse(text);
    } catch (const GrammarError& error) {
      fail(pointer, key, fmt::format("the keywords beside {} allow no value ({})", key, error.what()));
    }
  }

  // Whether an enum/const string passes the schema's length keywords (the rest is not checked).
  static bool string_value_allowed(const Json& schema, const std::string& value) {
    size_t code_points = 0;
    for (char c : value)
      if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++code_points;
    if (schema.contains("minLength") && schema.at("minLength").is_number() && static_cast<double>(code_points) < schema.at("minLength").get<double>()) return false;
    if (schema.contains("maxLength") && schema.at("maxLength").is_number() && static_cast<double>(code_points) > schema.at("maxLength").get<double>()) return false;
    return true;
  }

  std::string visit_number(const Json& schema, const std::string& type, const std::string& rule_name, const std::string& pointer) {
    if (schema.contains("multipleOf")) {
      const Json& step = schema.at("multipleOf");
      const bool trivial = step.is_number() && type == "integer" && step.get<double>() == 1.0;
      if (!trivial) fail(pointer, "multipleOf", "multipleOf cannot be expressed as a grammar (only 1 for integers)");
    }
    const auto [lo, hi] = integer_bounds(schema, pointer);
    if (!lo && !hi) return visit_builtin(rule_name, type);
    if (type == "integer") {
      std::string out = "(";
      build_min_max_int(lo.value_or(std::numeric_limits<int64_t>::min()), hi.value_or(std::numeric_limits<int64_t>::max()), out);
      return add_rule(rule_name, out + ")");
    }
    // A number in [lo, hi] (integers): an integer part in range with any fraction, or the upper
    // end with a zero fraction; no exponent (it would leave the range).
    add_builtin("decimal-part");
    auto magnitude = [](int64_t a, std::optional<int64_t> b) {
      std::string out = "(";
      if (!b) {
        build_min_max_int(a, std::numeric_limits<int64_t>::max(), out);
        return out + ") (\".\" decimal-part)?";
      }
      if (*b == a) return "\"" + std::to_string(a) + "\" (\".\" [0]{1,16})?";
      build_min_max_int(a, *b - 1, out);
      return "(" + out + ") (\".\" decimal-part)? | \"" + std::to_string(*b) + "\" (\".\" [0]{1,16})?)";
    };
    std::string body;
    if (lo && *lo >= 0) body = magnitude(*lo, hi);
    else if (hi && *hi <= 0) body = "\"-\" (" + magnitude(-*hi, lo ? std::optional<int64_t>(-*lo) : std::nullopt) + ")";
    else body = "\"-\" (" + magnitude(0, lo ? std::optional<int64_t>(-*lo) : std::nullopt) + ") | " + magnitude(0, hi);
    return add_rule(rule_name, "(" + body + ")");
  }

  std::string visit_string(const Json& schema, const std::string& name, const std::string& rule_name, const std::string& pointer) {
    auto [min_length, max_length] = repetition_bounds(schema, "minLength", "maxLength", pointer);
    const bool has_length = schema.contains("minLength") || schema.contains("maxLength");
    if (schema.contains("pattern")) {
      const Json& pattern = schema.at("pattern");
      if (!pattern.is_string()) fail(pointer, "pattern", "must be a string");
      if (schema.contains("format")) fail(pointer, "format", "a format together with a pattern cannot be expressed");
      PatternConverter converter(pattern.get<std::string>(), pointer, [this](const std::string& n, const std::string& b) { return add_rule(n, b); },
                                 rule_name);
      if (has_length) {
        // Only a repeated single character combines with a length: its count is the length.
        std::string character;
        int lo = 0, hi = -1;
        if (!converter.single_repeated_character(character, lo, hi))
          fail(pointer, schema.contains("minLength") ? "minLength" : "maxLength",
               "minLength/maxLength together with this pattern cannot be expressed (only with one repeated character, like ^[a-z0-9-]+$)");
        lo = std::max(lo, min_length);
        if (max_length >= 0) hi = hi < 0 ? max_length : std::min(hi, max_length);
        if (hi >= 0 && lo > hi) fail(pointer, "pattern", "the pattern's repetition and minLength/maxLength leave no length");
        const std::string repeated = build_repetition(character, lo, hi);
        return add_rule(rule_name, "\"\\\"\" " + (repeated.empty() ? std::string() : repeated + " ") + "\"\\\"\"");
      }
      return add_rule(rule_name, converter.convert());
    }
    std::string format;
    if (schema.contains("format")) {
      if (!schema.at("format").is_string()) fail(pointer, "format", "must be a string");
      format = schema.at("format").get<std::string>();
    }
    // Length ranges of each format's strings, to check them against minLength/maxLength.
    struct FormatLength {
      const char* name;
      int shortest, longest;
    };
    static const FormatLength formats[] = {{"date", 10, 10}, {"time", 9, 18}, {"date-time", 20, 29}, {"uuid", 36, 36}};
    for (const FormatLength& known : formats) {
      if (format != known.name) continue;
      if (known.shortest < min_length || (max_length >= 0 && known.longest > max_length))
        fail(pointer, "format", fmt::format("format \"{}\" together with minLength/maxLength cannot be expressed", format));
      if (format == "uuid") return visit_builtin(rule_name, "uuid");
      return add_rule(rule_name, add_builtin(format + "-string"));
    }
    // Other formats (email, uri, ...) are annotations here: any string (see the header).
    if (has_length) {
      add_builtin("char");
      return add_rule(rule_name, "\"\\\"\" " + build_repetition("char", min_length, max_length) + " \"\\\"\"");
    }
    (void)name;
    return visit_builtin(rule_name, "string");
  }

  struct NestingGuard {
    int& level;
    explicit NestingGuard(int& counter) : level(++counter) {}
    ~NestingGuard() { --level; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;
  };

  std::string visit_array(const Json& schema, const std::string& name, const std::string& rule_name, const std::string& pointer) {
    NestingGuard inside(nesting);
    const std::string sub_name = name + (name.empty() ? "" : "-");
    auto [min_items, max_items] = repetition_bounds(schema, "minItems", "maxItems", pointer);
    if (schema.contains("uniqueItems") && schema.at("uniqueItems") == true && !(max_items >= 0 && max_items <= 1))
      fail(pointer, "uniqueItems", "uniqueItems cannot be expressed as a grammar (only with maxItems <= 1)");
    // Tuples: prefixItems (2020-12) or items as an array (draft 7, with additionalItems).
    const Json* tuple = nullptr;
    const char* tuple_key = "prefixItems";
    const Json* rest = nullptr;  // schema of the items after the tuple; null: none allowed
    const char* rest_key = "items";
    Json any = true;
    if (schema.contains("prefixItems") && schema.at("prefixItems").is_array()) {
      tuple = &schema.at("prefixItems");
      if (schema.contains("items")) rest = &schema.at("items");
    } else if (schema.contains("items") && schema.at("items").is_array()) {
      tuple = &schema.at("items");
      tuple_key = "items";
      rest_key = "additionalItems";
      if (schema.contains("additionalItems")) rest = &schema.at("additionalItems");
    }
    if (tuple) {
      // Exactly the tuple's items (fewer are valid too, but an instance this grammar makes has them
      // all), then more items when the schema allows them and minItems asks for them.
      const int n = static_cast<int>(std::min<size_t>(tuple->size(), kMaxRepetition));
      const int used = max_items >= 0 ? std::min(n, max_items) : n;
      if (rest && *rest == false) rest = nullptr;
      if (used < min_items && !rest)
        fail(pointer, "minItems", fmt::format("minItems {} is more than the {} items the tuple allows", min_items, n));
      std::string body = "\"[\" space ";
      for (int i = 0; i < used; ++i) {
        if (i) body += " \",\" space ";
        body += visit((*tuple)[static_cast<size_t>(i)], sub_name + "tuple-" + std::to_string(i), fmt::format("{}/{}/{}", pointer, tuple_key, i));
      }
      if (rest && used == n && min_items > used) {
        const std::string item = visit(*rest, sub_name + "additional", pointer + "/" + rest_key);
        // Just the items minItems asks for: fewer choices, all valid.
        const int extra = min_items - used;
        body += " " + build_repetition("(\",\" space " + item + ")", extra, extra);
      }
      return add_rule(rule_name, body + " space \"]\"");
    }
    const Json* items = schema.contains("items") ? &schema.at("items") : schema.contains("prefixItems") ? &schema.at("prefixItems") : nullptr;
    if (items && *items == false) {
      if (min_items > 0) fail(pointer, "minItems", "minItems with items false: nothing is valid");
      return add_rule(rule_name, "\"[\" space \"]\"");
    }
    const bool any_items = !items || *items == true || (items->is_object() && items->empty());
    if (any_items && min_items == 0 && max_items < 0) return visit_builtin(rule_name, "array");
    const std::string item_rule = any_items ? add_builtin("value") : visit(*items, sub_name + "item", pointer + "/items");
    add_builtin("space");
    return add_rule(rule_name, "\"[\" space " + build_repetition(item_rule, min_items, max_items, "\",\" space") + " space \"]\"");
  }

  // A JSON string that is none of `names` (raw characters only: an escaped spelling of a declared
  // name must not slip through as an extra key).
  std::string not_strings(const std::vector<std::string>& names) {
    struct Node {
      std::map<uint32_t, size_t> children;
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& word : names) {
      size_t node = 0;
      for (size_t i = 0; i < word.size();) {
        const auto byte = static_cast<unsigned char>(word[i]);
        const int len = byte < 0x80 ? 1 : byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : 2;
        uint32_t c = len == 1 ? byte : byte & (0x7F >> len);
        for (int k = 1; k < len && i + static_cast<size_t>(k) < word.size(); ++k) c = (c << 6) | (static_cast<unsigned char>(word[i + static_cast<size_t>(k)]) & 0x3F);
        i += static_cast<size_t>(len);
        auto found = trie[node].children.find(c);
        if (found == trie[node].children.end()) {
          trie.push_back({});
          const size_t child = trie.size() - 1;
          trie[node].children[c] = child;
          node = child;
        } else {
          node = found->second;
        }
      }
      trie[node].terminal = true;
    }
    const std::string key_char = add_rule("key-char", R"([^"\\\x7F\x00-\x1F])");
    std::string out = "[\"] ( ";
    std::function<void(size_t, int)> emit = [&](size_t index, int trie_depth) {
      if (trie_depth > 4096) throw SchemaError("JSON schema: a property name is too long", "properties");
      const Node& node = trie[index];
      Ranges rejects = {{'"', '"'}, {'\\', '\\'}, {0, 0x1F}, {0x7F, 0x7F}};
      bool first = true;
      for (const auto& [c, child] : node.children) {
        rejects.push_back({c, c});
        if (!first) out += " | ";
        first = false;
        out += '[';
        out += class_code_point(c);
        out += ']';
        if (!trie[child].children.empty()) {
          // A prefix that is not itself a name may also be the whole key.
          out += " (";
          emit(child, trie_depth + 1);
          out += trie[child].terminal ? ")" : ")?";
        } else {
          out += " " + key_char + "+";
        }
      }
      if (!node.children.empty()) {
        std::string cls = "[^";
        for (const auto& r : normalize(rejects)) {
          cls += class_code_point(r.first);
          if (r.second != r.first) cls += "-" + class_code_point(r.second);
        }
        out += " | " + cls + "] " + key_char + "*";
      }
    };
    emit(0, 0);
    out += " )";
    if (!trie[0].terminal) out += "?";
    return out + " [\"]";
  }

  std::string visit_object(const Json& schema, const std::string& name, const std::string& rule_name, const std::string& pointer) {
    NestingGuard inside(nesting);
    const std::string sub_name = name + (name.empty() ? "" : "-");
    const Json empty_properties = Json::object();
    const Json& properties = schema.contains("properties") ? schema.at("properties") : empty_properties;
    if (!properties.is_object()) fail(pointer, "properties", "must be an object");
    std::vector<std::string> required;
    if (schema.contains("required")) {
      const Json& list = schema.at("required");
      if (!list.is_array()) fail(pointer, "required", "must be an array of property names");
      for (const Json& entry : list) {
        if (!entry.is_string()) fail(pointer, "required", fmt::format("{} is not a property name", entry.dump()));
        if (std::find(required.begin(), required.end(), entry.get<std::string>()) == required.end()) required.push_back(entry.get<std::string>());
      }
    }
    // additionalProperties: absent with "properties" (even empty) -> none (as llama.cpp: models
    // keep to the declared keys); absent without it, or true -> any; false -> none; a schema.
    const Json* additional = nullptr;
    Json any_schema = Json::object();
    if (schema.contains("additionalProperties")) {
      const Json& value = schema.at("additionalProperties");
      if (value.is_boolean()) {
        if (value.get<bool>()) additional = &any_schema;
      } else if (value.is_object()) {
        additional = &value;
      } else {
        fail(pointer, "additionalProperties", "must be a boolean or a schema");
      }
    } else if (!schema.contains("properties") && required.empty()) {
      additional = &any_schema;  // {"type": "object"}: any object; {"properties": {}}: {} only (as llama.cpp)
    }

    // Declared properties in their order, then required names that are not declared (they take
    // the additionalProperties schema).
    std::vector<std::pair<std::string, const Json*>> declared;
    if (properties.size() > kMaxProperties)
      fail(pointer, "properties", fmt::format("{} properties, more than the {} a grammar takes", properties.size(), kMaxProperties));
    for (const auto& [prop_name, prop_schema] : properties.items()) declared.push_back({prop_name, &prop_schema});
    for (const std::string& req : required) {
      if (properties.contains(req)) continue;
      if (schema.contains("additionalProperties") && schema.at("additionalProperties") == false)
        fail(pointer, "required", fmt::format("required property \"{}\" is not allowed by additionalProperties false", req));
      declared.push_back({req, additional ? additional : &any_schema});
    }
    const bool closed = additional == nullptr;
    const size_t n_required = static_cast<size_t>(std::count_if(declared.begin(), declared.end(), [&](const auto& p) {
      return std::find(required.begin(), required.end(), p.first) != required.end();
    }));
    if (schema.contains("minProperties") && count_keyword(schema, "minProperties", pointer) > static_cast<int>(n_required))
      fail(pointer, "minProperties", "minProperties above the number of required properties cannot be expressed");
    if (schema.contains("maxProperties") && (!closed || count_keyword(schema, "maxProperties", pointer) < static_cast<int>(declared.size())))
      fail(pointer, "maxProperties", "maxProperties below the number of allowed properties cannot be expressed");

    if (declared.empty() && additional && additional->is_object() && additional->empty())
      return add_rule(rule_name, add_builtin("object"));
    add_builtin("space");

    // Key-value rules: required ones in declaration order, then the optional ones (the
    // additionalProperties entry last, repeatable).
    struct Entry {
      std::string key, kv_rule;
      bool wildcard;
    };
    std::vector<std::string> required_kvs;
    std::vector<Entry> optional_entries;
    std::vector<std::string> prop_names;
    for (const auto& [prop_name, prop_schema] : declared) {
      const std::string prop_pointer = fmt::format("{}/properties/{}", pointer, pointer_escape(prop_name));
      // An empty name must not make the name hint "" (that is the root's; llama.cpp's test shows
      // its property taking "root").
      const std::string hint = sub_name + (prop_name.empty() ? std::string("empty") : prop_name);
      const std::string value_rule = visit(*prop_schema, hint, prop_pointer);
      const std::string kv = add_rule(hint + "-kv", gbnf_literal(Json(prop_name).dump()) + " space \":\" space " + value_rule);
      if (std::find(required.begin(), required.end(), prop_name) != required.end()) required_kvs.push_back(kv);
      else optional_entries.push_back({prop_name.empty() ? std::string("empty") : prop_name, kv, false});
      prop_names.push_back(prop_name);
    }
    if (additional) {
      const std::string sub = sub_name + "additional";
      const std::string value_rule = additional->is_object() && additional->empty() ? add_builtin("value")
                                                                                     : visit(*additional, sub + "-value", pointer + "/additionalProperties");
      const std::string key_rule = prop_names.empty() ? add_builtin("string") : add_rule(sub + "-k", not_strings(prop_names));
      optional_entries.push_back({"additional", add_rule(sub + "-kv", key_rule + " \":\" space " + value_rule), true});
    }
    if (required_kvs.empty() && optional_entries.empty()) return add_rule(rule_name, "\"{\" space \"}\"");

    std::string rule = "\"{\" space " + join(required_kvs, " \",\" space ");
    if (!optional_entries.empty()) {
      rule += " (";
      if (!required_kvs.empty()) rule += " \",\" space ( ";
      // Optional properties keep their order: after the first one present, the rest of the list
      // (each optional) in a "-rest" rule; built from the end, each once.
      const size_t n = optional_entries.size();
      auto comma_ref = [&](size_t k) { return "( \",\" space " + optional_entries[k].kv_rule + " )"; };
      std::vector<std::string> rest_rule(n + 1);  // rest_rule[k]: entries k.. each optional
      for (size_t k = n; k-- > 1;) {
        std::string body = comma_ref(k) + (optional_entries[k].wildcard ? "*" : "?");
        if (k + 1 < n) body += " " + rest_rule[k + 1];
        rest_rule[k] = add_rule(sub_name + optional_entries[k - 1].key + "-rest", body);
      }
      for (size_t k = 0; k < n; ++k) {
        if (k) rule += " | ";
        rule += optional_entries[k].kv_rule + (optional_entries[k].wildcard ? " " + comma_ref(k) + "*" : "");
        if (k + 1 < n) rule += " " + rest_rule[k + 1];
      }
      if (!required_kvs.empty()) rule += " )";
      rule += " )?";
    }
    rule += " space \"}\"";
    return add_rule(rule_name, rule);
  }

  // Built-in rules that hand-written rule bodies name without defining them.
  void add_missing_builtins() {
    bool added = true;
    while (added) {
      added = false;
      std::vector<std::string> names;
      for (const auto& [rule_name, body] : rules) {
        // Words outside literals and classes.
        for (size_t i = 0; i < body.size();) {
          const char c = body[i];
          if (c == '"' || c == '[') {
            const char close = c == '"' ? '"' : ']';
            ++i;
            while (i < body.size() && body[i] != close) i += body[i] == '\\' ? 2 : 1;
            ++i;
          } else if (std::isalpha(static_cast<unsigned char>(c))) {
            size_t j = i;
            while (j < body.size() && (std::isalnum(static_cast<unsigned char>(body[j])) || body[j] == '-')) ++j;
            names.push_back(body.substr(i, j - i));
            i = j;
          } else {
            ++i;
          }
        }
      }
      for (const std::string& word : names)
        if (!rules.count(word) && find_builtin(word)) {
          add_builtin(word);
          added = true;
        }
    }
  }
};

namespace {

// Refuses documents nested deeper than the converter goes, before anything recursive (copies,
// comparisons) touches them. Iterative: a hostile document may be 100k levels deep.
void check_nesting(const Json& document) {
  constexpr size_t kMaxNesting = 4 * kMaxDepth;
  std::vector<std::pair<const Json*, size_t>> pending = {{&document, 0}};
  while (!pending.empty()) {
    const auto [value, level] = pending.back();
    pending.pop_back();
    if (level > kMaxNesting) throw SchemaError(fmt::format("JSON schema #: nested deeper than {} levels", kMaxNesting), "properties");
    if (value->is_structured())
      for (const Json& child : *value) pending.push_back({&child, level + 1});
  }
}

}  // namespace

GrammarBuilder::GrammarBuilder() : impl_(new Impl) { impl_->add_builtin("space"); }
GrammarBuilder::~GrammarBuilder() { delete impl_; }

std::string GrammarBuilder::add_schema(const std::string& name, const Json& schema) {
  Impl& impl = *impl_;
  check_nesting(schema);
  impl.document = &schema;
  impl.ref_rules.clear();
  impl.open_refs.clear();
  impl.nesting = 0;
  impl.depth = 0;
  const bool is_root = name.empty() || name == "root";
  impl.ref_prefix = is_root ? "" : Impl::sanitize(name) + "-";
  if (!is_root) {
    // A schema's own rules are prefixed by its name, kept apart from another schema's.
    return impl.visit(schema, Impl::sanitize(name), "#");
  }
  return impl.visit(schema, "", "#");
}

std::string GrammarBuilder::add_rule(const std::string& name, const std::string& body) { return impl_->add_rule(name, body); }

std::string GrammarBuilder::text() const {
  impl_->add_missing_builtins();
  if (!impl_->rules.count("root")) throw SchemaError("JSON schema grammar: no root rule was added", "root");
  std::string out;
  for (const auto& [name, body] : impl_->rules) out += name + " ::= " + body + "\n";
  return out;
}

std::string json_schema_to_gbnf(const Json& schema) {
  GrammarBuilder builder;
  builder.add_schema("root", schema);
  return builder.text();
}

std::string json_object_gbnf() { return json_schema_to_gbnf(Json{{"type", "object"}}); }

}  // namespace okapi::grammar
