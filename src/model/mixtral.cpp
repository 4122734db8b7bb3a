// Mixtral: a llama whose llama.expert_count > 0. Every layer's FFN is a mixture of experts
// (ffn_gate_inp, ffn_{gate,up,down}_exps of width feed_forward_length) with softmax gating and
// normalized top-k weights. make_llama hands such files here.
#include "model/architectures.hpp"
#include "model/llama_moe.hpp"

namespace okapi::model {

std::unique_ptr<Model> make_mixtral(gguf::File file, HParams hparams) {
  const int64_t n_ff_exp = hparams.n_ff > 0 ? hparams.n_ff : hparams.n_ff_exp;
  LlamaMoeOptions options{.attention = {}, .normalize_weights = true, .n_ff_exp = n_ff_exp};
  return std::make_unique<LlamaMoeModel>(std::move(file), std::move(hparams), options);
}

}  // namespace okapi::model
