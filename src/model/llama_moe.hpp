// The llama family's attention with a mixture-of-experts FFN in every layer: Mixtral (llama with
// llama.expert_count > 0), qwen2moe (Q/K/V biases, NEOX rope, a shared expert behind a sigmoid
// gate) and qwen3moe (per-head q/k RMSNorm, NEOX rope, normalized top-k weights). One class with
// options, as LlamaModel is for llama/qwen2/qwen3; mixtral.cpp, qwen2moe.cpp and qwen3moe.cpp
// choose them.
#pragma once
#include <vector>

#include "model/llama.hpp"
#include "model/moe.hpp"

namespace okapi::model {

struct LlamaMoeOptions {
  LlamaOptions attention;          // rope pairing, Q/K/V biases, q/k norms
  bool normalize_weights = false;  // the top-k weights sum to 1 (Mixtral, qwen3moe)
  int64_t n_ff_exp = 0;            // one expert's width
  int64_t n_ff_shexp = 0;          // > 0: a shared expert of this width with a sigmoid gate (qwen2moe)
};

class LlamaMoeModel : public DecoderModel {
 public:
  LlamaMoeModel(gguf::File file, HParams hparams, LlamaMoeOptions options);
  bool can_skip_layers() const override { return true; }

 protected:
  void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     const LogitSelection& rows, float* logits) const override;

  struct Layer {
    AttentionWeights attn;
    MoeWeights moe;
  };
  LlamaMoeOptions options_;
  Weight rope_freqs_;
  std::vector<Layer> layers_;
  kernels::RopeConfig rope_;
  MoeConfig moe_;
};

}  // namespace okapi::model
