#include "support/json_repairs.hpp"

#include <gtest/gtest.h>

#include "core/json_output.hpp"
#include "core/utf8.hpp"

namespace okapi::test {
namespace {

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

}  // namespace

std::map<std::string, std::string> checked_repairs(const nlohmann::ordered_json& record) {
  std::map<std::string, std::string> repairs;
  if (!record.contains(kInvalidUtf8Field)) return repairs;
  for (const auto& entry : record.at(kInvalidUtf8Field)) {
    const std::string pointer = entry.at("pointer").get<std::string>();
    const std::string hex = entry.at("hex").get<std::string>();
    const std::string bytes = from_hex(hex);
    EXPECT_EQ(hex_bytes(bytes), hex) << pointer;
    EXPECT_FALSE(is_valid_utf8(bytes)) << pointer << " was valid UTF-8: " << hex;
    const auto& value = record.at(nlohmann::ordered_json::json_pointer(pointer));
    EXPECT_TRUE(value.is_string()) << pointer;
    if (value.is_string()) {
      EXPECT_EQ(value.get<std::string>(), repair_utf8(bytes)) << pointer;
    }
    repairs[pointer] = bytes;
  }
  return repairs;
}

std::string original_string(const nlohmann::ordered_json& record, const std::map<std::string, std::string>& repairs,
                            const std::string& pointer) {
  const auto it = repairs.find(pointer);
  if (it != repairs.end()) return it->second;
  return record.at(nlohmann::ordered_json::json_pointer(pointer)).get<std::string>();
}

}  // namespace okapi::test
