// Python's two string-formatting languages as far as templates use them: printf-style
// ("%s" % x, the `format` filter) and str.format ("{}".format(x)) with the common format specs.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "jinja/jinja_builtins.hpp"
#include "jinja/jinja_text.hpp"

namespace okapi::jinja {

namespace {

struct Spec {
  char fill = ' ';
  char align = '\0';  // < > ^ =
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  std::int64_t width = 0;
  std::int64_t precision = -1;
  char type = '\0';
};

std::string apply_width(const std::string& body, const Spec& spec, char default_align) {
  const auto length = static_cast<std::int64_t>(count_code_points(body));
  if (spec.width <= length) return body;
  const auto margin = static_cast<std::size_t>(spec.width - length);
  const char align = spec.align != '\0' ? spec.align : default_align;
  if (align == '<') return body + std::string(margin, spec.fill);
  if (align == '^') return std::string(margin / 2, spec.fill) + body + std::string(margin - margin / 2, spec.fill);
  if (align == '=' && !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
    return body.substr(0, 1) + std::string(margin, spec.fill) + body.substr(1);
  }
  return std::string(margin, spec.fill) + body;
}

std::string format_number(Interpreter& in, const Value& value, Spec spec) {
  if (spec.zero && spec.align == '\0') {
    spec.fill = '0';
    spec.align = '=';
  }
  std::string body;
  const char type = spec.type;
  if (type == 'd' || type == 'i' || type == 'x' || type == 'X' || type == 'o' || type == 'b' || type == 'c' ||
      ((type == '\0' || type == 'n') && !value.is_float())) {
    if (value.is_float()) in.fail(fmt::format("Unknown format code '{}' for object of type 'float'", type));
    const std::int64_t v = value.as_int();
    if (type == 'c') return apply_width(encode_utf8(std::u32string(1, static_cast<char32_t>(v & 0x1FFFFF))), spec, '<');
    const std::uint64_t magnitude = v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
    if (type == 'x') body = fmt::format("{}{:x}", spec.alternate ? "0x" : "", magnitude);
    else if (type == 'X') body = fmt::format("{}{:X}", spec.alternate ? "0X" : "", magnitude);
    else if (type == 'o') body = fmt::format("{}{:o}", spec.alternate ? "0o" : "", magnitude);
    else if (type == 'b') body = fmt::format("{}{:b}", spec.alternate ? "0b" : "", magnitude);
    else body = std::to_string(magnitude);
    if (v < 0) body = "-" + body;
    else if (spec.sign == '+') body = "+" + body;
    else if (spec.sign == ' ') body = " " + body;
    return apply_width(body, spec, '>');
  }
  const double v = value.as_double();
  const std::int64_t precision = std::min<std::int64_t>(spec.precision < 0 ? 6 : spec.precision, 200);
  if (type == 'f' || type == 'F') body = fmt::format("{:.{}f}", v, precision);
  else if (type == 'e' || type == 'E') body = fmt::format("{:.{}e}", v, precision);
  else if (type == 'g' || type == 'G') body = fmt::format("{:.{}g}", v, precision == 0 ? 1 : precision);
  else if (type == '%') body = fmt::format("{:.{}f}%", v * 100, precision);
  else if (type == '\0' || type == 'n') body = spec.precision < 0 ? python_float_repr(v) : fmt::format("{:.{}g}", v, precision);
  else in.fail(fmt::format("Unknown format code '{}' for object of type 'float'", type));
  if (type == 'E' || type == 'F' || type == 'G') body = upper(body);
  if (!body.empty() && body[0] != '-') {
    if (spec.sign == '+') body = "+" + body;
    else if (spec.sign == ' ') body = " " + body;
  }
  return apply_width(body, spec, '>');
}

std::string format_value(Interpreter& in, const Value& value, const Spec& spec, bool printf_style) {
  if (value.is_number() && spec.type != 's' && spec.type != 'r' && !(printf_style && spec.type == '\0')) {
    if (value.is_bool() && spec.type == '\0') return apply_width(value.str(), spec, '<');
    return format_number(in, value, spec);
  }
  if (spec.type != '\0' && spec.type != 's' && spec.type != 'r') {
    in.fail(fmt::format("Unknown format code '{}' for object of type '{}'", spec.type, value.type_name()));
  }
  std::string body = spec.type == 'r' ? value.repr() : value.str();
  if (spec.precision >= 0) {
    const std::u32string cps = decode_utf8(body);
    body = encode_utf8(std::u32string_view(cps).substr(0, static_cast<std::size_t>(spec.precision)));
  }
  return apply_width(body, spec, '<');
}

std::int64_t read_number(const std::string& text, std::size_t& pos) {
  std::int64_t n = 0;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    n = std::min<std::int64_t>(n * 10 + (text[pos] - '0'), 1 << 24);
    ++pos;
  }
  return n;
}

// The mini-language of str.format: [[fill]align][sign][#][0][width][,][.precision][type]
Spec parse_format_spec(Interpreter& in, const std::string& text) {
  Spec spec;
  std::size_t pos = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (text.size() >= 2 && is_align(text[1])) {
    spec.fill = text[0];
    spec.align = text[1];
    pos = 2;
  } else if (!text.empty() && is_align(text[0])) {
    spec.align = text[0];
    pos = 1;
  }
  if (pos < text.size() && (text[pos] == '+' || text[pos] == '-' || text[pos] == ' ')) spec.sign = text[pos++];
  if (pos < text.size() && text[pos] == '#') {
    spec.alternate = true;
    ++pos;
  }
  if (pos < text.size() && text[pos] == '0') {
    spec.zero = true;
    ++pos;
  }
  spec.width = read_number(text, pos);
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    spec.precision = read_number(text, pos);
  }
  if (pos < text.size()) spec.type = text[pos++];
  if (pos != text.size()) in.fail("Invalid format specifier");
  return spec;
}

// Whether format[begin, end) holds caller text.
bool has_user_in(const TaggedText& format, std::size_t begin, std::size_t end) {
  for (const auto& [first, second] : format.user) {
    if (first < end && second > begin) return true;
  }
  return false;
}

// One replacement field's text: the value's own origins when it is a string printed as it is,
// else caller text if the value or the field's spec holds any.
void append_field(TaggedText& out, const Value& value, const std::string& piece, bool spec_user) {
  if (value.is_string() && !spec_user && piece == value.as_string()) {
    out.append(value.as_tagged());
    return;
  }
  out.append(piece, spec_user || value.carries_user());
}

}  // namespace

TaggedText percent_format(Interpreter& in, const TaggedText& tagged_format, const std::vector<Value>& values, const Value* mapping) {
  const std::string& format = tagged_format.text;
  TaggedText out;
  std::size_t next = 0;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.append(tagged_format, i, i + 1);
      continue;
    }
    const std::size_t field_start = i;
    if (++i >= format.size()) in.fail("incomplete format");
    const Value* value = nullptr;
    if (format[i] == '(') {
      const std::size_t close = format.find(')', i);
      if (close == std::string::npos) in.fail("incomplete format key");
      if (mapping == nullptr || !mapping->is_dict()) in.fail("format requires a mapping");
      value = mapping->as_dict().find(std::string_view(format).substr(i + 1, close - i - 1));
      if (value == nullptr) in.fail(fmt::format("KeyError: {}", python_repr(format.substr(i + 1, close - i - 1))));
      i = close + 1;
    }
    Spec spec;
    spec.align = '>';
    for (; i < format.size(); ++i) {
      const char c = format[i];
      if (c == '-') spec.align = '<';
      else if (c == '+') spec.sign = '+';
      else if (c == ' ') { if (spec.sign != '+') spec.sign = ' '; }
      else if (c == '#') spec.alternate = true;
      else if (c == '0') spec.zero = true;
      else break;
    }
    spec.width = read_number(format, i);
    if (i < format.size() && format[i] == '.') {
      ++i;
      spec.precision = read_number(format, i);
    }
    if (i >= format.size()) in.fail("incomplete format");
    const char type = format[i];
    if (type == '%') {
      out.append(tagged_format, i, i + 1);
      continue;
    }
    const bool spec_user = has_user_in(tagged_format, field_start, i + 1);
    if (value == nullptr) {
      if (next >= values.size()) in.fail("not enough arguments for format string");
      value = &values[next++];
    }
    if (spec.zero && spec.align == '>') {
      spec.fill = '0';
      spec.align = '=';
    }
    if (std::string_view("sr").find(type) != std::string_view::npos) {
      spec.type = type;
      append_field(out, *value, format_value(in, *value, spec, true), spec_user);
    } else if (std::string_view("diouxXeEfFgGc").find(type) != std::string_view::npos) {
      if (!value->is_number()) in.fail(fmt::format("%{} format: a real number is required, not {}", type, value->type_name()));
      spec.type = type == 'i' || type == 'u' ? 'd' : type;
      Value number = *value;
      if ((spec.type == 'd' || spec.type == 'x' || spec.type == 'X' || spec.type == 'o') && number.is_float()) {
        number = Value::integer(static_cast<std::int64_t>(std::trunc(std::clamp(number.as_double(), -9.2e18, 9.2e18))));
      }
      if (spec.type != 'd' && spec.type != 'x' && spec.type != 'X' && spec.type != 'o' && spec.type != 'c') {
        number = Value::number(number.as_double());
      }
      spec.zero = false;
      append_field(out, *value, format_number(in, number, spec), spec_user);
    } else {
      in.fail(fmt::format("unsupported format character '{}'", type));
    }
    in.check_size(out.text.size());
  }
  if (mapping == nullptr && next < values.size()) in.fail("not all arguments converted during string formatting");
  return out;
}

Value markup_percent_format(Interpreter& in, const Value& format, const std::vector<Value>& values, const Value* mapping) {
  std::vector<Value> escaped;
  escaped.reserve(values.size());
  for (const Value& value : values) escaped.push_back(in.markup_operand(value));
  std::optional<Value> escaped_mapping;
  if (mapping != nullptr && mapping->is_dict()) {
    DictData data;
    for (const auto& [key, value] : mapping->as_dict().entries) data.entries.emplace_back(key, in.markup_operand(value));
    escaped_mapping = Value::dict(std::move(data));
  }
  TaggedText text = percent_format(in, format.as_tagged(), escaped, escaped_mapping ? &*escaped_mapping : mapping);
  return Value::markup(in.make_string(std::move(text)).as_tagged());
}

TaggedText python_str_format(Interpreter& in, const TaggedText& tagged_format, const CallArgs& args) {
  const std::string& format = tagged_format.text;
  TaggedText out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out.append(tagged_format, i, i + 1);
        ++i;
        continue;
      }
      in.fail("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.append(tagged_format, i, i + 1);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.append(tagged_format, i, i + 1);
      ++i;
      continue;
    }
    const std::size_t close = format.find('}', i);
    if (close == std::string::npos) in.fail("Single '{' encountered in format string");
    const bool spec_user = has_user_in(tagged_format, i, close + 1);
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string spec_text;
    char conversion = '\0';
    if (const std::size_t colon = field.find(':'); colon != std::string::npos) {
      spec_text = field.substr(colon + 1);
      field.resize(colon);
    }
    if (const std::size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) in.fail("expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    // field: name or index, then .attr / [key] parts
    const std::size_t part_start = std::min(field.find('.'), field.find('['));
    const std::string head = field.substr(0, part_start);
    Value value;
    if (head.empty()) {
      if (auto_index >= args.positional.size()) in.fail(fmt::format("Replacement index {} out of range for positional args tuple", auto_index));
      value = args.positional[auto_index++];
    } else if (std::all_of(head.begin(), head.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const std::size_t index = head.size() < 9 ? std::stoul(head) : args.positional.size();
      if (index >= args.positional.size()) in.fail(fmt::format("Replacement index {} out of range for positional args tuple", head));
      value = args.positional[index];
    } else {
      const Value* found = args.find_keyword(head);
      if (found == nullptr) in.fail(fmt::format("KeyError: {}", python_repr(head)));
      value = *found;
    }
    std::size_t pos = part_start;
    while (pos < field.size()) {
      if (field[pos] == '.') {
        const std::size_t end = std::min(field.find('.', pos + 1), field.find('[', pos + 1));
        value = in.get_attribute(value, field.substr(pos + 1, end - pos - 1));
        pos = end;
      } else {
        const std::size_t end = field.find(']', pos);
        if (end == std::string::npos) in.fail("Missing ']' in format string");
        const std::string key = field.substr(pos + 1, end - pos - 1);
        const bool numeric = !key.empty() && key.size() < 18 && std::all_of(key.begin(), key.end(), [](char d) { return d >= '0' && d <= '9'; });
        value = in.get_item(value, numeric ? Value::integer(std::stoll(key)) : Value::string(key));
        pos = end + 1;
      }
    }
    const bool value_user = value.carries_user();
    if (conversion == 'r') value = Value::string(TaggedText(value.repr(), value_user));
    else if (conversion == 's') value = Value::string(in.text_of(value));
    else if (conversion != '\0') in.fail(fmt::format("Unknown conversion specifier {}", conversion));
    append_field(out, value, format_value(in, value, parse_format_spec(in, spec_text), false), spec_user);
    in.check_size(out.text.size());
  }
  return out;
}

}  // namespace okapi::jinja
