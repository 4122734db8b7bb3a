// gemma2, as llama.cpp builds it (src/models/gemma2.cpp):
//   x = embd[tok] * sqrt(n_embd)
//   per layer: h = rms(x, attn_norm); q, k, v; NEOX rope; q *= attention scale;
//              attention with the scores soft-capped: cap * tanh(q·k / cap) (attn_logit_softcapping);
//              x += rms(Wo · attn, post_attention_norm)
//              h = rms(x, ffn_norm); x += rms(Wdown · (gelu(Wgate·h) * Wup·h), post_ffw_norm)
//   logits = cap * tanh(token_embd · rms(x, output_norm) / cap)   (final_logit_softcapping)
// The LM head is always token_embd (llama.cpp duplicates it; an output.weight is ignored).
// GELU is ggml's (fp16 table, Activation::GELU). Sliding-window layers: llama.cpp's pattern 2
// (load_swa_pattern(ml, 2), not dense-first) makes even layers local (window
// attention.sliding_window, default 4096) and odd layers global, unless
// attention.sliding_window_pattern gives another period n (layer il local iff il % n < n - 1).
// The attention scale is 1/sqrt(key_length), or 1/sqrt(n_embd / n_head) for the 27B (46 layers).
// Softcaps default to 50 (attention) and 30 (final) as llama.cpp's hparams do.
#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/architectures.hpp"
#include "model/blocks.hpp"

namespace okapi::model {

namespace {

constexpr int64_t kDefaultWindow = 4096;     // llama.cpp: hparams.n_swa for gemma2
constexpr int64_t kDefaultPattern = 2;       // llama.cpp: load_swa_pattern(ml, 2)
constexpr float kDefaultAttnSoftcap = 50.0f;  // llama-hparams.h defaults
constexpr float kDefaultFinalSoftcap = 30.0f;

class Gemma2Model final : public DecoderModel {
 public:
  Gemma2Model(gguf::File file, HParams hparams) : DecoderModel(std::move(file), std::move(hparams)) {
    const HParams& hp = hparams_;
    const std::string a = hp.arch + ".";
    const int64_t window = optional_int(file_, a + "attention.sliding_window", kDefaultWindow);
    if (window <= 0) throw_error("{}: {}attention.sliding_window must be positive, got {}", file_.name(), a, window);
    const int64_t pattern = optional_int(file_, a + "attention.sliding_window_pattern", kDefaultPattern);
    if (pattern < 0)
      throw_error("{}: {}attention.sliding_window_pattern must not be negative, got {}", file_.name(), a, pattern);
    std::vector<int64_t> windows(static_cast<size_t>(hp.n_layer), 0);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const bool local = pattern == 0 || il % pattern < pattern - 1;
      windows[static_cast<size_t>(il)] = local ? window : 0;
    }
    set_layer_windows(std::move(windows));
    attn_softcap_ = optional_float(file_, a + "attn_logit_softcapping", kDefaultAttnSoftcap);
    final_softcap_ = optional_float(file_, a + "final_logit_softcapping", kDefaultFinalSoftcap);
    if (!(attn_softcap_ > 0.0f) || !std::isfinite(attn_softcap_))
      throw_error("{}: {}attn_logit_softcapping must be a positive number, got {}", file_.name(), a, attn_softcap_);
    if (!(final_softcap_ > 0.0f) || !std::isfinite(final_softcap_))
      throw_error("{}: {}final_logit_softcapping must be a positive number, got {}", file_.name(), a, final_softcap_);

    token_embd_ = tensor("token_embd.weight", {hp.n_embd, hp.n_vocab});
    output_norm_ = tensor("output_norm.weight", {hp.n_embd});
    output_ = token_embd_;
    uses_in_matmul(output_);
    layers_ = post_norm_layers({});
    check_tensors();
    global_rope_ = rope_config(hp, /*neox=*/true, nullptr);
    local_rope_ = global_rope_;
    local_rope_.freq_base = optional_float(file_, a + "rope.freq_base_swa", hp.rope_freq_base);
    const int64_t query_scalar = hp.n_layer == 46 ? hp.n_embd / hp.n_head : hp.head_dim_k;
    attention_scale_ = 1.0f / std::sqrt(static_cast<float>(query_scalar));
  }

 protected:
  void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     const LogitSelection& rows, float* logits) const override {
    const HParams& hp = hparams_;
    const int64_t T = static_cast<int64_t>(tokens.size());
    Scratch s(ops.workspace(), hp, T, layers_.front().ffn.gate.w.n_out);
    AttentionConfig att = attention_config(hp, attention_scale_);
    att.softcap = attn_softcap_;

    forward_post_norm(ops, kv, tokens, positions, layers_, global_rope_, local_rope_, att, Activation::GELU, s);
    output_rows(ops, rows, s, logits);
    if (hidden_output_) return;
    int64_t n_rows = 0;
    rows.for_each_run(T, [&](int64_t, int64_t count) { n_rows += count; });
    if (n_rows > 0) ops.softcap(logits, n_rows * hp.n_vocab, final_softcap_);
  }

 private:
  std::vector<PostNormLayer> layers_;
  kernels::RopeConfig global_rope_, local_rope_;
  float attn_softcap_ = 0.0f, final_softcap_ = 0.0f;
  float attention_scale_ = 1.0f;
};

}  // namespace

std::unique_ptr<Model> make_gemma2(gguf::File file, HParams hparams) {
  return std::make_unique<Gemma2Model>(std::move(file), std::move(hparams));
}

}  // namespace okapi::model
