// llama (stories*, TinyLlama, SmolLM, Llama 2/3): x = embd[tok]; per layer
//   x += Wo · attn(rope(Wq·h), rope(Wk·h), Wv·h)   with h = rmsnorm(x, attn_norm)
//   x += Wdown · (silu(Wgate·h) * Wup·h)            with h = rmsnorm(x, ffn_norm)
// logits = output · rmsnorm(x, output_norm) (output = token_embd when tied).
#include "model/llama.hpp"

#include <string>

#include "model/architectures.hpp"

namespace okapi::model {

LlamaModel::LlamaModel(gguf::File file, HParams hparams, LlamaOptions options)
    : DecoderModel(std::move(file), std::move(hparams)), options_(options) {
  const HParams& hp = hparams_;
  load_embeddings();
  rope_freqs_ = optional_tensor("rope_freqs.weight", {hp.n_rot / 2});
  // n_ff from the first layer's gate when the metadata lacks it.
  const int64_t n_ff = hp.n_ff != 0 ? hp.n_ff : ffn_width_from_gate(file_, 0);
  AttentionParts attn;
  attn.qkv.bias = options_.qkv_bias ? Part::Required : Part::Optional;
  attn.qk_norm = options_.qk_norm;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = layer_prefix(il);
    layers_.push_back({attention_weights(p, attn), ffn_weights(p, n_ff, {}, /*sub_norm=*/false)});
  }
  if (options_.classifier) load_classifier();
  check_tensors();
  rope_ = rope_config(hp, options_.neox_rope, rope_freqs_ ? rope_freqs_.f32() : nullptr);
}

void LlamaModel::forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                               std::span<const int32_t> positions, const LogitSelection& rows, float* logits) const {
  forward_pre_norm(ops, kv, tokens, positions, rows, logits, layers_, rope_, Activation::SiLU);
}

std::unique_ptr<Model> make_llama(gguf::File file, HParams hparams) {
  if (hparams.n_expert > 0) return make_mixtral(std::move(file), std::move(hparams));  // Mixtral
  return std::make_unique<LlamaModel>(std::move(file), std::move(hparams), LlamaOptions{});
}

}  // namespace okapi::model
