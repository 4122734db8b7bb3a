#include "jinja/jinja_value.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "jinja/chat_template.hpp"
#include "jinja/jinja_text.hpp"

namespace okapi::jinja {

TaggedText::TaggedText(std::string s, bool is_user) : text(std::move(s)) {
  if (is_user) mark_user(0, text.size());
}

void TaggedText::mark_user(std::size_t begin, std::size_t end) {
  if (begin >= end) return;
  if (!user.empty() && user.back().second >= begin) {
    user.back().second = std::max(user.back().second, end);
    return;
  }
  user.emplace_back(begin, end);
}

void TaggedText::append(std::string_view s, bool is_user) {
  const std::size_t offset = text.size();
  text.append(s);
  if (is_user) mark_user(offset, text.size());
}

void TaggedText::append(const TaggedText& other) { append(other, 0, other.text.size()); }

void TaggedText::append(const TaggedText& other, std::size_t begin, std::size_t end) {
  if (&other == this) {  // the ranges below would be read while they grow
    const TaggedText copy = other;
    append(copy, begin, end);
    return;
  }
  end = std::min(end, other.text.size());
  if (begin >= end) return;
  const std::size_t offset = text.size();
  text.append(other.text, begin, end - begin);
  auto it = std::upper_bound(other.user.begin(), other.user.end(), begin,
                             [](std::size_t b, const Range& r) { return b < r.second; });
  for (; it != other.user.end() && it->first < end; ++it) {
    mark_user(offset + std::max(it->first, begin) - begin, offset + std::min(it->second, end) - begin);
  }
}

TaggedText TaggedText::substr(std::size_t begin, std::size_t end) const {
  TaggedText out;
  out.append(*this, begin, end);
  return out;
}

bool CallArgs::carries_user() const {
  if (user_keywords) return true;
  for (const Value& v : positional) {
    if (v.carries_user()) return true;
  }
  for (const auto& [key, v] : keyword) {
    if (v.carries_user()) return true;
  }
  return false;
}

bool Value::carries_user() const {
  switch (kind()) {
    case Kind::String: return as_tagged().has_user();
    case Kind::List: return as_list().has_user;
    case Kind::Dict: return as_dict().has_user;
    case Kind::Namespace: return true;
    default: return false;
  }
}

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : entries) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* Namespace::find(std::string_view name) const {
  for (const auto& [k, v] : attributes) {
    if (k == name) return &v;
  }
  return nullptr;
}

void Namespace::set(const std::string& name, Value value) {
  for (auto& [k, v] : attributes) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  attributes.emplace_back(name, std::move(value));
}

const Value* CallArgs::find_keyword(std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

namespace {
// One shared "plain" Undefined, so default-constructed values allocate nothing.
const std::shared_ptr<const UndefinedData>& plain_undefined() {
  static const auto instance = std::make_shared<const UndefinedData>();
  return instance;
}
}  // namespace

Value::Value() : data_(plain_undefined()) {}

Value Value::undefined(std::string message, bool security) {
  Value v;
  v.data_ = std::make_shared<const UndefinedData>(UndefinedData{std::move(message), security});
  return v;
}
Value Value::none() {
  Value v;
  v.data_ = std::monostate{};
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.data_ = b;
  return v;
}
Value Value::integer(std::int64_t i) {
  Value v;
  v.data_ = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.data_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.data_ = std::make_shared<const TaggedText>(std::move(s));
  return v;
}
Value Value::string(TaggedText s) {
  Value v;
  v.data_ = std::make_shared<const TaggedText>(std::move(s));
  return v;
}
Value Value::markup(TaggedText s) {
  Value v = string(std::move(s));
  v.markup_ = true;
  return v;
}
Value Value::user_string(std::string s) {
  Value v;
  v.data_ = std::make_shared<const TaggedText>(std::move(s), true);
  return v;
}
namespace {
void check_depth(int depth) {
  if (depth > kMaxValueDepth) throw TemplateError(fmt::format("lists / dicts nested deeper than {}", kMaxValueDepth));
}
}  // namespace

int Value::nesting_depth() const {
  if (is_list()) return as_list().depth;
  if (is_dict()) return as_dict().depth;
  return 0;
}

namespace {
ListData list_data(std::vector<Value> items, bool is_tuple, bool is_generator) {
  int depth = 1;
  bool has_user = false;
  for (const auto& item : items) {
    depth = std::max(depth, item.nesting_depth() + 1);
    has_user = has_user || item.carries_user();
  }
  check_depth(depth);
  return ListData{std::move(items), is_tuple, depth, has_user, is_generator};
}
}  // namespace

Value Value::list(std::vector<Value> items, bool is_tuple) {
  Value v;
  v.data_ = std::make_shared<const ListData>(list_data(std::move(items), is_tuple, false));
  return v;
}
Value Value::generator(std::vector<Value> items) {
  Value v;
  v.data_ = std::make_shared<const ListData>(list_data(std::move(items), false, true));
  return v;
}
Value Value::dict(DictData data) {
  data.depth = 1;
  data.has_user = false;
  for (const auto& [key, item] : data.entries) {
    data.depth = std::max({data.depth, key.nesting_depth() + 1, item.nesting_depth() + 1});
    data.has_user = data.has_user || key.carries_user() || item.carries_user();
  }
  check_depth(data.depth);
  Value v;
  v.data_ = std::make_shared<const DictData>(std::move(data));
  return v;
}
Value Value::namespace_object(std::shared_ptr<Namespace> ns) {
  Value v;
  v.data_ = std::move(ns);
  return v;
}
Value Value::function(std::shared_ptr<const Function> fn) {
  Value v;
  v.data_ = std::move(fn);
  return v;
}
Value Value::loop(std::shared_ptr<const LoopData> loop) {
  Value v;
  v.data_ = std::move(loop);
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& json, int depth) {
  check_depth(depth);
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
    case nlohmann::ordered_json::value_t::discarded:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return boolean(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return integer(json.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = json.get<std::uint64_t>();
      if (u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return integer(static_cast<std::int64_t>(u));
      }
      return number(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return number(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return user_string(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData data;
      data.entries.reserve(json.size());
      for (const auto& [key, item] : json.items()) data.entries.emplace_back(user_string(key), from_json(item, depth + 1));
      return dict(std::move(data));
    }
    case nlohmann::ordered_json::value_t::binary:
      break;
  }
  return none();
}

std::int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<std::int64_t>(data_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return as_bool();
    case Kind::Int:
      return as_int() != 0;
    case Kind::Float:
      return as_double() != 0.0;
    case Kind::String:
      return !as_string().empty();
    case Kind::List:
      return as_list().is_generator || !as_list().items.empty();
    case Kind::Dict:
      return !as_dict().entries.empty();
    case Kind::Namespace:
    case Kind::Function:
    case Kind::Loop:
      return true;
  }
  return false;
}

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then laid out as Python's repr does: positional for decimal
  // exponents -4 <= e < 16, else scientific with at least two exponent digits.
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string sci(buffer, result.ptr);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const auto e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<std::size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<std::size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(exponent) + 1) + "." +
             digits.substr(static_cast<std::size_t>(exponent) + 1);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  return out;
}

std::string Value::str() const {
  switch (kind()) {
    case Kind::Undefined:
      return "";
    case Kind::String:
      return as_string();
    default:
      return repr();
  }
}

std::string Value::repr(int depth) const {
  if (depth > kMaxValueDepth) throw TemplateError(fmt::format("value nested deeper than {} to print", kMaxValueDepth));
  switch (kind()) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return as_bool() ? "True" : "False";
    case Kind::Int:
      return std::to_string(as_int());
    case Kind::Float:
      return python_float_repr(as_double());
    case Kind::String:
      return is_markup() ? "Markup(" + python_repr(as_string()) + ")" : python_repr(as_string());
    case Kind::List: {
      const auto& list = as_list();
      if (list.is_generator) return "<generator object>";
      std::string out = list.is_tuple ? "(" : "[";
      for (std::size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0) out += ", ";
        out += list.items[i].repr(depth + 1);
      }
      if (list.is_tuple && list.items.size() == 1) out += ",";
      out += list.is_tuple ? ")" : "]";
      return out;
    }
    case Kind::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : as_dict().entries) {
        if (!first) out += ", ";
        first = false;
        out += k.repr(depth + 1) + ": " + v.repr(depth + 1);
      }
      return out + "}";
    }
    case Kind::Namespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : as_namespace().attributes) {
        if (!first) out += ", ";
        first = false;
        out += python_repr(k) + ": " + v.repr(depth + 1);
      }
      return out + "}>";
    }
    case Kind::Function:
      return as_function().is_macro ? fmt::format("<Macro '{}'>", as_function().name)
                                    : fmt::format("<function {}>", as_function().name);
    case Kind::Loop:
      return fmt::format("<LoopContext {}/{}>", as_loop().index0 + 1, as_loop().length);
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return is_markup() ? "Markup" : "str";
    case Kind::List:
      if (as_list().is_generator) return "generator";
      return as_list().is_tuple ? "tuple" : "list";
    case Kind::Dict:
      return "dict";
    case Kind::Namespace:
      return "Namespace";
    case Kind::Function:
      return as_function().is_macro ? "Macro" : "function";
    case Kind::Loop:
      return "LoopContext";
  }
  return "object";
}

std::string Value::object_type_repr() const {
  if (is_none()) return "None";
  return type_name() + " object";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::List: {
      const auto& x = a.as_list();
      const auto& y = b.as_list();
      if (x.is_generator || y.is_generator) return &x == &y;
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (std::size_t i = 0; i < x.items.size(); ++i) {
        if (!equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::Dict: {
      const auto& x = a.as_dict();
      const auto& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (other == nullptr || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace:
      return a.namespace_ptr() == b.namespace_ptr();
    case Value::Kind::Function:
      return &a.as_function() == &b.as_function();
    case Value::Kind::Loop:
      return &a.as_loop() == &b.as_loop();
    default:
      return false;
  }
}

std::optional<int> compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const auto x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple && !a.is_generator() &&
      !b.is_generator()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return std::nullopt;
}

namespace {

void append_json_string(std::string& out, std::string_view text) {
  out.push_back('"');
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

std::string json_float(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(value);
}

// A dict key as json.dumps writes it: str as is, numbers / bool / None converted.
bool json_key(const Value& key, std::string& text, std::string& error) {
  switch (key.kind()) {
    case Value::Kind::String:
      text = key.as_string();
      return true;
    case Value::Kind::Int:
      text = std::to_string(key.as_int());
      return true;
    case Value::Kind::Float:
      text = json_float(key.as_double());
      return true;
    case Value::Kind::Bool:
      text = key.as_bool() ? "true" : "false";
      return true;
    case Value::Kind::None:
      text = "null";
      return true;
    default:
      error = fmt::format("keys must be str, int, float, bool or None, not {}", key.type_name());
      return false;
  }
}

void newline_indent(std::string& out, const JsonOptions& options, int depth) {
  out.push_back('\n');
  for (int i = 0; i < depth; ++i) out += *options.indent;
}

}  // namespace

bool to_json(const Value& value, const JsonOptions& options, std::string& out, std::string& error, int depth) {
  if (depth > 512) {
    error = "maximum recursion depth exceeded while encoding a JSON object";
    return false;
  }
  switch (value.kind()) {
    case Value::Kind::None:
      out += "null";
      return true;
    case Value::Kind::Bool:
      out += value.as_bool() ? "true" : "false";
      return true;
    case Value::Kind::Int:
      out += std::to_string(value.as_int());
      return true;
    case Value::Kind::Float:
      out += json_float(value.as_double());
      return true;
    case Value::Kind::String:
      append_json_string(out, value.as_string());
      return true;
    case Value::Kind::List: {
      if (value.is_generator()) {
        error = "Object of type generator is not JSON serializable";
        return false;
      }
      const auto& items = value.as_list().items;
      if (items.empty()) {
        out += "[]";
        return true;
      }
      out.push_back('[');
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (out.size() > options.max_bytes) {
          error = "JSON output too large";
          return false;
        }
        if (i > 0) out += options.item_separator;
        if (options.indent) newline_indent(out, options, depth + 1);
        if (!to_json(items[i], options, out, error, depth + 1)) return false;
      }
      if (options.indent) newline_indent(out, options, depth);
      out.push_back(']');
      return true;
    }
    case Value::Kind::Dict: {
      const auto& entries = value.as_dict().entries;
      if (entries.empty()) {
        out += "{}";
        return true;
      }
      std::vector<std::pair<std::string, const Value*>> keyed;
      keyed.reserve(entries.size());
      for (const auto& [k, v] : entries) {
        std::string key_text;
        if (!json_key(k, key_text, error)) return false;
        keyed.emplace_back(std::move(key_text), &v);
      }
      if (options.sort_keys) {
        std::stable_sort(keyed.begin(), keyed.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      }
      out.push_back('{');
      for (std::size_t i = 0; i < keyed.size(); ++i) {
        if (out.size() > options.max_bytes) {
          error = "JSON output too large";
          return false;
        }
        if (i > 0) out += options.item_separator;
        if (options.indent) newline_indent(out, options, depth + 1);
        append_json_string(out, keyed[i].first);
        out += options.key_separator;
        if (!to_json(*keyed[i].second, options, out, error, depth + 1)) return false;
      }
      if (options.indent) newline_indent(out, options, depth);
      out.push_back('}');
      return true;
    }
    default:
      error = fmt::format("Object of type {} is not JSON serializable", value.type_name());
      return false;
  }
}

}  // namespace okapi::jinja
