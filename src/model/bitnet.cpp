// llama.cpp's `bitnet` architecture (1bitLLM bitnet_b1_58, and bitllama2.c checkpoints converted
// by `okapi convert`): the BitNet block of bitnet.hpp with a SiLU-gated FFN.
#include "model/bitnet.hpp"

#include <cmath>
#include <string>

#include "model/architectures.hpp"
#include "model/llama.hpp"

namespace okapi::model {

BitnetModel::BitnetModel(gguf::File file, HParams hparams, Activation ffn_activation)
    : Model(std::move(file), std::move(hparams)), ffn_activation_(ffn_activation) {
  const HParams& hp = hparams_;
  const int64_t n_embd = hp.n_embd, n_q = hp.n_head * hp.head_dim_k, n_k = hp.n_head_kv * hp.head_dim_k,
                n_v = hp.n_head_kv * hp.head_dim_v, n_o = hp.n_head * hp.head_dim_v;
  token_embd_ = tensor("token_embd.weight", {n_embd, hp.n_vocab});
  output_norm_ = tensor("output_norm.weight", {n_embd});
  output_ = optional_tensor("output.weight", {n_embd, hp.n_vocab});
  if (!output_) output_ = token_embd_;  // tied: the usual BitNet layout
  int64_t n_ff = hp.n_ff;
  if (const gguf::TensorInfo* gate = file_.find_tensor("blk.0.ffn_gate.weight"); gate && gate->shape.size() == 2)
    n_ff = gate->shape[1];
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    Layer l;
    l.attn_norm = tensor(p + "attn_norm.weight", {n_embd});
    l.wq = projection(p + "attn_q", {n_embd, n_q});
    l.wk = projection(p + "attn_k", {n_embd, n_k});
    l.wv = projection(p + "attn_v", {n_embd, n_v});
    l.attn_sub_norm = tensor(p + "attn_sub_norm.weight", {n_o});
    l.wo = projection(p + "attn_output", {n_o, n_embd});
    l.ffn_norm = tensor(p + "ffn_norm.weight", {n_embd});
    l.ffn_gate = projection(p + "ffn_gate", {n_embd, n_ff});
    l.ffn_up = projection(p + "ffn_up", {n_embd, n_ff});
    l.ffn_sub_norm = tensor(p + "ffn_sub_norm.weight", {n_ff});
    l.ffn_down = projection(p + "ffn_down", {n_ff, n_embd});
    layers_.push_back(l);
  }
  check_tensors();
  rope_ = rope_config(hp, /*neox=*/true, nullptr);
}

BitnetModel::Projection BitnetModel::projection(const std::string& prefix, std::vector<int64_t> shape) {
  Projection p;
  const int64_t n_out = shape.size() == 2 ? shape[1] : 0;
  p.w = tensor(prefix + ".weight", std::move(shape));
  p.bias = optional_tensor(prefix + ".bias", {n_out});
  p.scale = optional_tensor(prefix + ".scale", {1});
  return p;
}

void BitnetModel::apply(Ops& ops, const Projection& p, const float* x, int64_t n_tokens, float* y) {
  ops.matmul(p.w, x, n_tokens, y);
  // llama.cpp's order: scale first, then bias.
  if (p.scale) ops.scale(y, p.scale.f32()[0], n_tokens * p.w.n_out, y);
  if (p.bias) ops.add_bias(p.bias, y, n_tokens);
}

void BitnetModel::forward_batch(Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens,
                                std::span<const int32_t> positions, LogitRows rows, float* logits) const {
  const HParams& hp = hparams_;
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = hp.n_embd, n_ff = layers_.front().ffn_gate.w.n_out;
  const int64_t n_q = hp.n_head * hp.head_dim_k, n_k = hp.n_head_kv * hp.head_dim_k,
                n_v = hp.n_head_kv * hp.head_dim_v, n_o = hp.n_head * hp.head_dim_v;
  std::vector<float> x(static_cast<size_t>(T * n_embd)), h(x.size()), o(x.size());
  std::vector<float> q(static_cast<size_t>(T * n_q)), k(static_cast<size_t>(T * n_k)),
      v(static_cast<size_t>(T * n_v)), attn(static_cast<size_t>(T * n_o));
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
    apply(ops, l.wq, h.data(), T, q.data());
    apply(ops, l.wk, h.data(), T, k.data());
    apply(ops, l.wv, h.data(), T, v.data());
    ops.rope(q.data(), T, hp.n_head, hp.head_dim_k, positions, rope_);
    ops.rope(k.data(), T, hp.n_head_kv, hp.head_dim_k, positions, rope_);
    ops.store_kv(kv, il, k.data(), v.data(), positions);
    att.layer = il;
    ops.attention(kv, att, q.data(), positions, attn.data());
    ops.rmsnorm(attn.data(), l.attn_sub_norm, T, n_o, hp.norm_eps, attn.data());
    apply(ops, l.wo, attn.data(), T, o.data());
    ops.add(x.data(), o.data(), T * n_embd, x.data());

    ops.rmsnorm(x.data(), l.ffn_norm, T, n_embd, hp.norm_eps, h.data());
    apply(ops, l.ffn_gate, h.data(), T, gate.data());
    apply(ops, l.ffn_up, h.data(), T, up.data());
    ops.glu(ffn_activation_, gate.data(), up.data(), T, n_ff, gate.data());
    ops.rmsnorm(gate.data(), l.ffn_sub_norm, T, n_ff, hp.norm_eps, gate.data());
    apply(ops, l.ffn_down, gate.data(), T, o.data());
    ops.add(x.data(), o.data(), T * n_embd, x.data());
  }
  const int64_t n_rows = output_row_count(rows, T);
  const float* last = output_rows_begin(rows, x.data(), T, n_embd);
  ops.rmsnorm(last, output_norm_, n_rows, n_embd, hp.norm_eps, h.data());
  ops.matmul(output_, h.data(), n_rows, logits);
}

std::unique_ptr<Model> make_bitnet(gguf::File file, HParams hparams) {
  return std::make_unique<BitnetModel>(std::move(file), std::move(hparams), Activation::SiLU);
}

}  // namespace okapi::model
