// bert (BERT, BGE, MiniLM, cross-encoder rerankers with a classifier head): see bert.hpp.
#include "model/bert.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "model/architectures.hpp"

namespace okapi::model {

BertModel::BertModel(gguf::File file, HParams hparams, BertOptions options)
    : DecoderModel(std::move(file), std::move(hparams)), options_(options) {
  const HParams& hp = hparams_;
  const AttentionDims d = attention_dims(hp);
  if (hp.layer_norm_eps <= 0.0f && !file_.find(hp.arch + ".attention.layer_norm_epsilon"))
    throw_error("{}: missing required metadata key '{}.attention.layer_norm_epsilon'", file_.name(), hp.arch);
  if (hp.head_dim_k != hp.head_dim_v)
    throw_error("{}: {} needs equal key and value head sizes, got {} and {}", file_.name(), hp.arch, hp.head_dim_k,
                hp.head_dim_v);
  token_embd_ = tensor("token_embd.weight", {hp.n_embd, hp.n_vocab});
  token_types_ = optional_tensor("token_types.weight", {});
  if (token_types_ && (token_types_.n_in != hp.n_embd || token_types_.n_out < 1))
    throw_error("{}: 'token_types.weight' rows of {} values, expected {} (embedding_length)", file_.name(),
                token_types_.n_in, hp.n_embd);
  if (!options_.rope) {
    position_embd_ = tensor("position_embd.weight", {});
    if (position_embd_ && position_embd_.n_in != hp.n_embd)
      throw_error("{}: 'position_embd.weight' rows of {} values, expected {}", file_.name(), position_embd_.n_in,
                  hp.n_embd);
  }
  embd_norm_ = tensor("token_embd_norm.weight", {hp.n_embd});
  embd_norm_bias_ = tensor("token_embd_norm.bias", {hp.n_embd});
  n_ff_ = hp.n_ff != 0 ? hp.n_ff : 0;
  if (n_ff_ == 0)
    if (const gguf::TensorInfo* up = file_.find_tensor("blk.0.ffn_up.weight"); up && up->shape.size() == 2)
      n_ff_ = up->shape[1];
  const ProjectionParts with_bias{.bias = Part::Optional};
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = layer_prefix(il);
    Layer l;
    if (file_.find_tensor(p + "attn_qkv.weight")) {
      split(p + "attn_qkv", {{&l.attn.q, d.n_q, "q"}, {&l.attn.k, d.n_k, "k"}, {&l.attn.v, d.n_v, "v"}},
            Part::Optional);
    } else {
      l.attn.q = projection(p + "attn_q", {hp.n_embd, d.n_q}, with_bias);
      l.attn.k = projection(p + "attn_k", {hp.n_embd, d.n_k}, with_bias);
      l.attn.v = projection(p + "attn_v", {hp.n_embd, d.n_v}, with_bias);
    }
    l.attn.o = projection(p + "attn_output", {d.n_o, hp.n_embd}, with_bias);
    l.attn_out_norm = tensor(p + "attn_output_norm.weight", {hp.n_embd});
    l.attn_out_norm_bias = tensor(p + "attn_output_norm.bias", {hp.n_embd});
    if (options_.gated_ffn) {  // llama.cpp's nomic-bert graph uses no FFN biases
      l.gate = projection(p + "ffn_gate", {hp.n_embd, n_ff_}, {});
      l.up = projection(p + "ffn_up", {hp.n_embd, n_ff_}, {});
      l.down = projection(p + "ffn_down", {n_ff_, hp.n_embd}, {});
    } else {
      l.up = projection(p + "ffn_up", {hp.n_embd, n_ff_}, with_bias);
      l.down = projection(p + "ffn_down", {n_ff_, hp.n_embd}, with_bias);
    }
    l.out_norm = tensor(p + "layer_output_norm.weight", {hp.n_embd});
    l.out_norm_bias = tensor(p + "layer_output_norm.bias", {hp.n_embd});
    layers_.push_back(std::move(l));
  }
  load_classifier();
  check_tensors();
  rope_ = rope_config(hp, /*neox=*/true, nullptr);
  if (!options_.rope) rope_.n_rot = 0;
}

void BertModel::forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                              std::span<const int32_t> positions, const LogitSelection& rows, float* hidden) const {
  const HParams& hp = hparams_;
  const int64_t T = static_cast<int64_t>(tokens.size()), n = hp.n_embd, nT = T * n;
  const float eps = hp.layer_norm_eps;
  Scratch s(ops.workspace(), hp, T, n_ff_);
  if (position_embd_)
    for (size_t t = 0; t < positions.size(); ++t)
      if (positions[t] >= position_embd_.n_out)
        throw_error("{}: position {} (token index {}) is beyond the {} rows of position_embd (the trained context)",
                    hp.arch, positions[t], t, position_embd_.n_out);

  // Embeddings: token + type 0 ("sentence A", as llama.cpp hard-codes) + absolute position.
  ops.get_rows(token_embd_, tokens, s.x.data());
  if (token_types_) {
    float* type0 = s.o.data();  // scratch: row 0 of token_types
    const int32_t zero = 0;
    ops.get_rows(token_types_, std::span<const int32_t>(&zero, 1), type0);
    Weight row{};
    row.data = type0;
    row.n_in = n;
    row.n_out = 1;
    ops.add_bias(row, s.x.data(), T);
  }
  if (position_embd_) {
    ops.get_rows(position_embd_, positions, s.h.data());
    ops.add(s.h.data(), s.x.data(), nT, s.x.data());
  }
  ops.layernorm(s.x.data(), embd_norm_, embd_norm_bias_, T, n, eps, s.x.data());

  AttentionConfig att = attention_config(hp, 1.0f / std::sqrt(static_cast<float>(hp.head_dim_k)));
  att.causal = hp.causal_attention;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const Layer& l = layers_[static_cast<size_t>(il)];
    att.layer = il;
    attention_core(ops, kv, hp, l.attn, rope_, att, positions, s.x.data(), s);
    ops.add(s.o.data(), s.x.data(), nT, s.o.data());
    ops.layernorm(s.o.data(), l.attn_out_norm, l.attn_out_norm_bias, T, n, eps, s.x.data());
    if (options_.gated_ffn) {
      ops.matmul_glu(Activation::SiLU, l.gate.w, l.up.w, s.x.data(), T, s.gate.data(), s.up.data());
      project(ops, l.down, s.gate.data(), T, s.o.data());
    } else {
      project(ops, l.up, s.x.data(), T, s.up.data());
      ops.activation(Activation::GELU, s.up.data(), T * n_ff_, s.up.data());
      project(ops, l.down, s.up.data(), T, s.o.data());
    }
    ops.add(s.o.data(), s.x.data(), nT, s.o.data());
    ops.layernorm(s.o.data(), l.out_norm, l.out_norm_bias, T, n, eps, s.x.data());
  }
  int64_t packed = 0;
  rows.for_each_run(T, [&](int64_t begin, int64_t count) {
    std::copy(s.x.data() + begin * n, s.x.data() + (begin + count) * n, hidden + packed * n);
    packed += count;
  });
}

std::unique_ptr<Model> make_bert(gguf::File file, HParams hparams) {
  return std::make_unique<BertModel>(std::move(file), std::move(hparams), BertOptions{});
}

}  // namespace okapi::model
