// Metadata values: type names, checked conversions and display.
#include <fmt/format.h>

#include <limits>
#include <type_traits>

#include "core/error.hpp"
#include "format/gguf.hpp"

namespace okapi::gguf {
namespace {

template <typename T>
constexpr bool kIsInteger = std::is_integral_v<T> && !std::is_same_v<T, bool>;

std::string quote_escaped(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "invalid";
}

// The variant's alternatives are declared in ValueType order, so the index is the type id.
ValueType Value::type() const { return static_cast<ValueType>(data.index()); }

int64_t Value::as_int() const {
  return std::visit(
      [this](const auto& v) -> int64_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (kIsInteger<T>) {
          if constexpr (std::is_same_v<T, uint64_t>) {
            if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
              throw_error("metadata value {} does not fit in int64", v);
            }
          }
          return static_cast<int64_t>(v);
        } else {
          throw_error("expected an integer metadata value, got {}", value_type_name(type()));
        }
      },
      data);
}

uint64_t Value::as_uint() const {
  return std::visit(
      [this](const auto& v) -> uint64_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (kIsInteger<T>) {
          if constexpr (std::is_signed_v<T>) {
            if (v < 0) throw_error("expected a non-negative integer metadata value, got {}", v);
          }
          return static_cast<uint64_t>(v);
        } else {
          throw_error("expected an integer metadata value, got {}", value_type_name(type()));
        }
      },
      data);
}

double Value::as_double() const {
  return std::visit(
      [this](const auto& v) -> double {
        using T = std::decay_t<decltype(v)>;
        if constexpr (kIsInteger<T> || std::is_floating_point_v<T>) {
          return static_cast<double>(v);
        } else {
          throw_error("expected a numeric metadata value, got {}", value_type_name(type()));
        }
      },
      data);
}

bool Value::as_bool() const {
  if (const bool* b = std::get_if<bool>(&data)) return *b;
  throw_error("expected a bool metadata value, got {}", value_type_name(type()));
}

const std::string& Value::as_string() const {
  if (const std::string* s = std::get_if<std::string>(&data)) return *s;
  throw_error("expected a string metadata value, got {}", value_type_name(type()));
}

const Array& Value::as_array() const {
  if (const Array* a = std::get_if<Array>(&data)) return *a;
  throw_error("expected an array metadata value, got {}", value_type_name(type()));
}

std::vector<std::string> Value::as_string_array() const {
  const Array& array = as_array();
  std::vector<std::string> out;
  out.reserve(array.items.size());
  for (const Value& item : array.items) out.push_back(item.as_string());
  return out;
}

std::vector<float> Value::as_float_array() const {
  const Array& array = as_array();
  std::vector<float> out;
  out.reserve(array.items.size());
  for (const Value& item : array.items) out.push_back(static_cast<float>(item.as_double()));
  return out;
}

std::vector<int64_t> Value::as_int_array() const {
  const Array& array = as_array();
  std::vector<int64_t> out;
  out.reserve(array.items.size());
  for (const Value& item : array.items) out.push_back(item.as_int());
  return out;
}

std::string Value::to_display(size_t max_items) const {
  return std::visit(
      [max_items](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return quote_escaped(v);
        } else if constexpr (std::is_same_v<T, Array>) {
          std::string out = "[";
          const size_t shown = std::min(max_items, v.items.size());
          for (size_t i = 0; i < shown; ++i) {
            if (i > 0) out += ", ";
            out += v.items[i].to_display(max_items);
          }
          if (shown < v.items.size()) {
            out += fmt::format("{}... ({} {} items)", shown > 0 ? ", " : "", v.items.size(),
                               value_type_name(v.element_type));
          }
          return out + "]";
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
          return fmt::format("{}", static_cast<int>(v));  // not as a character
        } else {
          return fmt::format("{}", v);  // shortest round-trip form for floats
        }
      },
      data);
}

}  // namespace okapi::gguf
