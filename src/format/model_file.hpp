// Opens the GGUF model a user named, recognising the files people give by mistake: a directory,
// a llama2.c checkpoint or tokenizer.bin (convert it first), something else entirely.
#pragma once
#include <filesystem>

#include "format/gguf.hpp"

namespace okapi::gguf {

// Throws okapi::Error with what to do next when `path` is not a GGUF file.
File open_model(const std::filesystem::path& path);

}  // namespace okapi::gguf
