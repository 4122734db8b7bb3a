// Checks on a file the user named as an input, with messages that say what to do next:
// "model 'x' does not exist", "'x' is a directory, not a model file", "cannot read 'x': ...".
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace okapi {

// Throws okapi::Error unless `path` is a readable regular file (symlinks followed). `what` names
// its role in the message: "model", "text file", "tokenizer".
void require_input_file(const std::filesystem::path& path, std::string_view what);

// The whole file as bytes, after require_input_file; refuses files over `max_bytes`.
std::string read_input_file(const std::filesystem::path& path, std::string_view what,
                            uint64_t max_bytes = uint64_t{1} << 32);

// The text of a -f file as llama.cpp's argument parser reads it: the bytes, minus one trailing
// newline (this changes the token count, so perplexity numbers depend on it).
std::string read_text_file(const std::filesystem::path& path);

}  // namespace okapi
