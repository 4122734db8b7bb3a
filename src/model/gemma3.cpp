// gemma3, as llama.cpp / ik_llama.cpp build it:
//   x = embd[tok] * sqrt(n_embd)
//   per layer: h = rms(x, attn_norm); q, k, v; per-head rms(q, attn_q_norm), rms(k, attn_k_norm);
//              NEOX rope; attention; x += rms(Wo · attn, post_attention_norm)
//              h = rms(x, ffn_norm); x += rms(Wdown · (gelu_tanh(Wgate·h) * Wup·h), post_ffw_norm)
//   logits = output · rms(x, output_norm)   (output = token_embd when tied)
// GELU is evaluated in float (Activation::GELUF32) as ik_llama.cpp does, the reference engine for
// gemma3 here (llama.cpp's fp16 GELU table moves these logits by ~2e-3).
// Five sliding-window layers per global one: layer il is global iff (il + 1) % 6 == 0. llama.cpp
// hard-codes that pattern and the local layers' rope (base 1e4, no scaling); global layers use
// rope.freq_base and rope.scaling from the metadata. Norm weights are used as stored: the HF
// converter already stored (1 + w), so rms(x) * w_gguf is Gemma's x * (1 + w).
#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/architectures.hpp"
#include "model/llama.hpp"

namespace okapi::model {

namespace {

constexpr int64_t kSlidingWindowPattern = 6;  // llama.cpp: n_swa_pattern = 6 for gemma3
constexpr float kLocalRopeBase = 10000.0f;    // llama.cpp: hard-coded for the sliding-window layers

bool is_global_layer(int64_t il) { return (il + 1) % kSlidingWindowPattern == 0; }

class Gemma3Model final : public Model {
 public:
  Gemma3Model(gguf::File file, HParams hparams) : Model(std::move(file), std::move(hparams)) {
    const HParams& hp = hparams_;
    const int64_t n_embd = hp.n_embd, hd = hp.head_dim_k, n_q = hp.n_head * hd, n_k = hp.n_head_kv * hd,
                  n_v = hp.n_head_kv * hp.head_dim_v, n_o = hp.n_head * hp.head_dim_v;
    sliding_window_ = require_int(file_, hp.arch + ".attention.sliding_window");
    if (sliding_window_ <= 0)
      throw_error("{}: {}.attention.sliding_window must be positive, got {}", file_.name(), hp.arch, sliding_window_);
    token_embd_ = tensor("token_embd.weight", {n_embd, hp.n_vocab});
    output_norm_ = tensor("output_norm.weight", {n_embd});
    output_ = optional_tensor("output.weight", {n_embd, hp.n_vocab});
    if (!output_) output_ = token_embd_;
    int64_t n_ff = hp.n_ff;
    if (const gguf::TensorInfo* gate = file_.find_tensor("blk.0.ffn_gate.weight"); gate && gate->shape.size() == 2)
      n_ff = gate->shape[1];
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      Layer l;
      l.attn_norm = tensor(p + "attn_norm.weight", {n_embd});
      l.wq = tensor(p + "attn_q.weight", {n_embd, n_q});
      l.wk = tensor(p + "attn_k.weight", {n_embd, n_k});
      l.wv = tensor(p + "attn_v.weight", {n_embd, n_v});
      l.q_norm = tensor(p + "attn_q_norm.weight", {hd});
      l.k_norm = tensor(p + "attn_k_norm.weight", {hd});
      l.wo = tensor(p + "attn_output.weight", {n_o, n_embd});
      l.post_attn_norm = tensor(p + "post_attention_norm.weight", {n_embd});
      l.ffn_norm = tensor(p + "ffn_norm.weight", {n_embd});
      l.ffn_gate = tensor(p + "ffn_gate.weight", {n_embd, n_ff});
      l.ffn_up = tensor(p + "ffn_up.weight", {n_embd, n_ff});
      l.ffn_down = tensor(p + "ffn_down.weight", {n_ff, n_embd});
      l.post_ffn_norm = tensor(p + "post_ffw_norm.weight", {n_embd});
      layers_.push_back(l);
    }
    check_tensors();
    global_rope_ = rope_config(hp, /*neox=*/true, nullptr);
    local_rope_ = global_rope_;
    local_rope_.freq_base = kLocalRopeBase;
    local_rope_.freq_scale = 1.0f;
    local_rope_.ext_factor = 0.0f;
    local_rope_.attn_factor = 1.0f;
    // llama.cpp scales queries by 1/sqrt(query_pre_attn_scalar): head_dim for every Gemma 3 size
    // except 27B (62 layers), whose scalar is n_embd / n_head.
    const int64_t query_scalar = hp.n_layer == 62 ? hp.n_embd / hp.n_head : hd;
    attention_scale_ = 1.0f / std::sqrt(static_cast<float>(query_scalar));
  }

 protected:
  void forward_batch(Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     LogitRows rows, float* logits) const override {
    const HParams& hp = hparams_;
    const int64_t T = static_cast<int64_t>(tokens.size());
    const int64_t n_embd = hp.n_embd, n_ff = layers_.front().ffn_gate.n_out, hd = hp.head_dim_k;
    const int64_t n_q = hp.n_head * hd, n_k = hp.n_head_kv * hd, n_v = hp.n_head_kv * hp.head_dim_v,
                  n_o = hp.n_head * hp.head_dim_v;
    std::vector<float> x(static_cast<size_t>(T * n_embd)), h(x.size()), o(x.size());
    std::vector<float> q(static_cast<size_t>(T * n_q)), k(static_cast<size_t>(T * n_k)),
        v(static_cast<size_t>(T * n_v)), attn(static_cast<size_t>(T * n_o));
    std::vector<float> gate(static_cast<size_t>(T * n_ff)), up(gate.size());

    AttentionConfig att;
    att.n_head = hp.n_head;
    att.n_head_kv = hp.n_head_kv;
    att.head_dim_k = hd;
    att.head_dim_v = hp.head_dim_v;
    att.scale = attention_scale_;

    ops.get_rows(token_embd_, tokens, x.data());
    ops.scale(x.data(), std::sqrt(static_cast<float>(n_embd)), T * n_embd, x.data());
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const Layer& l = layers_[static_cast<size_t>(il)];
      const bool global = is_global_layer(il);
      const kernels::RopeConfig& rope = global ? global_rope_ : local_rope_;
      ops.rmsnorm(x.data(), l.attn_norm, T, n_embd, hp.norm_eps, h.data());
      ops.matmul(l.wq, h.data(), T, q.data());
      ops.matmul(l.wk, h.data(), T, k.data());
      ops.matmul(l.wv, h.data(), T, v.data());
      ops.rmsnorm(q.data(), l.q_norm, T * hp.n_head, hd, hp.norm_eps, q.data());
      ops.rmsnorm(k.data(), l.k_norm, T * hp.n_head_kv, hd, hp.norm_eps, k.data());
      ops.rope(q.data(), T, hp.n_head, hd, positions, rope);
      ops.rope(k.data(), T, hp.n_head_kv, hd, positions, rope);
      ops.store_kv(kv, il, k.data(), v.data(), positions);
      att.layer = il;
      att.sliding_window = global ? 0 : sliding_window_;
      ops.attention(kv, att, q.data(), positions, attn.data());
      ops.matmul(l.wo, attn.data(), T, o.data());
      ops.rmsnorm(o.data(), l.post_attn_norm, T, n_embd, hp.norm_eps, o.data());
      ops.add(x.data(), o.data(), T * n_embd, x.data());

      ops.rmsnorm(x.data(), l.ffn_norm, T, n_embd, hp.norm_eps, h.data());
      ops.matmul(l.ffn_gate, h.data(), T, gate.data());
      ops.matmul(l.ffn_up, h.data(), T, up.data());
      ops.glu(Activation::GELUF32, gate.data(), up.data(), T, n_ff, gate.data());
      ops.matmul(l.ffn_down, gate.data(), T, o.data());
      ops.rmsnorm(o.data(), l.post_ffn_norm, T, n_embd, hp.norm_eps, o.data());
      ops.add(x.data(), o.data(), T * n_embd, x.data());
    }
    const int64_t n_rows = output_row_count(rows, T);
    const float* last = output_rows_begin(rows, x.data(), T, n_embd);
    ops.rmsnorm(last, output_norm_, n_rows, n_embd, hp.norm_eps, h.data());
    ops.matmul(output_, h.data(), n_rows, logits);
  }

 private:
  struct Layer {
    Weight attn_norm, wq, wk, wv, q_norm, k_norm, wo, post_attn_norm;
    Weight ffn_norm, ffn_gate, ffn_up, ffn_down, post_ffn_norm;
  };
  Weight token_embd_, output_norm_, output_;
  std::vector<Layer> layers_;
  kernels::RopeConfig global_rope_, local_rope_;
  int64_t sliding_window_ = 0;
  float attention_scale_ = 1.0f;
};

}  // namespace

std::unique_ptr<Model> make_gemma3(gguf::File file, HParams hparams) {
  return std::make_unique<Gemma3Model>(std::move(file), std::move(hparams));
}

}  // namespace okapi::model
