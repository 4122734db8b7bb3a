// qwen2moe (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): qwen2's attention (Q/K/V biases, NEOX rope), a
// mixture of experts with softmax gating and unnormalized top-k weights, plus a shared expert
// (ffn_*_shexp, width expert_shared_feed_forward_length, else feed_forward_length) scaled by
// sigmoid(ffn_gate_inp_shexp · h).
#include "core/error.hpp"
#include "model/architectures.hpp"
#include "model/llama_moe.hpp"

namespace okapi::model {

std::unique_ptr<Model> make_qwen2moe(gguf::File file, HParams hparams) {
  const int64_t n_ff_exp =
      hparams.n_ff_exp > 0 ? hparams.n_ff_exp : (hparams.n_expert_used > 0 ? hparams.n_ff / hparams.n_expert_used : 0);
  const int64_t n_ff_shexp = hparams.n_ff_shexp > 0 ? hparams.n_ff_shexp : hparams.n_ff;
  LlamaMoeOptions options{.attention = {.neox_rope = true, .qkv_bias = true}, .normalize_weights = false,
                          .n_ff_exp = n_ff_exp, .n_ff_shexp = n_ff_shexp};
  if (n_ff_shexp <= 0)
    throw_error("{}: the qwen2moe model's shared expert width is unknown ('qwen2moe.expert_shared_feed_forward_length' "
                "or 'qwen2moe.feed_forward_length')", file.name());
  return std::make_unique<LlamaMoeModel>(std::move(file), std::move(hparams), options);
}

}  // namespace okapi::model
