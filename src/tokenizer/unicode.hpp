// UTF-8 and Unicode helpers shared by the tokenizers, with llama.cpp's (unicode.cpp) conventions:
// its lenient UTF-8 decoder, its White_Space set, and GPT-2's byte <-> unicode mapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace okapi::tokenizer {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Decodes UTF-8 as llama.cpp's unicode_cpts_from_utf8: each byte that does not start a complete
// sequence becomes U+FFFD and decoding resumes at the next byte. Overlong forms and surrogates are
// accepted as written (llama.cpp does not check them); sequences above U+10FFFF, which llama.cpp
// would fail on later when re-encoding, also become U+FFFD here.
std::vector<uint32_t> utf8_to_codepoints(std::string_view text);
// Same, also recording where each codepoint starts in `text` (offsets.size() == result.size() + 1).
std::vector<uint32_t> utf8_to_codepoints(std::string_view text, std::vector<size_t>& offsets);

void append_utf8(std::string& out, uint32_t cpt);  // surrogates are written as 3-byte forms
std::string codepoints_to_utf8(const uint32_t* cpts, size_t count);

// Length of the UTF-8 sequence a lead byte announces (1 for continuation/invalid bytes), as
// llama.cpp's unicode_len_utf8.
size_t utf8_sequence_length(char lead);

// llama.cpp's whitespace set (Unicode White_Space: 9-13, 32, 0x85, 0xA0, 0x1680, 0x2000-0x200A,
// 0x2028, 0x2029, 0x202F, 0x205F, 0x3000).
bool is_unicode_whitespace(uint32_t cpt);

// GPT-2 byte-level BPE: every byte maps to one printable codepoint (bytes_to_unicode in GPT-2's
// encoder.py); token texts in a byte-level vocabulary are UTF-8 strings of those codepoints.
std::string bpe_byte_encode(std::string_view bytes);
// The inverse, for detokenization: maps each codepoint of a token text back to its byte.
// As llama.cpp's llama_decode_text (used by token_to_piece for normal and user-defined BPE
// tokens): a codepoint outside the mapping becomes "[UNK_BYTE_0x<its utf-8 in hex><token text>]".
std::string bpe_byte_decode(std::string_view token_text);

}  // namespace okapi::tokenizer
