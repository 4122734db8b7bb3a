// inspect for llama2.c checkpoints and tokenizer.bin files (no GGUF magic).
#pragma once
#include <string>

namespace okapi::cli {
void inspect_llama2c(const std::string& path, bool json);
}
