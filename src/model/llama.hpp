// The llama family of decoders: RMSNorm, RoPE, GQA attention, SwiGLU FFN, tied or untied
// output. qwen2 (Q/K/V biases, NEOX rope) and qwen3 (per-head q/k RMSNorm, NEOX rope) are the same
// graph with options, so they reuse this class (see qwen2.cpp, qwen3.cpp).
#pragma once
#include <vector>

#include "model/blocks.hpp"

namespace okapi::model {

struct LlamaOptions {
  bool neox_rope = false;  // NEOX pairs (i, i + n_rot/2) instead of adjacent pairs
  bool qkv_bias = false;   // required attn_{q,k,v}.bias (qwen2); otherwise optional
  bool qk_norm = false;    // required per-head attn_q_norm / attn_k_norm before RoPE (qwen3)
  bool classifier = false; // an optional classifier head for rank pooling (qwen3 rerankers)
};

class LlamaModel : public DecoderModel {
 public:
  LlamaModel(gguf::File file, HParams hparams, LlamaOptions options);
  bool can_skip_layers() const override { return true; }  // forward_pre_norm honours it
  bool supports_stages() const override { return true; }    // so does its stage range

 protected:
  void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     const LogitSelection& rows, float* logits) const override;

  LlamaOptions options_;
  Weight rope_freqs_;
  std::vector<DecoderLayer> layers_;
  kernels::RopeConfig rope_;
};

}  // namespace okapi::model
