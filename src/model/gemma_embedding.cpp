// gemma-embedding (EmbeddingGemma), as llama.cpp builds it (src/models/gemma-embedding.cpp):
// gemma3's blocks (gemma3.cpp) with
//   - non-causal attention: each input sees all of itself, the sliding-window layers within a
//     symmetric window (|i - j| <= sliding_window / 2; attention_core arranges it), no KV rings;
//   - window pattern 6 (or attention.sliding_window_pattern): layer il slides iff il % 6 < 5; the
//     sliding layers rope with rope.freq_base_swa (default 10000), the others with rope.freq_base;
//   - queries scaled by 1 / sqrt(head_dim); GELU as llama.cpp's (fp16 table);
//   - output: rms(x, output_norm), every token's hidden state, no LM head; dense_2 (+ bias) and
//     dense_3 (files converted with --sentence-transformers-dense-modules) project the pooled
//     vector (Model::pool).
#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/architectures.hpp"
#include "model/blocks.hpp"

namespace okapi::model {

namespace {

constexpr int64_t kDefaultPattern = 6;  // llama.cpp: load_swa_pattern(ml, 6)

class GemmaEmbeddingModel final : public DecoderModel {
 public:
  GemmaEmbeddingModel(gguf::File file, HParams hparams) : DecoderModel(std::move(file), std::move(hparams)) {
    const HParams& hp = hparams_;
    const std::string a = hp.arch + ".";
    window_ = require_int(file_, a + "attention.sliding_window");
    if (window_ <= 0) throw_error("{}: {}attention.sliding_window must be positive, got {}", file_.name(), a, window_);
    sliding_ = windowed_layers(a + "attention.sliding_window_pattern", kDefaultPattern);
    load_embeddings();
    layers_ = post_norm_layers({.qkv = {}, .output = {}, .qk_norm = true});
    const int64_t dense_width = optional_int(file_, a + "dense_2_feat_out", 0);
    if (dense_width > 0) {
      dense_.first = optional_tensor("dense_2.weight", {hp.n_embd, dense_width});
      dense_.first_bias = optional_tensor("dense_2.bias", {dense_width});
      dense_.second = optional_tensor("dense_3.weight", {optional_int(file_, a + "dense_3_feat_in", dense_width), hp.n_embd});
      uses_in_matmul(dense_.first);
      uses_in_matmul(dense_.second);
    }
    check_tensors();
    global_rope_ = rope_config(hp, /*neox=*/true, nullptr);
    local_rope_ = global_rope_;
    local_rope_.freq_base = optional_float(file_, a + "rope.freq_base_swa", 10000.0f);
    local_rope_.freq_scale = 1.0f;
  }

  bool generates_text() const override { return false; }

 protected:
  void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     const LogitSelection& rows, float* hidden) const override {
    const HParams& hp = hparams_;
    const int64_t T = static_cast<int64_t>(tokens.size()), n = T * hp.n_embd;
    Scratch s(ops.workspace(), hp, T, layers_.front().ffn.gate.w.n_out);
    AttentionConfig att = attention_config(hp, 1.0f / std::sqrt(static_cast<float>(hp.head_dim_k)));
    att.causal = false;
    ops.get_rows(token_embd_, tokens, s.x.data());
    ops.scale(s.x.data(), std::sqrt(static_cast<float>(hp.n_embd)), n, s.x.data());
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const PostNormLayer& l = layers_[static_cast<size_t>(il)];
      const bool sliding = sliding_[static_cast<size_t>(il)] != 0;
      att.layer = il;
      att.sliding_window = sliding ? window_ : 0;
      attention_block(ops, kv, hp, l.attn, sliding ? local_rope_ : global_rope_, att, positions, s);
      ops.rmsnorm(s.o.data(), l.post_attn_norm, T, hp.n_embd, hp.norm_eps, s.o.data());
      ops.add(s.x.data(), s.o.data(), n, s.x.data());
      ffn_block(ops, hp, l.ffn, Activation::GELU, s);
      ops.rmsnorm(s.o.data(), l.post_ffn_norm, T, hp.n_embd, hp.norm_eps, s.o.data());
      ops.add(s.x.data(), s.o.data(), n, s.x.data());
    }
    output_rows(ops, rows, s, hidden);
  }

 private:
  // llama.cpp's load_swa_pattern: a per-layer array of flags, or a period n (layer il slides iff
  // il % n < n - 1; 0: every layer).
  std::vector<PostNormLayer> layers_;
  std::vector<uint8_t> sliding_;
  int64_t window_ = 0;
  kernels::RopeConfig global_rope_, local_rope_;
};

}  // namespace

std::unique_ptr<Model> make_gemma_embedding(gguf::File file, HParams hparams) {
  return std::make_unique<GemmaEmbeddingModel>(std::move(file), std::move(hparams));
}

}  // namespace okapi::model
