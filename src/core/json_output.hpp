// JSON output that never aborts on text that is not UTF-8 (generated text cut mid-character, a
// prompt or file name with stray bytes, token and metadata strings read from a model file).
// Every string value is checked; one that is not valid UTF-8 is written with each bad byte
// replaced by U+FFFD, and the record lists what was repaired in one top-level field, present only
// when something was:
//   "invalid_utf8": [{"pointer": "/text", "hex": "4f6e63e2"}, ...]
// `pointer` is the RFC 6901 JSON Pointer of the repaired string in the record, `hex` its exact
// original bytes (two lowercase hex digits a byte). Every okapi --json writer goes through here.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace okapi {

inline constexpr const char* kInvalidUtf8Field = "invalid_utf8";

// Repairs `record` (adding the field above when needed; `record` should be an object) and returns
// its text, as record.dump(indent).
std::string dump_json(nlohmann::ordered_json record, int indent = -1);

}  // namespace okapi
