// PLACEHOLDER until format/llama2c.hpp lands.
#include "inspect_llama2c.hpp"

#include "core/error.hpp"

namespace okapi::cli {
void inspect_llama2c(const std::string& path, bool /*json*/) {
  throw_error("'{}' is not a GGUF file (no 'GGUF' magic)", path);
}
}  // namespace okapi::cli
