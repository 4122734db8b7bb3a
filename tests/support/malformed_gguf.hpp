// A corpus of malformed GGUF files, one per class of bug in llama.cpp's GGUF security advisories
// (truncation, huge counts and lengths, integer overflow, bad types, bad alignment, out-of-file,
// overlapping and oversized tensors, duplicates). Each is built from a small valid file made with
// gguf::Writer and patched, so the expected error (field name + byte offset) is known exactly.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace okapi::test {

struct MalformedGguf {
  std::string name;            // also the file name when written out
  std::vector<uint8_t> bytes;
  std::string expected_error;  // a substring of the okapi::Error message: field, offset, value
};

// The valid file every case starts from: 7 metadata keys (string, u32, bool, string array,
// array of string arrays, general.alignment) and 3 tensors (f32 [4,4], q8_0 [32], f16 [8]).
std::vector<uint8_t> small_valid_gguf();

std::vector<MalformedGguf> malformed_gguf_corpus();

// Writes small_valid_gguf() as valid.gguf and every case as <name>.gguf (fuzzer seeds).
void write_gguf_corpus(const std::filesystem::path& dir);

}  // namespace okapi::test
