// x = embd[tok]; per layer x += attention(rms(x)) as llama / qwen2 / qwen3, x += moe(x) (moe.hpp);
// logits = output · rms(x, output_norm).
#include "model/llama_moe.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"

namespace okapi::model {

LlamaMoeModel::LlamaMoeModel(gguf::File file, HParams hparams, LlamaMoeOptions options)
    : DecoderModel(std::move(file), std::move(hparams)), options_(options) {
  const HParams& hp = hparams_;
  if (hp.n_expert <= 0 || hp.n_expert_used <= 0)
    throw_error("{}: the {} mixture-of-experts model needs '{}.expert_count' and '{}.expert_used_count'", file_.name(),
                hp.arch, hp.arch, hp.arch);
  if (options_.n_ff_exp <= 0)
    throw_error("{}: the {} model's expert width is unknown ('{}.expert_feed_forward_length' or "
                "'{}.feed_forward_length' / '{}.expert_used_count')",
                file_.name(), hp.arch, hp.arch, hp.arch, hp.arch);
  load_embeddings();
  rope_freqs_ = optional_tensor("rope_freqs.weight", {hp.n_rot / 2});
  AttentionParts attn;
  attn.qkv.bias = options_.attention.qkv_bias ? Part::Required : Part::Optional;
  attn.qk_norm = options_.attention.qk_norm;
  const MoeParts parts{.n_expert = hp.n_expert,
                       .n_ff_exp = options_.n_ff_exp,
                       .n_ff_shexp = options_.n_ff_shexp,
                       .shared_router = options_.n_ff_shexp > 0};
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = layer_prefix(il);
    layers_.push_back({attention_weights(p, attn), moe_weights(p, parts)});
  }
  check_tensors();
  rope_ = rope_config(hp, options_.attention.neox_rope, rope_freqs_ ? rope_freqs_.f32() : nullptr);
  // llama.cpp reads no expert_weights_scale or gating function for these architectures.
  moe_.routing = {.n_expert = hp.n_expert,
                  .n_used = hp.n_expert_used,
                  .gating = MoeGating::Softmax,
                  .normalize_weights = options_.normalize_weights};
}

void LlamaMoeModel::forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                                  std::span<const int32_t> positions, const LogitSelection& rows, float* logits) const {
  const HParams& hp = hparams_;
  const auto T = static_cast<int64_t>(tokens.size());
  Scratch s(ops.workspace(), hp, T, std::max<int64_t>(options_.n_ff_shexp, 1));
  AttentionConfig att = attention_config(hp, 1.0f / std::sqrt(static_cast<float>(hp.head_dim_k)));
  ops.get_rows(token_embd_, tokens, s.x.data());
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (skips_layer(il)) continue;
    const Layer& l = layers_[static_cast<size_t>(il)];
    att.layer = il;
    attention_block(ops, kv, hp, l.attn, rope_, att, positions, s);
    ops.add(s.x.data(), s.o.data(), T * hp.n_embd, s.x.data());
    moe_block(ops, hp, l.moe, moe_, s);
    ops.add(s.x.data(), s.o.data(), T * hp.n_embd, s.x.data());
  }
  output_rows(ops, rows, s, logits);
}

}  // namespace okapi::model
