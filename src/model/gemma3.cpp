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
#include "model/blocks.hpp"

namespace okapi::model {

namespace {

constexpr int64_t kSlidingWindowPattern = 6;  // llama.cpp: n_swa_pattern = 6 for gemma3
constexpr float kLocalRopeBase = 10000.0f;    // llama.cpp: hard-coded for the sliding-window layers

bool is_global_layer(int64_t il) { return (il + 1) % kSlidingWindowPattern == 0; }

class Gemma3Model final : public DecoderModel {
 public:
  Gemma3Model(gguf::File file, HParams hparams) : DecoderModel(std::move(file), std::move(hparams)) {
    const HParams& hp = hparams_;
    sliding_window_ = require_int(file_, hp.arch + ".attention.sliding_window");
    if (sliding_window_ <= 0)
      throw_error("{}: {}.attention.sliding_window must be positive, got {}", file_.name(), hp.arch, sliding_window_);
    std::vector<int64_t> windows(static_cast<size_t>(hp.n_layer));
    for (int64_t il = 0; il < hp.n_layer; ++il) windows[static_cast<size_t>(il)] = is_global_layer(il) ? 0 : sliding_window_;
    set_layer_windows(std::move(windows));
    load_embeddings();
    layers_ = post_norm_layers({.qkv = {}, .output = {}, .qk_norm = true});
    check_tensors();
    global_rope_ = rope_config(hp, /*neox=*/true, nullptr);
    local_rope_ = global_rope_;
    local_rope_.freq_base = kLocalRopeBase;
    local_rope_.freq_scale = 1.0f;
    local_rope_.ext_factor = 0.0f;
    local_rope_.attn_factor = 1.0f;
    // llama.cpp scales queries by 1/sqrt(query_pre_attn_scalar): head_dim for every Gemma 3 size
    // except 27B (62 layers), whose scalar is n_embd / n_head.
    const int64_t query_scalar = hp.n_layer == 62 ? hp.n_embd / hp.n_head : hp.head_dim_k;
    attention_scale_ = 1.0f / std::sqrt(static_cast<float>(query_scalar));
  }

 protected:
  void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     const LogitSelection& rows, float* logits) const override {
    const HParams& hp = hparams_;
    const int64_t T = static_cast<int64_t>(tokens.size());
    Scratch s(ops.workspace(), hp, T, layers_.front().ffn.gate.w.n_out);
    AttentionConfig att = attention_config(hp, attention_scale_);

    forward_post_norm(ops, kv, tokens, positions, layers_, global_rope_, local_rope_, att, Activation::GELUF32, s);
    output_rows(ops, rows, s, logits);
  }

 private:
  std::vector<PostNormLayer> layers_;
  kernels::RopeConfig global_rope_, local_rope_;
  int64_t sliding_window_ = 0;
  float attention_scale_ = 1.0f;
};

}  // namespace

std::unique_ptr<Model> make_gemma3(gguf::File file, HParams hparams) {
  return std::make_unique<Gemma3Model>(std::move(file), std::move(hparams));
}

}  // namespace okapi::model
