// Reading back okapi's JSON output (core/json_output.hpp): the repaired strings listed in its
// "invalid_utf8" field, and the exact original bytes of any string in the record.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace okapi::test {

// Pointer -> original bytes of every repaired string. Fails the current test (gtest) when an
// entry's pointer does not lead to a string, its hex does not decode to invalid UTF-8, or that
// string is not those bytes repaired.
std::map<std::string, std::string> checked_repairs(const nlohmann::ordered_json& record);

// The bytes the string at `pointer` stood for before repair (`repairs` from checked_repairs).
std::string original_string(const nlohmann::ordered_json& record, const std::map<std::string, std::string>& repairs,
                            const std::string& pointer);

}  // namespace okapi::test
