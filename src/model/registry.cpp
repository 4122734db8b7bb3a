// general.architecture -> model factory. Adding an architecture: one file + one line here.
#include <array>

#include "model/architectures.hpp"

namespace okapi::model {

std::span<const ArchitectureEntry> architectures() {
  static const std::array<ArchitectureEntry, 8> entries = {{
      {"llama", make_llama},
      {"qwen2", make_qwen2},
      {"qwen3", make_qwen3},
      {"gemma3", make_gemma3},
      {"bitnet", make_bitnet},
      {"bitnet-25", make_bitnet25},
      {"bitnet-b1.58", make_bitnet25},
      // gemma2
      {"gemma2", make_gemma2},
  }};
  return entries;
}

}  // namespace okapi::model
