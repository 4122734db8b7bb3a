// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention (per-head q/k RMSNorm, NEOX rope)
// and a mixture of experts with softmax gating and normalized top-k weights (norm_topk_prob; llama.cpp
// hard-codes it). Expert width: expert_feed_forward_length, else feed_forward_length / expert_used_count.
#include "model/architectures.hpp"
#include "model/llama_moe.hpp"

namespace okapi::model {

std::unique_ptr<Model> make_qwen3moe(gguf::File file, HParams hparams) {
  const int64_t n_ff_exp =
      hparams.n_ff_exp > 0 ? hparams.n_ff_exp : (hparams.n_expert_used > 0 ? hparams.n_ff / hparams.n_expert_used : 0);
  LlamaMoeOptions options{.attention = {.neox_rope = true, .qk_norm = true}, .normalize_weights = true,
                          .n_ff_exp = n_ff_exp};
  return std::make_unique<LlamaMoeModel>(std::move(file), std::move(hparams), options);
}

}  // namespace okapi::model
