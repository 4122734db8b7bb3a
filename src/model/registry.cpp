// general.architecture -> model factory. Adding an architecture: one file + one line here.
#include "model/architectures.hpp"

namespace okapi::model {

std::span<const ArchitectureEntry> architectures() {
  static const ArchitectureEntry entries[] = {
      {"llama", make_llama},
      {"qwen2", make_qwen2},
      {"qwen3", make_qwen3},
      {"gemma3", make_gemma3},
      {"bitnet", make_bitnet},
      {"bitnet-25", make_bitnet25},
      {"bitnet-b1.58", make_bitnet25},
      // mixture of experts (llama with experts: make_llama -> make_mixtral)
      {"qwen3moe", make_qwen3moe},
      {"qwen2moe", make_qwen2moe},
      {"gpt-oss", make_gpt_oss},  // gpt-oss
      // phi3, granite, smollm3
      {"phi3", make_phi3},
      {"granite", make_granite},
      {"smollm3", make_smollm3},
      // gemma2
      {"gemma2", make_gemma2},
      // encoders (embedding models)
      {"bert", make_bert},
      {"nomic-bert", make_nomic_bert},
      {"gemma-embedding", make_gemma_embedding},
  };
  return entries;
}

}  // namespace okapi::model
