// Jinja2's built-in filters (jinja2/filters.py) and tests (jinja2/tests.py), plus HF's tojson.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "jinja/jinja_builtins.hpp"
#include "jinja/jinja_text.hpp"

namespace okapi::jinja {

namespace {

std::string soft_str(const Value& value) { return value.str(); }

// What a filter that calls a str method on soft_str(value) gives: Markup again when value was
// Markup (Markup's str methods return Markup), else plain str.
Value like_input(Interpreter&, const Value& input, Value result) {
  if (!input.is_markup() || !result.is_string()) return result;
  return Value::markup(result.as_tagged());
}

std::int64_t int_argument(Interpreter& in, const CallArgs& args, std::size_t index, std::string_view name,
                          std::int64_t fallback) {
  const Value* value = argument(args, index, name);
  if (value == nullptr) return fallback;
  if (!value->is_int() && !value->is_bool()) in.fail(fmt::format("'{}' must be an integer, not {}", name, value->type_name()));
  return value->as_int();
}

bool bool_argument(const CallArgs& args, std::size_t index, std::string_view name, bool fallback) {
  const Value* value = argument(args, index, name);
  return value == nullptr ? fallback : value->truthy();
}

// Jinja's attribute paths for map / sort / selectattr: "a.b.0" looks up a, then b, then item 0.
Value lookup_path(Interpreter& in, const Value& item, const Value& path) {
  if (!path.is_string()) return in.get_item(item, path);
  Value current = item;
  std::string_view rest = path.as_string();
  while (true) {
    const std::size_t dot = rest.find('.');
    const std::string part(rest.substr(0, dot));
    Value key = Value::string(part);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        part.size() < 18) {
      key = Value::integer(std::stoll(part));
    }
    current = in.get_item(current, key);
    if (dot == std::string_view::npos) return current;
    rest = rest.substr(dot + 1);
  }
}

// Sort key: strings lower-cased unless case_sensitive (Jinja's ignore_case).
Value sort_key(const Value& value, bool case_sensitive) {
  if (!case_sensitive && value.is_string()) return Value::string(lower(value.as_string()));
  return value;
}

int ordered(Interpreter& in, const Value& a, const Value& b) {
  const std::optional<int> order = compare(a, b);
  if (!order) {
    if (a.is_undefined()) in.fail_undefined(a);
    if (b.is_undefined()) in.fail_undefined(b);
    in.fail(fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
  }
  return *order;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  const std::u32string cps = decode_utf8(text);
  std::u32string current;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool breaks = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                        c == 0x2028 || c == 0x2029;
    if (!breaks) {
      current.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    lines.push_back(encode_utf8(current));
    current.clear();
  }
  if (!current.empty()) lines.push_back(encode_utf8(current));
  return lines;
}

Value filter_trim(Interpreter& in, const Value& value, CallArgs& args) {
  const Value* chars = argument(args, 0, "chars");
  std::u32string set;
  const bool given = chars != nullptr && chars->is_string();
  // Markup.strip escapes its argument.
  if (given) set = decode_utf8(value.is_markup() ? in.escape_html(*chars).as_string() : chars->as_string());
  // A substring: each byte keeps its origin.
  const TaggedText text = in.text_of(value);
  const auto [begin, end] = strip_range(text.text, true, true, given ? &set : nullptr);
  return like_input(in, value, in.make_string(text.substr(begin, end)));
}

Value filter_length(Interpreter& in, const Value& value, CallArgs&) {
  if (value.is_generator()) in.fail("object of type 'generator' has no len()");
  switch (value.kind()) {
    case Value::Kind::String: return Value::integer(static_cast<std::int64_t>(count_code_points(value.as_string())));
    case Value::Kind::List: return Value::integer(static_cast<std::int64_t>(value.as_list().items.size()));
    case Value::Kind::Dict: return Value::integer(static_cast<std::int64_t>(value.as_dict().entries.size()));
    case Value::Kind::Undefined: return Value::integer(0);
    case Value::Kind::Loop: return Value::integer(value.as_loop().length);
    default: in.fail(fmt::format("object of type '{}' has no len()", value.type_name()));
  }
}

void append_ascii_escaped(std::string& out, const std::string& json) {
  for (char32_t c : decode_utf8(json)) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      const char32_t v = c - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                         static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
    }
  }
}

// HF: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
Value filter_tojson(Interpreter& in, const Value& value, CallArgs& args) {
  JsonOptions options;
  options.max_bytes = in.limits().max_output_bytes;
  const bool ensure_ascii = bool_argument(args, 0, "ensure_ascii", false);
  if (const Value* indent = argument(args, 1, "indent"); indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) {
      options.indent = indent->as_string();
    } else if (indent->is_int() || indent->is_bool()) {
      options.indent = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(indent->as_int(), 0, 1024)), ' ');
    } else {
      in.fail(fmt::format("indent must be an int or a str, not {}", indent->type_name()));
    }
    options.item_separator = ",";
  }
  if (const Value* separators = argument(args, 2, "separators"); separators != nullptr && !separators->is_none()) {
    if (!separators->is_list() || separators->as_list().items.size() != 2 || !separators->as_list().items[0].is_string() ||
        !separators->as_list().items[1].is_string()) {
      in.fail("separators must be a pair of strings");
    }
    options.item_separator = separators->as_list().items[0].as_string();
    options.key_separator = separators->as_list().items[1].as_string();
  }
  options.sort_keys = bool_argument(args, 3, "sort_keys", false);
  std::string out, error;
  if (!to_json(value, options, out, error)) in.fail(error);
  if (!ensure_ascii) return in.make_string(std::move(out));
  std::string ascii;
  append_ascii_escaped(ascii, out);
  return in.make_string(std::move(ascii));
}

Value filter_items(Interpreter& in, const Value& value, CallArgs&) {
  if (value.is_undefined()) return in.make_list({});
  if (!value.is_dict()) in.fail("Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [key, item] : value.as_dict().entries) pairs.push_back(Value::list({key, item}, true));
  return in.make_list(std::move(pairs));
}

Value filter_join(Interpreter& in, const Value& value, CallArgs& args) {
  const Value* separator = argument(args, 0, "d");
  const Value* attribute = argument(args, 1, "attribute");
  const TaggedText glue = separator != nullptr ? in.text_of(*separator) : TaggedText();
  TaggedText out;
  bool first = true;
  for (const Value& item : in.iterate(value)) {
    if (!first) out.append(glue);
    first = false;
    out.append(in.text_of(attribute != nullptr ? lookup_path(in, item, *attribute) : item));
    in.check_size(out.text.size());
  }
  return in.make_string(std::move(out));
}

Value filter_upper(Interpreter& in, const Value& value, CallArgs&) {
  return like_input(in, value, in.make_string(upper(soft_str(value))));
}
Value filter_lower(Interpreter& in, const Value& value, CallArgs&) {
  return like_input(in, value, in.make_string(lower(soft_str(value))));
}
// Jinja's title filter (not str.title): words start after whitespace or one of -({[<; the first
// character of each is upper-cased, the rest lower-cased.
Value filter_title(Interpreter& in, const Value& value, CallArgs&) {
  std::u32string cps = decode_utf8(soft_str(value));
  bool word_start = true;
  for (auto& c : cps) {
    const bool separator = is_python_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) {
      word_start = true;
      continue;
    }
    c = word_start ? to_upper(c) : to_lower(c);
    word_start = false;
  }
  return in.make_string(encode_utf8(cps));
}
Value filter_capitalize(Interpreter& in, const Value& value, CallArgs&) {
  return like_input(in, value, in.make_string(capitalize(soft_str(value))));
}

// Kept text keeps its origin; each inserted copy of new_text has new_text's.
TaggedText replace_all(Interpreter& in, const TaggedText& tagged, const std::string& old_text, const TaggedText& new_text,
                       std::int64_t count) {
  const std::string& text = tagged.text;
  TaggedText out;
  if (old_text.empty()) {
    // Python inserts the replacement between code points (and at both ends).
    const std::vector<std::size_t> offsets = code_point_offsets(text);
    std::int64_t done = 0;
    for (std::size_t i = 0; i < offsets.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(new_text);
        ++done;
      }
      if (i + 1 < offsets.size()) out.append(tagged, offsets[i], offsets[i + 1]);
      in.check_size(out.text.size());
    }
    return out;
  }
  std::size_t pos = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    const std::size_t found = text.find(old_text, pos);
    if (found == std::string::npos) break;
    out.append(tagged, pos, found);
    out.append(new_text);
    in.check_size(out.text.size());
    pos = found + old_text.size();
    ++done;
  }
  out.append(tagged, pos, text.size());
  return out;
}

Value filter_replace(Interpreter& in, const Value& value, CallArgs& args) {
  const Value* old_text = argument(args, 0, "old");
  const Value* new_text = argument(args, 1, "new");
  if (old_text == nullptr || new_text == nullptr) in.fail("replace() needs the old and new strings");
  const std::int64_t count = int_argument(in, args, 2, "count", -1);
  return in.make_string(replace_all(in, in.text_of(value), old_text->str(), in.text_of(*new_text), count));
}

Value filter_default(Interpreter&, const Value& value, CallArgs& args) {
  const Value* fallback = argument(args, 0, "default_value");
  const bool boolean = bool_argument(args, 1, "boolean", false);
  if (value.is_undefined() || (boolean && !value.truthy())) return fallback != nullptr ? *fallback : Value::string("");
  return value;
}

Value filter_first(Interpreter& in, const Value& value, CallArgs&) {
  std::vector<Value> items = in.iterate(value);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value filter_last(Interpreter& in, const Value& value, CallArgs&) {
  if (value.is_generator()) in.fail("'generator' object is not reversible");
  std::vector<Value> items = in.iterate(value);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value filter_list(Interpreter& in, const Value& value, CallArgs&) { return in.make_list(in.iterate(value)); }

// Jinja2's map / select / reject / selectattr / rejectattr are generators that start with
// `if value:`: over none, undefined, 0 or "" they yield nothing, whatever their arguments.
Value filter_map(Interpreter& in, const Value& value, CallArgs& args) {
  std::vector<Value> out;
  if (!value.truthy()) return Value::generator({});
  if (const Value* attribute = args.find_keyword("attribute")) {
    const Value* fallback = args.find_keyword("default");
    for (const Value& item : in.iterate(value)) {
      Value mapped = lookup_path(in, item, *attribute);
      if (mapped.is_undefined() && fallback != nullptr) mapped = *fallback;
      out.push_back(std::move(mapped));
    }
    in.charge(out.size() * 4);
    return Value::generator(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) in.fail("map requires a filter argument");
  const std::string name = args.positional[0].as_string();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : in.iterate(value)) {
    CallArgs call_args = rest;
    out.push_back(in.apply_filter(name, item, call_args));
  }
  in.charge(out.size() * 4);
  return Value::generator(std::move(out));
}

// select / reject / selectattr / rejectattr
Value select_items(Interpreter& in, const Value& value, CallArgs& args, bool by_attribute, bool keep_when) {
  if (!value.truthy()) return Value::generator({});
  std::size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) in.fail("Missing parameter for attribute name");
    attribute = args.positional[next++];
  }
  std::string test_name;
  if (next < args.positional.size()) test_name = args.positional[next++].str();
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  test_args.keyword = args.keyword;
  std::vector<Value> out;
  for (const Value& item : in.iterate(value)) {
    const Value subject = by_attribute ? lookup_path(in, item, attribute) : item;
    CallArgs call_args = test_args;
    const bool passed = test_name.empty() ? subject.truthy() : in.apply_test(test_name, subject, call_args);
    if (passed == keep_when) out.push_back(item);
  }
  in.charge(out.size() * 4);
  return Value::generator(std::move(out));
}

Value filter_select(Interpreter& in, const Value& v, CallArgs& a) { return select_items(in, v, a, false, true); }
Value filter_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_items(in, v, a, false, false); }
Value filter_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_items(in, v, a, true, true); }
Value filter_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_items(in, v, a, true, false); }

Value filter_string(Interpreter& in, const Value& value, CallArgs&) {
  if (value.is_string()) return value;
  return in.make_string(value.str());
}

std::optional<std::int64_t> parse_python_int(std::string text, int base) {
  text = strip(text, true, true, nullptr);
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(text.c_str(), &end, base);
  if (errno != 0 || end != text.c_str() + text.size()) return std::nullopt;
  return static_cast<std::int64_t>(parsed);
}

std::optional<double> parse_python_float(const std::string& raw) {
  const std::string text = strip(raw, true, true, nullptr);
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double parsed = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return parsed;
}

Value filter_int(Interpreter& in, const Value& value, CallArgs& args) {
  const Value* fallback = argument(args, 0, "default");
  const std::int64_t base = int_argument(in, args, 1, "base", 10);
  const Value otherwise = fallback != nullptr ? *fallback : Value::integer(0);
  if (value.is_int() || value.is_bool()) return Value::integer(value.as_int());
  if (value.is_float()) {
    const double d = value.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return otherwise;
    return Value::integer(static_cast<std::int64_t>(d));
  }
  if (value.is_string()) {
    if (base >= 2 && base <= 36) {
      if (auto parsed = parse_python_int(value.as_string(), static_cast<int>(base))) return Value::integer(*parsed);
    }
    if (auto parsed = parse_python_float(value.as_string()); parsed && std::isfinite(*parsed) && std::fabs(*parsed) < 9.2e18) {
      return Value::integer(static_cast<std::int64_t>(*parsed));
    }
  }
  return otherwise;
}

Value filter_float(Interpreter&, const Value& value, CallArgs& args) {
  const Value* fallback = argument(args, 0, "default");
  const Value otherwise = fallback != nullptr ? *fallback : Value::number(0.0);
  if (value.is_number()) return Value::number(value.as_double());
  if (value.is_string()) {
    if (auto parsed = parse_python_float(value.as_string())) return Value::number(*parsed);
  }
  return otherwise;
}

Value filter_abs(Interpreter& in, const Value& value, CallArgs&) {
  if (value.is_float()) return Value::number(std::fabs(value.as_double()));
  if (value.is_int() || value.is_bool()) {
    if (value.as_int() == std::numeric_limits<std::int64_t>::min()) in.fail("integer overflow");
    return Value::integer(std::llabs(value.as_int()));
  }
  in.fail(fmt::format("bad operand type for abs(): '{}'", value.type_name()));
}

Value filter_round(Interpreter& in, const Value& value, CallArgs& args) {
  const std::int64_t precision = int_argument(in, args, 0, "precision", 0);
  const Value* method_value = argument(args, 1, "method");
  const std::string method = method_value != nullptr ? method_value->str() : "common";
  if (!value.is_number()) in.fail(fmt::format("type {} doesn't define __round__ method", value.type_name()));
  if (method != "common" && method != "ceil" && method != "floor") in.fail("method must be common, ceil or floor");
  const double x = value.as_double();
  if (method == "common") {
    if (!value.is_float() && precision >= 0) return Value::integer(value.as_int());
    if (!value.is_float()) {  // round(int, -n): an int, ties to even
      std::int64_t unit = 1;
      for (std::int64_t i = 0; i < -precision && unit <= std::numeric_limits<std::int64_t>::max() / 10; ++i) unit *= 10;
      const std::int64_t v = value.as_int();
      std::int64_t quotient = v / unit, remainder = v % unit;
      if (remainder < 0) {
        remainder += unit;
        quotient -= 1;
      }
      if (remainder * 2 > unit || (remainder * 2 == unit && quotient % 2 != 0)) quotient += 1;
      std::int64_t result = 0;
      if (__builtin_mul_overflow(quotient, unit, &result)) in.fail("integer overflow");
      return Value::integer(result);
    }
    if (!std::isfinite(x)) return Value::number(x);
    if (precision >= 0 && precision < 300) {
      // Correctly rounded, ties to even, like Python's round(x, n).
      return Value::number(std::strtod(fmt::format("{:.{}f}", x, precision).c_str(), nullptr));
    }
    const double scale = std::pow(10.0, static_cast<double>(precision));
    return Value::number(std::nearbyint(x * scale) / scale);
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  return Value::number((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
}

Value filter_unique(Interpreter& in, const Value& value, CallArgs& args) {
  const bool case_sensitive = bool_argument(args, 0, "case_sensitive", false);
  const Value* attribute = argument(args, 1, "attribute");
  std::vector<Value> seen, out;
  for (const Value& item : in.iterate(value)) {
    const Value key = sort_key(attribute != nullptr ? lookup_path(in, item, *attribute) : item, case_sensitive);
    in.charge(seen.size());
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return in.make_list(std::move(out));
}

Value filter_sort(Interpreter& in, const Value& value, CallArgs& args) {
  const bool reverse = bool_argument(args, 0, "reverse", false);
  const bool case_sensitive = bool_argument(args, 1, "case_sensitive", false);
  const Value* attribute = argument(args, 2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : in.iterate(value)) {
    keyed.emplace_back(sort_key(attribute != nullptr ? lookup_path(in, item, *attribute) : item, case_sensitive), item);
  }
  in.charge(keyed.size() * 8);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? ordered(in, b.first, a.first) < 0 : ordered(in, a.first, b.first) < 0;
  });
  std::vector<Value> out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return in.make_list(std::move(out));
}

Value filter_dictsort(Interpreter& in, const Value& value, CallArgs& args) {
  if (!value.is_dict()) in.fail("You can only sort by either \"key\" or \"value\" of a mapping");
  const bool case_sensitive = bool_argument(args, 0, "case_sensitive", false);
  const Value* by = argument(args, 1, "by");
  const bool by_value = by != nullptr && by->str() == "value";
  const bool reverse = bool_argument(args, 2, "reverse", false);
  std::vector<Value> pairs;
  for (const auto& [key, item] : value.as_dict().entries) pairs.push_back(Value::list({key, item}, true));
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    const Value x = sort_key(a.as_list().items[by_value ? 1 : 0], case_sensitive);
    const Value y = sort_key(b.as_list().items[by_value ? 1 : 0], case_sensitive);
    return reverse ? ordered(in, y, x) < 0 : ordered(in, x, y) < 0;
  });
  return in.make_list(std::move(pairs));
}

Value filter_reverse(Interpreter& in, const Value& value, CallArgs&) {
  if (value.is_string()) {
    std::u32string cps = decode_utf8(value.as_string());
    std::reverse(cps.begin(), cps.end());
    return like_input(in, value, in.make_string(encode_utf8(cps)));
  }
  std::vector<Value> items = in.iterate(value);
  std::reverse(items.begin(), items.end());
  return in.make_list(std::move(items));
}

// Markup(value): the printed value, marked safe (HF renders without autoescape, so it prints as is;
// what changes is how it concatenates and formats, see Value::markup).
Value filter_safe(Interpreter& in, const Value& value, CallArgs&) {
  if (value.is_markup()) return value;
  return Value::markup(in.text_of(value));
}

Value filter_escape(Interpreter& in, const Value& value, CallArgs&) { return in.escape_html(value); }

Value filter_forceescape(Interpreter& in, const Value& value, CallArgs&) {
  return in.escape_html(Value::string(in.text_of(value)));
}

Value filter_indent(Interpreter& in, const Value& value, CallArgs& args) {
  const Value* width = argument(args, 0, "width");
  std::string indention = "    ";
  if (width != nullptr) {
    if (width->is_string()) {
      indention = width->as_string();
    } else if (width->is_int() || width->is_bool()) {
      indention = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(width->as_int(), 0, 4096)), ' ');
    } else {
      in.fail("indent width must be an int or a str");
    }
  }
  const bool first = bool_argument(args, 1, "first", false);
  const bool blank = bool_argument(args, 2, "blank", false);
  const std::vector<std::string> lines = split_lines(soft_str(value) + "\n");
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty()) out += indention;
    }
    out += lines[i];
    in.check_size(out.size());
  }
  if (first) out = indention + out;
  return like_input(in, value, in.make_string(std::move(out)));
}

Value filter_wordcount(Interpreter&, const Value& value, CallArgs&) {
  std::int64_t words = 0;
  bool in_word = false;
  for (char32_t c : decode_utf8(soft_str(value))) {
    const bool word_char = c == '_' || is_digit(c) || is_alpha(c) || (c >= 0x80 && !is_python_space(c) && c > 0x2FFF);
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::integer(words);
}

Value filter_batch(Interpreter& in, const Value& value, CallArgs& args) {
  const std::int64_t size = int_argument(in, args, 0, "linecount", 1);
  if (size <= 0) in.fail("batch size must be positive");
  const Value* fill = argument(args, 1, "fill_with");
  std::vector<Value> batches, current;
  for (const Value& item : in.iterate(value)) {
    current.push_back(item);
    if (static_cast<std::int64_t>(current.size()) == size) {
      batches.push_back(in.make_list(std::move(current)));
      current.clear();
    }
  }
  if (!current.empty()) {
    if (fill != nullptr) {
      while (static_cast<std::int64_t>(current.size()) < size) current.push_back(*fill);
    }
    batches.push_back(in.make_list(std::move(current)));
  }
  return in.make_list(std::move(batches));
}

Value filter_sum(Interpreter& in, const Value& value, CallArgs& args) {
  const Value* attribute = argument(args, 0, "attribute");
  const Value* start = argument(args, 1, "start");
  Value total = start != nullptr ? *start : Value::integer(0);
  for (const Value& item : in.iterate(value)) {
    const Value addend = attribute != nullptr ? lookup_path(in, item, *attribute) : item;
    if (!total.is_number() || !addend.is_number()) {
      in.fail(fmt::format("unsupported operand type(s) for +: '{}' and '{}'", total.type_name(), addend.type_name()));
    }
    if (total.is_float() || addend.is_float()) {
      total = Value::number(total.as_double() + addend.as_double());
    } else {
      std::int64_t result = 0;
      if (__builtin_add_overflow(total.as_int(), addend.as_int(), &result)) in.fail("integer overflow");
      total = Value::integer(result);
    }
  }
  return total;
}

Value min_max(Interpreter& in, const Value& value, CallArgs& args, bool want_max) {
  const bool case_sensitive = bool_argument(args, 0, "case_sensitive", false);
  const Value* attribute = argument(args, 1, "attribute");
  std::optional<Value> best, best_key;
  for (const Value& item : in.iterate(value)) {
    const Value key = sort_key(attribute != nullptr ? lookup_path(in, item, *attribute) : item, case_sensitive);
    if (!best || (want_max ? ordered(in, key, *best_key) > 0 : ordered(in, key, *best_key) < 0)) {
      best = item;
      best_key = key;
    }
  }
  if (!best) return Value::undefined("No aggregated item, sequence was empty.");
  return *best;
}

Value filter_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }
Value filter_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }

Value filter_center(Interpreter& in, const Value& value, CallArgs& args) {
  const std::int64_t width = std::min<std::int64_t>(int_argument(in, args, 0, "width", 80), 1 << 20);
  const std::string text = soft_str(value);
  const auto length = static_cast<std::int64_t>(count_code_points(text));
  if (width <= length) return like_input(in, value, in.make_string(text));
  const std::int64_t margin = width - length;
  const std::int64_t left = margin / 2 + (margin & width & 1);
  return like_input(in, value, in.make_string(std::string(static_cast<std::size_t>(left), ' ') + text +
                                              std::string(static_cast<std::size_t>(margin - left), ' ')));
}

Value filter_format(Interpreter& in, const Value& value, CallArgs& args) {
  if (!args.keyword.empty()) {
    DictData mapping;
    for (const auto& [key, item] : args.keyword) mapping.set(Value::string(key), item);
    const Value mapping_value = Value::dict(std::move(mapping));
    if (value.is_markup()) return markup_percent_format(in, value, {}, &mapping_value);
    return in.make_string(percent_format(in, in.text_of(value), {}, &mapping_value));
  }
  if (value.is_markup()) return markup_percent_format(in, value, args.positional, nullptr);
  return in.make_string(percent_format(in, in.text_of(value), args.positional, nullptr));
}

Value filter_attr(Interpreter& in, const Value& value, CallArgs& args) {
  const Value* name = argument(args, 0, "name");
  if (name == nullptr) in.fail("attr() needs a name");
  if (value.is_undefined()) in.fail_undefined(value);
  if (value.is_namespace() || value.is_loop()) return in.get_attribute(value, name->str());
  if (auto method = find_method(value, name->str())) return *method;
  return Value::undefined(fmt::format("{} has no attribute {}", python_repr(value.object_type_repr()), python_repr(name->str())));
}

Value filter_truncate(Interpreter& in, const Value& value, CallArgs& args) {
  const std::int64_t length = int_argument(in, args, 0, "length", 255);
  const bool killwords = bool_argument(args, 1, "killwords", false);
  const Value* end_value = argument(args, 2, "end");
  const std::string end = end_value != nullptr ? end_value->str() : "...";
  const std::int64_t leeway = int_argument(in, args, 3, "leeway", 5);
  const std::u32string text = decode_utf8(soft_str(value));
  const std::u32string end_cps = decode_utf8(end);
  if (length < static_cast<std::int64_t>(end_cps.size())) {
    in.fail(fmt::format("expected length >= {}, got {}", end_cps.size(), length));
  }
  if (static_cast<std::int64_t>(text.size()) <= length + leeway) return like_input(in, value, in.make_string(encode_utf8(text)));
  const auto keep = static_cast<std::size_t>(std::max<std::int64_t>(0, length - static_cast<std::int64_t>(end_cps.size())));
  std::u32string result = text.substr(0, keep);
  if (!killwords) {
    const std::size_t space = result.rfind(U' ');
    if (space != std::u32string::npos) result = result.substr(0, space);
  }
  if (value.is_markup()) {  // Markup + end: end escaped
    TaggedText marked(encode_utf8(result), in.in_user_context());
    marked.append(in.escape_html(end_value != nullptr ? *end_value : Value::string(end)).as_tagged());
    return Value::markup(in.make_string(std::move(marked)).as_tagged());
  }
  return in.make_string(encode_utf8(result) + end);
}

const std::map<std::string_view, FilterFunction>& filters() {
  static const std::map<std::string_view, FilterFunction> table = {
      {"abs", filter_abs},         {"attr", filter_attr},
      {"batch", filter_batch},     {"capitalize", filter_capitalize},
      {"center", filter_center},   {"count", filter_length},
      {"d", filter_default},       {"default", filter_default},
      {"dictsort", filter_dictsort}, {"e", filter_escape},
      {"escape", filter_escape},   {"first", filter_first},
      {"float", filter_float},     {"forceescape", filter_forceescape},
      {"format", filter_format},   {"indent", filter_indent},
      {"int", filter_int},         {"items", filter_items},
      {"join", filter_join},       {"last", filter_last},
      {"length", filter_length},   {"list", filter_list},
      {"lower", filter_lower},     {"map", filter_map},
      {"max", filter_max},         {"min", filter_min},
      {"reject", filter_reject},   {"rejectattr", filter_rejectattr},
      {"replace", filter_replace}, {"reverse", filter_reverse},
      {"round", filter_round},     {"safe", filter_safe},
      {"select", filter_select},   {"selectattr", filter_selectattr},
      {"sort", filter_sort},       {"string", filter_string},
      {"sum", filter_sum},         {"title", filter_title},
      {"tojson", filter_tojson},   {"trim", filter_trim},
      {"truncate", filter_truncate}, {"unique", filter_unique},
      {"upper", filter_upper},     {"wordcount", filter_wordcount},
  };
  return table;
}

// ---- tests ----

const Value& test_operand(Interpreter& in, const CallArgs& args, const char* test) {
  if (args.positional.empty()) in.fail(fmt::format("test '{}' needs an argument", test));
  return args.positional[0];
}

bool test_defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool test_undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool test_none(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
bool test_boolean(Interpreter&, const Value& v, CallArgs&) { return v.is_bool(); }
bool test_true(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool test_false(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool test_integer(Interpreter&, const Value& v, CallArgs&) { return v.is_int(); }
bool test_float(Interpreter&, const Value& v, CallArgs&) { return v.is_float(); }
bool test_number(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
bool test_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
bool test_mapping(Interpreter&, const Value& v, CallArgs&) { return v.is_dict(); }
bool test_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined() || v.is_loop();
}
bool test_sequence(Interpreter&, const Value& v, CallArgs&) {
  return (v.is_list() && !v.is_generator()) || v.is_dict() || v.is_string() || v.is_undefined();
}
bool test_callable(Interpreter&, const Value& v, CallArgs&) { return v.is_function() || v.is_undefined() || v.is_loop(); }
bool test_lower(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && lower(v.as_string()) == v.as_string(); }
bool test_upper(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && upper(v.as_string()) == v.as_string(); }
bool test_escaped(Interpreter&, const Value& v, CallArgs&) { return v.is_markup(); }

std::int64_t integer_operand(Interpreter& in, const Value& v, const char* test) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_undefined()) in.fail_undefined(v);
  in.fail(fmt::format("test '{}' needs an integer, not {}", test, v.type_name()));
}
bool test_even(Interpreter& in, const Value& v, CallArgs&) { return integer_operand(in, v, "even") % 2 == 0; }
bool test_odd(Interpreter& in, const Value& v, CallArgs&) { return integer_operand(in, v, "odd") % 2 != 0; }
bool test_divisibleby(Interpreter& in, const Value& v, CallArgs& a) {
  const std::int64_t divisor = integer_operand(in, test_operand(in, a, "divisibleby"), "divisibleby");
  if (divisor == 0) in.fail("integer division or modulo by zero");
  if (divisor == -1) return true;
  return integer_operand(in, v, "divisibleby") % divisor == 0;
}
bool test_eq(Interpreter& in, const Value& v, CallArgs& a) { return equals(v, test_operand(in, a, "eq")); }
bool test_ne(Interpreter& in, const Value& v, CallArgs& a) { return !equals(v, test_operand(in, a, "ne")); }
bool test_gt(Interpreter& in, const Value& v, CallArgs& a) { return ordered(in, v, test_operand(in, a, "gt")) > 0; }
bool test_ge(Interpreter& in, const Value& v, CallArgs& a) { return ordered(in, v, test_operand(in, a, "ge")) >= 0; }
bool test_lt(Interpreter& in, const Value& v, CallArgs& a) { return ordered(in, v, test_operand(in, a, "lt")) < 0; }
bool test_le(Interpreter& in, const Value& v, CallArgs& a) { return ordered(in, v, test_operand(in, a, "le")) <= 0; }
bool test_in(Interpreter& in, const Value& v, CallArgs& a) {
  const Value& container = test_operand(in, a, "in");
  if (container.is_string()) return v.is_string() && container.as_string().find(v.as_string()) != std::string::npos;
  if (container.is_dict()) return container.as_dict().find(v) != nullptr;
  for (const Value& item : in.iterate(container)) {
    if (equals(item, v)) return true;
  }
  return false;
}
bool test_sameas(Interpreter& in, const Value& v, CallArgs& a) {
  const Value& other = test_operand(in, a, "sameas");
  if (v.kind() != other.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::None: return true;
    case Value::Kind::Bool:
    case Value::Kind::Int:
    case Value::Kind::String: return equals(v, other);
    case Value::Kind::List: return &v.as_list() == &other.as_list();
    case Value::Kind::Dict: return &v.as_dict() == &other.as_dict();
    default: return equals(v, other);
  }
}
bool test_filter(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && find_filter(v.as_string()) != nullptr; }
bool test_test(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && find_test(v.as_string()) != nullptr; }

const std::map<std::string_view, TestFunction>& tests() {
  static const std::map<std::string_view, TestFunction> table = {
      {"!=", test_ne},          {"<", test_lt},           {"<=", test_le},          {"==", test_eq},
      {">", test_gt},           {">=", test_ge},          {"boolean", test_boolean}, {"callable", test_callable},
      {"defined", test_defined}, {"divisibleby", test_divisibleby}, {"eq", test_eq}, {"equalto", test_eq},
      {"escaped", test_escaped}, {"even", test_even},     {"false", test_false},    {"filter", test_filter},
      {"float", test_float},    {"ge", test_ge},          {"greaterthan", test_gt}, {"gt", test_gt},
      {"in", test_in},          {"integer", test_integer}, {"iterable", test_iterable}, {"le", test_le},
      {"lessthan", test_lt},    {"lower", test_lower},    {"lt", test_lt},          {"mapping", test_mapping},
      {"ne", test_ne},          {"none", test_none},      {"number", test_number},  {"odd", test_odd},
      {"sameas", test_sameas},  {"sequence", test_sequence}, {"string", test_string}, {"test", test_test},
      {"true", test_true},      {"undefined", test_undefined}, {"upper", test_upper},
  };
  return table;
}

}  // namespace

const Value* argument(const CallArgs& args, std::size_t index, std::string_view name) {
  if (index < args.positional.size()) return &args.positional[index];
  return args.find_keyword(name);
}

FilterFunction find_filter(std::string_view name) {
  const auto& table = filters();
  const auto found = table.find(name);
  return found == table.end() ? nullptr : found->second;
}

TestFunction find_test(std::string_view name) {
  const auto& table = tests();
  const auto found = table.find(name);
  return found == table.end() ? nullptr : found->second;
}

}  // namespace okapi::jinja
