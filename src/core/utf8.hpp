// Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), and the
// repair every JSON writer applies to text that came from a file, the user or a sampler.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace okapi {

// Bytes of the well-formed sequence that starts at text[pos] (1 to 4), or 0 when none does.
size_t valid_utf8_length(std::string_view text, size_t pos);

bool is_valid_utf8(std::string_view text);

// `text` with each byte that is not part of a well-formed sequence replaced by U+FFFD; valid
// sequences are kept as they are. *repaired (when given) says whether anything was replaced.
std::string repair_utf8(std::string_view text, bool* repaired = nullptr);

// Lowercase hex, two digits a byte: how JSON output carries bytes that are not UTF-8 losslessly.
std::string hex_bytes(std::string_view bytes);

}  // namespace okapi
