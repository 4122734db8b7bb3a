// llama (stories*, TinyLlama, SmolLM, Llama 2/3): x = embd[tok]; per layer
//   x += Wo · attn(rope(Wq·h), rope(Wk·h), Wv·h)   with h = rmsnorm(x, attn_norm)
//   x += Wdown · (silu(Wgate·h) * Wup·h)            with h = rmsnorm(x, ffn_norm)
// logits = output · rmsnorm(x, output_norm) (output = token_embd when tied).
#include "model/llama.hpp"

#include <cmath>
#include <string>

#include "model/architectures.hpp"

namespace okapi::model {

kernels::RopeConfig rope_config(const HParams& hp, bool neox, const float* freq_factors) {
  kernels::RopeConfig rope;
  rope.neox = neox;
  rope.n_rot = hp.n_rot;
  rope.freq_base = hp.rope_freq_base;
  rope.freq_scale = hp.rope_freq_scale;
  rope.freq_factors = freq_factors;
  rope.ext_factor = hp.rope_scaling_type == "yarn" ? 1.0f : 0.0f;
  rope.attn_factor = hp.rope_attn_factor;
  rope.n_ctx_orig = hp.rope_n_ctx_orig;
  return rope;
}

LlamaModel::LlamaModel(gguf::File file, HParams hparams, LlamaOptions options)
    : Model(std::move(file), std::move(hparams)), options_(options) {
  const HParams& hp = hparams_;
  const int64_t n_embd = hp.n_embd, n_q = hp.n_head * hp.head_dim_k, n_k = hp.n_head_kv * hp.head_dim_k,
                n_v = hp.n_head_kv * hp.head_dim_v, n_o = hp.n_head * hp.head_dim_v;
  token_embd_ = tensor("token_embd.weight", {n_embd, hp.n_vocab});
  output_norm_ = tensor("output_norm.weight", {n_embd});
  output_ = optional_tensor("output.weight", {n_embd, hp.n_vocab});
  if (!output_) output_ = token_embd_;  // tied embeddings
  rope_freqs_ = optional_tensor("rope_freqs.weight", {hp.n_rot / 2});
  // n_ff from the first layer's gate when the metadata lacks it.
  int64_t n_ff = hp.n_ff;
  if (n_ff == 0) {
    if (const gguf::TensorInfo* gate = file_.find_tensor("blk.0.ffn_gate.weight"); gate && gate->shape.size() == 2)
      n_ff = gate->shape[1];
  }
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    Layer l;
    l.attn_norm = tensor(p + "attn_norm.weight", {n_embd});
    l.wq = tensor(p + "attn_q.weight", {n_embd, n_q});
    l.wk = tensor(p + "attn_k.weight", {n_embd, n_k});
    l.wv = tensor(p + "attn_v.weight", {n_embd, n_v});
    if (options_.qkv_bias) {
      l.bq = tensor(p + "attn_q.bias", {n_q});
      l.bk = tensor(p + "attn_k.bias", {n_k});
      l.bv = tensor(p + "attn_v.bias", {n_v});
    } else {
      l.bq = optional_tensor(p + "attn_q.bias", {n_q});
      l.bk = optional_tensor(p + "attn_k.bias", {n_k});
      l.bv = optional_tensor(p + "attn_v.bias", {n_v});
    }
    if (options_.qk_norm) {
      l.q_norm = tensor(p + "attn_q_norm.weight", {hp.head_dim_k});
      l.k_norm = tensor(p + "attn_k_norm.weight", {hp.head_dim_k});
    }
    l.wo = tensor(p + "attn_output.weight", {n_o, n_embd});
    l.ffn_norm = tensor(p + "ffn_norm.weight", {n_embd});
    l.ffn_gate = tensor(p + "ffn_gate.weight", {n_embd, n_ff});
    l.ffn_up = tensor(p + "ffn_up.weight", {n_embd, n_ff});
    l.ffn_down = tensor(p + "ffn_down.weight", {n_ff, n_embd});
    layers_.push_back(l);
  }
  check_tensors();
  rope_ = rope_config(hp, options_.neox_rope, rope_freqs_ ? rope_freqs_.f32() : nullptr);
}

void LlamaModel::forward_batch(Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens,
                               std::span<const int32_t> positions, LogitRows rows, float* logits) const {
  const HParams& hp = hparams_;
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = hp.n_embd, n_ff = layers_.front().ffn_gate.n_out;
  const int64_t n_q = hp.n_head * hp.head_dim_k, n_k = hp.n_head_kv * hp.head_dim_k,
                n_v = hp.n_head_kv * hp.head_dim_v, n_o = hp.n_head * hp.head_dim_v;
  std::vector<float> x(static_cast<size_t>(T * n_embd)), h(x.size()), o(x.size());
  std::vector<float> q(static_cast<size_t>(T * n_q)), k(static_cast<size_t>(T * n_k)), v(static_cast<size_t>(T * n_v));
  std::vector<float> attn(static_cast<size_t>(T * n_o));
  std::vector<float> gate(static_cast<size_t>(T * n_ff)), up(gate.size());

  AttentionConfig att;
  att.n_head = hp.n_head;
  att.n_head_kv = hp.n_head_kv;
  att.head_dim_k = hp.head_dim_k;
  att.head_dim_v = hp.head_dim_v;
  att.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim_k));

  ops.get_rows(token_embd_, tokens, x.data());
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const Layer& l = layers_[static_cast<size_t>(il)];
    ops.rmsnorm(x.data(), l.attn_norm, T, n_embd, hp.norm_eps, h.data());
    ops.matmul(l.wq, h.data(), T, q.data());
    ops.matmul(l.wk, h.data(), T, k.data());
    ops.matmul(l.wv, h.data(), T, v.data());
    if (l.bq) ops.add_bias(l.bq, q.data(), T);
    if (l.bk) ops.add_bias(l.bk, k.data(), T);
    if (l.bv) ops.add_bias(l.bv, v.data(), T);
    if (l.q_norm) ops.rmsnorm(q.data(), l.q_norm, T * hp.n_head, hp.head_dim_k, hp.norm_eps, q.data());
    if (l.k_norm) ops.rmsnorm(k.data(), l.k_norm, T * hp.n_head_kv, hp.head_dim_k, hp.norm_eps, k.data());
    ops.rope(q.data(), T, hp.n_head, hp.head_dim_k, positions, rope_);
    ops.rope(k.data(), T, hp.n_head_kv, hp.head_dim_k, positions, rope_);
    ops.store_kv(kv, il, k.data(), v.data(), positions);
    att.layer = il;
    ops.attention(kv, att, q.data(), positions, attn.data());
    ops.matmul(l.wo, attn.data(), T, o.data());
    ops.add(x.data(), o.data(), T * n_embd, x.data());

    ops.rmsnorm(x.data(), l.ffn_norm, T, n_embd, hp.norm_eps, h.data());
    ops.matmul(l.ffn_gate, h.data(), T, gate.data());
    ops.matmul(l.ffn_up, h.data(), T, up.data());
    ops.glu(Activation::SiLU, gate.data(), up.data(), T, n_ff, gate.data());
    ops.matmul(l.ffn_down, gate.data(), T, o.data());
    ops.add(x.data(), o.data(), T * n_embd, x.data());
  }
  const int64_t n_rows = output_row_count(rows, T);
  const float* last = output_rows_begin(rows, x.data(), T, n_embd);
  ops.rmsnorm(last, output_norm_, n_rows, n_embd, hp.norm_eps, h.data());
  ops.matmul(output_, h.data(), n_rows, logits);
}

std::unique_ptr<Model> make_llama(gguf::File file, HParams hparams) {
  return std::make_unique<LlamaModel>(std::move(file), std::move(hparams), LlamaOptions{});
}

}  // namespace okapi::model
