// Methods of str / dict / list that templates call (`content.split('</think>')`, `message.get('x')`),
// with the ImmutableSandboxedEnvironment's refusal of mutating ones, and Python's string formatting.
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "jinja/jinja_builtins.hpp"
#include "jinja/jinja_text.hpp"

namespace okapi::jinja {

namespace {

using Method = std::function<Value(Interpreter&, CallArgs&)>;

// receiver_user: the receiver holds caller text, so what the method makes is caller text too
// (unless it tracks origins itself).
Value bind(std::string name, Method method, bool receiver_user) {
  auto function = std::make_shared<Function>();
  function->name = std::move(name);
  function->call = std::move(method);
  function->user_receiver = receiver_user;
  return Value::function(std::move(function));
}

const std::string& string_argument(Interpreter& in, const CallArgs& args, std::size_t index, std::string_view name) {
  const Value* value = argument(args, index, name);
  if (value == nullptr) in.fail(fmt::format("missing argument '{}'", name));
  if (!value->is_string()) {
    if (value->is_undefined()) in.fail_undefined(*value);
    in.fail(fmt::format("argument '{}' must be str, not {}", name, value->type_name()));
  }
  return value->as_string();
}

std::int64_t optional_int(Interpreter& in, const CallArgs& args, std::size_t index, std::string_view name, std::int64_t fallback) {
  const Value* value = argument(args, index, name);
  if (value == nullptr || value->is_none()) return fallback;
  if (!value->is_int() && !value->is_bool()) in.fail(fmt::format("argument '{}' must be int, not {}", name, value->type_name()));
  return value->as_int();
}

// Python's str.split / rsplit. The parts are substrings: each byte keeps its origin.
std::vector<Value> split_string(Interpreter& in, const TaggedText& tagged, const Value* separator, std::int64_t max_split,
                                bool from_right) {
  const std::string& text = tagged.text;
  std::vector<std::pair<std::size_t, std::size_t>> parts;  // byte ranges of text
  if (separator == nullptr || separator->is_none()) {
    const std::u32string cps = decode_utf8(text);
    const std::vector<std::size_t> at = code_point_offsets(text);
    const auto range = [&](std::size_t b, std::size_t e) { return std::make_pair(at[b], at[e]); };
    std::vector<std::pair<std::size_t, std::size_t>> words;
    std::size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_python_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      std::size_t j = i;
      while (j < cps.size() && !is_python_space(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (max_split >= 0 && static_cast<std::int64_t>(words.size()) > max_split + 1) {
      // The unsplit rest runs to the string's end (split) or start (rsplit), whitespace and all.
      if (!from_right) {
        const auto k = static_cast<std::size_t>(max_split);
        for (std::size_t w = 0; w < k; ++w) parts.push_back(range(words[w].first, words[w].second));
        parts.push_back(range(words[k].first, cps.size()));
      } else {
        const std::size_t first_kept = words.size() - static_cast<std::size_t>(max_split);
        parts.push_back(range(0, words[first_kept - 1].second));
        for (std::size_t w = first_kept; w < words.size(); ++w) parts.push_back(range(words[w].first, words[w].second));
      }
    } else {
      for (const auto& [b, e] : words) parts.push_back(range(b, e));
    }
  } else {
    if (!separator->is_string()) in.fail(fmt::format("must be str or None, not {}", separator->type_name()));
    const std::string& sep = separator->as_string();
    if (sep.empty()) in.fail("empty separator");
    if (!from_right) {
      std::size_t pos = 0;
      std::int64_t done = 0;
      while (max_split < 0 || done < max_split) {
        const std::size_t found = text.find(sep, pos);
        if (found == std::string::npos) break;
        parts.emplace_back(pos, found);
        pos = found + sep.size();
        ++done;
      }
      parts.emplace_back(pos, text.size());
    } else {
      std::size_t end = text.size();
      std::int64_t done = 0;
      std::vector<std::pair<std::size_t, std::size_t>> reversed;
      while (max_split < 0 || done < max_split) {
        if (end < sep.size()) break;
        const std::size_t found = text.rfind(sep, end - sep.size());
        if (found == std::string::npos) break;
        reversed.emplace_back(found + sep.size(), end);
        end = found;
        ++done;
      }
      reversed.emplace_back(0, end);
      parts.assign(reversed.rbegin(), reversed.rend());
    }
  }
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& [b, e] : parts) out.push_back(Value::string(tagged.substr(b, e)));
  in.charge(out.size());
  return out;
}

// Python's slice-style bounds for find / count / startswith (code points, as byte offsets).
std::pair<std::size_t, std::size_t> bounds(Interpreter& in, const std::string& text, const CallArgs& args, std::size_t first) {
  const Value* start_value = argument(args, first, "start");
  const Value* end_value = argument(args, first + 1, "end");
  if ((start_value == nullptr || start_value->is_none()) && (end_value == nullptr || end_value->is_none())) {
    return {0, text.size()};
  }
  const std::u32string cps = decode_utf8(text);
  const auto length = static_cast<std::int64_t>(cps.size());
  auto adjust = [&](std::int64_t v) {
    if (v < 0) v = std::max<std::int64_t>(0, v + length);
    return std::min(v, length);
  };
  const std::int64_t start = adjust(optional_int(in, args, first, "start", 0));
  const std::int64_t end = adjust(optional_int(in, args, first + 1, "end", length));
  auto byte_offset = [&](std::int64_t cp) { return encode_utf8(std::u32string_view(cps).substr(0, static_cast<std::size_t>(cp))).size(); };
  return {byte_offset(start), std::max(byte_offset(start), byte_offset(end))};
}

std::int64_t code_point_index(const std::string& text, std::size_t byte_offset) {
  return static_cast<std::int64_t>(count_code_points(std::string_view(text).substr(0, byte_offset)));
}

bool affix_matches(Interpreter& in, const std::string& text, const CallArgs& args, bool suffix) {
  const Value* affix = argument(args, 0, suffix ? "suffix" : "prefix");
  if (affix == nullptr) in.fail("missing argument");
  const auto [begin, end] = bounds(in, text, args, 1);
  const std::string_view window = std::string_view(text).substr(begin, end - begin);
  std::vector<Value> candidates;
  if (affix->is_list() && affix->as_list().is_tuple) {
    candidates = affix->as_list().items;
  } else {
    candidates.push_back(*affix);
  }
  for (const Value& candidate : candidates) {
    if (!candidate.is_string()) {
      in.fail(fmt::format("{} first arg must be str or a tuple of str, not {}", suffix ? "endswith" : "startswith",
                          candidate.type_name()));
    }
    const std::string& s = candidate.as_string();
    if (s.size() <= window.size() && (suffix ? window.substr(window.size() - s.size()) == s : window.substr(0, s.size()) == s)) {
      return true;
    }
  }
  return false;
}

std::string pad(Interpreter& in, const std::string& text, std::int64_t width, const Value* fill_value, char align) {
  std::u32string fill = U" ";
  if (fill_value != nullptr) {
    if (!fill_value->is_string() || count_code_points(fill_value->as_string()) != 1) {
      in.fail("The fill character must be exactly one character long");
    }
    fill = decode_utf8(fill_value->as_string());
  }
  width = std::min<std::int64_t>(width, static_cast<std::int64_t>(in.limits().max_output_bytes));
  const auto length = static_cast<std::int64_t>(count_code_points(text));
  if (width <= length) return text;
  const std::int64_t margin = width - length;
  std::int64_t left = align == '<' ? 0 : align == '>' ? margin : margin / 2 + (margin & width & 1);
  std::u32string out(static_cast<std::size_t>(left), fill[0]);
  std::string result = encode_utf8(out) + text + encode_utf8(std::u32string(static_cast<std::size_t>(margin - left), fill[0]));
  return result;
}

std::optional<Value> string_method(const Value& receiver, const std::string& name) {
  const std::string text = receiver.as_string();
  const Value self = receiver;  // for the methods that keep origins byte by byte
  auto method = [&](Method m) { return std::optional<Value>(bind(name, std::move(m), receiver.carries_user())); };
  if (name == "startswith" || name == "endswith") {
    const bool suffix = name == "endswith";
    return method([text, suffix](Interpreter& in, CallArgs& a) { return Value::boolean(affix_matches(in, text, a, suffix)); });
  }
  if (name == "split" || name == "rsplit") {
    const bool from_right = name == "rsplit";
    return method([self, from_right](Interpreter& in, CallArgs& a) {
      return in.make_list(split_string(in, self.as_tagged(), argument(a, 0, "sep"), optional_int(in, a, 1, "maxsplit", -1), from_right));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return method([self, left, right](Interpreter& in, CallArgs& a) {
      const TaggedText& tagged = self.as_tagged();
      const Value* chars = argument(a, 0, "chars");
      if (chars == nullptr || chars->is_none()) {
        const auto [begin, end] = strip_range(tagged.text, left, right, nullptr);
        return in.make_string(tagged.substr(begin, end));
      }
      if (!chars->is_string()) in.fail(fmt::format("strip arg must be None or str, not {}", chars->type_name()));
      const std::u32string set = decode_utf8(chars->as_string());
      const auto [begin, end] = strip_range(tagged.text, left, right, &set);
      return in.make_string(tagged.substr(begin, end));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const bool suffix = name == "removesuffix";
    return method([self, suffix](Interpreter& in, CallArgs& a) {
      const TaggedText& tagged = self.as_tagged();
      const std::string& whole = tagged.text;
      const std::string& affix = string_argument(in, a, 0, "affix");
      if (!affix.empty() && affix.size() <= whole.size()) {
        if (!suffix && whole.compare(0, affix.size(), affix) == 0) return in.make_string(tagged.substr(affix.size(), whole.size()));
        if (suffix && whole.compare(whole.size() - affix.size(), affix.size(), affix) == 0) {
          return in.make_string(tagged.substr(0, whole.size() - affix.size()));
        }
      }
      return self;
    });
  }
  if (name == "upper") return method([text](Interpreter& in, CallArgs&) { return in.make_string(upper(text)); });
  if (name == "lower" || name == "casefold") return method([text](Interpreter& in, CallArgs&) { return in.make_string(lower(text)); });
  if (name == "title") return method([text](Interpreter& in, CallArgs&) { return in.make_string(title(text)); });
  if (name == "capitalize") return method([text](Interpreter& in, CallArgs&) { return in.make_string(capitalize(text)); });
  if (name == "replace") {
    return method([self](Interpreter& in, CallArgs& a) {
      string_argument(in, a, 0, "old");
      string_argument(in, a, 1, "new");
      CallArgs filter_args;
      filter_args.positional = {*argument(a, 0, "old"), *argument(a, 1, "new")};
      filter_args.positional.push_back(Value::integer(optional_int(in, a, 2, "count", -1)));
      return in.apply_filter("replace", self, filter_args);
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    const bool from_right = name[0] == 'r';
    const bool raises = name.find("index") != std::string::npos;
    return method([text, from_right, raises](Interpreter& in, CallArgs& a) {
      const std::string& needle = string_argument(in, a, 0, "sub");
      const auto [begin, end] = bounds(in, text, a, 1);
      const std::string_view window = std::string_view(text).substr(begin, end - begin);
      const std::size_t found = from_right ? window.rfind(needle) : window.find(needle);
      if (found == std::string_view::npos) {
        if (raises) in.fail("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(code_point_index(text, begin + found));
    });
  }
  if (name == "count") {
    return method([text](Interpreter& in, CallArgs& a) {
      const std::string& needle = string_argument(in, a, 0, "sub");
      const auto [begin, end] = bounds(in, text, a, 1);
      const std::string_view window = std::string_view(text).substr(begin, end - begin);
      if (needle.empty()) return Value::integer(static_cast<std::int64_t>(count_code_points(window)) + 1);
      std::int64_t n = 0;
      for (std::size_t pos = window.find(needle); pos != std::string_view::npos; pos = window.find(needle, pos + needle.size())) ++n;
      return Value::integer(n);
    });
  }
  if (name == "join") {
    return method([self](Interpreter& in, CallArgs& a) {
      const Value* items = argument(a, 0, "iterable");
      if (items == nullptr) in.fail("join() takes exactly one argument");
      TaggedText out;
      bool first = true;
      for (const Value& item : in.iterate(*items)) {
        if (!item.is_string()) in.fail(fmt::format("sequence item: expected str instance, {} found", item.type_name()));
        if (!first) out.append(self.as_tagged());
        first = false;
        out.append(item.as_tagged());
        in.check_size(out.text.size());
      }
      return in.make_string(std::move(out));
    });
  }
  if (name == "format") {
    return method([self](Interpreter& in, CallArgs& a) { return in.make_string(python_str_format(in, self.as_tagged(), a)); });
  }
  if (name == "splitlines") {
    return method([text](Interpreter& in, CallArgs&) {
      std::vector<Value> lines;
      std::string current;
      for (char32_t c : decode_utf8(text)) {
        if (c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 || c == 0x2029) {
          lines.push_back(in.make_string(current));
          current.clear();
        } else {
          append_utf8(current, c);
        }
      }
      if (!current.empty()) lines.push_back(in.make_string(current));
      return in.make_list(std::move(lines));
    });
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    const char align = name == "center" ? '^' : name == "ljust" ? '<' : '>';
    return method([text, align](Interpreter& in, CallArgs& a) {
      return in.make_string(pad(in, text, optional_int(in, a, 0, "width", 0), argument(a, 1, "fillchar"), align));
    });
  }
  if (name == "zfill") {
    return method([text, self](Interpreter& in, CallArgs& a) {
      const std::int64_t width = std::min<std::int64_t>(optional_int(in, a, 0, "width", 0), 1 << 24);
      const auto length = static_cast<std::int64_t>(count_code_points(text));
      if (width <= length) return self;
      const bool sign = !text.empty() && (text[0] == '-' || text[0] == '+');
      std::string out = sign ? text.substr(0, 1) : "";
      out += std::string(static_cast<std::size_t>(width - length), '0') + (sign ? text.substr(1) : text);
      return in.make_string(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal" || name == "isalpha" || name == "isalnum" ||
      name == "isspace" || name == "islower" || name == "isupper") {
    return method([text, name](Interpreter&, CallArgs&) {
      const std::u32string cps = decode_utf8(text);
      if (cps.empty()) return Value::boolean(false);
      if (name == "islower" || name == "isupper") {
        bool cased = false;
        for (char32_t c : cps) {
          if (!is_cased_letter(c)) continue;
          cased = true;
          if (name == "islower" ? to_lower(c) != c : to_upper(c) != c) return Value::boolean(false);
        }
        return Value::boolean(cased);
      }
      for (char32_t c : cps) {
        const bool ok = name == "isspace" ? is_python_space(c)
                        : name == "isalpha" ? is_alpha(c)
                        : name == "isalnum" ? (is_alpha(c) || is_digit(c))
                                            : is_digit(c);
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    });
  }
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& receiver, const std::string& name) {
  auto method = [&](Method m) { return std::optional<Value>(bind(name, std::move(m), receiver.carries_user())); };
  if (name == "items") {
    return method([receiver](Interpreter& in, CallArgs& a) { return in.apply_filter("items", receiver, a); });
  }
  if (name == "keys" || name == "values") {
    const bool keys = name == "keys";
    return method([receiver, keys](Interpreter& in, CallArgs&) {
      std::vector<Value> out;
      for (const auto& [key, value] : receiver.as_dict().entries) out.push_back(keys ? key : value);
      return in.make_list(std::move(out));
    });
  }
  if (name == "get") {
    return method([receiver](Interpreter& in, CallArgs& a) {
      const Value* key = argument(a, 0, "key");
      if (key == nullptr) in.fail("get expected at least 1 argument, got 0");
      if (const Value* found = receiver.as_dict().find(*key)) return *found;
      const Value* fallback = argument(a, 1, "default");
      return fallback != nullptr ? *fallback : Value::none();
    });
  }
  if (name == "copy") return method([receiver](Interpreter&, CallArgs&) { return receiver; });
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear") {
    return Value::undefined(fmt::format("access to attribute '{}' of 'dict' object is unsafe.", name), true);
  }
  return std::nullopt;
}

std::optional<Value> list_method(const Value& receiver, const std::string& name) {
  auto method = [&](Method m) { return std::optional<Value>(bind(name, std::move(m), receiver.carries_user())); };
  if (name == "index" || name == "count") {
    const bool count = name == "count";
    return method([receiver, count](Interpreter& in, CallArgs& a) {
      const Value* needle = argument(a, 0, "value");
      if (needle == nullptr) in.fail("missing argument");
      std::int64_t n = 0;
      const auto& items = receiver.as_list().items;
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (!equals(items[i], *needle)) continue;
        if (!count) return Value::integer(static_cast<std::int64_t>(i));
        ++n;
      }
      if (!count) in.fail(fmt::format("{} is not in list", needle->repr()));
      return Value::integer(n);
    });
  }
  if (!receiver.as_list().is_tuple && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                                       name == "remove" || name == "clear" || name == "sort" || name == "reverse")) {
    return Value::undefined(fmt::format("access to attribute '{}' of 'list' object is unsafe.", name), true);
  }
  if (!receiver.as_list().is_tuple && name == "copy") return method([receiver](Interpreter&, CallArgs&) { return receiver; });
  return std::nullopt;
}

// Markup's methods (markupsafe): the str method, with string arguments HTML-escaped first
// (split's separator excepted), and what it gives made Markup again; join escapes the items,
// format() the fields. The other methods (startswith, find, ...) behave as str's.
std::optional<Value> markup_method(const Value& receiver, const std::string& name) {
  std::optional<Value> plain = string_method(receiver, name);
  if (!plain || !plain->is_function()) return plain;
  static const std::set<std::string, std::less<>> escape_arguments = {
      "capitalize", "title",  "lower", "upper",   "replace", "ljust",    "rjust",        "lstrip",      "rstrip",
      "center",     "strip",  "zfill", "casefold", "format", "swapcase", "removeprefix", "removesuffix", "expandtabs"};
  const bool splits = name == "split" || name == "rsplit" || name == "splitlines";
  const bool joins = name == "join";
  if (!escape_arguments.contains(name) && !splits && !joins) return plain;
  const Value plain_method = *plain;
  return bind(name, Method([plain_method, splits, joins](Interpreter& in, CallArgs& a) {
    CallArgs escaped = a;
    if (joins) {
      if (const Value* items = argument(a, 0, "iterable")) {
        std::vector<Value> marked;
        for (const Value& item : in.iterate(*items)) marked.push_back(item.is_string() ? in.escape_html(item) : item);
        escaped.positional.assign(1, in.make_list(std::move(marked)));
        escaped.keyword.clear();
      }
    } else if (!splits) {
      for (Value& value : escaped.positional) value = in.markup_operand(value);
      for (auto& [key, value] : escaped.keyword) value = in.markup_operand(value);
    }
    const Value result = in.call(plain_method, escaped);
    if (result.is_string()) return Value::markup(result.as_tagged());
    if (!result.is_list()) return result;
    std::vector<Value> parts;
    for (const Value& part : result.as_list().items) parts.push_back(part.is_string() ? Value::markup(part.as_tagged()) : part);
    return in.make_list(std::move(parts));
  }), receiver.carries_user());
}

}  // namespace

std::optional<Value> find_method(const Value& receiver, const std::string& name) {
  if (receiver.is_markup()) return markup_method(receiver, name);
  if (receiver.is_string()) return string_method(receiver, name);
  if (receiver.is_dict()) return dict_method(receiver, name);
  if (receiver.is_list()) return list_method(receiver, name);
  return std::nullopt;
}

}  // namespace okapi::jinja
