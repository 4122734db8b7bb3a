#include "core/json_output.hpp"

#include "core/utf8.hpp"

namespace okapi {
namespace {

using nlohmann::ordered_json;

// RFC 6901: '~' is written "~0" and '/' "~1" inside a pointer's reference tokens.
std::string escape_pointer_token(const std::string& key) {
  std::string out;
  for (const char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Depth-first over `node`; `pointer` is its JSON Pointer (extended and restored on the way down).
void repair_strings(ordered_json& node, std::string& pointer, ordered_json& repairs) {
  const size_t length = pointer.size();
  if (node.is_string()) {
    auto& text = node.get_ref<std::string&>();
    if (is_valid_utf8(text)) return;
    repairs.push_back({{"pointer", pointer}, {"hex", hex_bytes(text)}});
    text = repair_utf8(text);
  } else if (node.is_array()) {
    for (size_t i = 0; i < node.size(); ++i) {
      pointer += '/';  // one piece at a time: GCC 12 warns (-Wrestrict) on "/" + to_string
      pointer += std::to_string(i);
      repair_strings(node[i], pointer, repairs);
      pointer.resize(length);
    }
  } else if (node.is_object()) {
    for (auto& item : node.items()) {
      pointer += '/';
      pointer += escape_pointer_token(item.key());
      repair_strings(item.value(), pointer, repairs);
      pointer.resize(length);
    }
  }
}

}  // namespace

std::string dump_json(ordered_json record, int indent) {
  ordered_json repairs = ordered_json::array();
  std::string pointer;
  repair_strings(record, pointer, repairs);
  if (!repairs.empty() && record.is_object()) record[kInvalidUtf8Field] = std::move(repairs);
  // Object keys are okapi's own names; `replace` only guards against one that is not.
  return record.dump(indent, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace okapi
