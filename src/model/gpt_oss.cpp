// gpt-oss (openai/gpt-oss-20b, -120b), as llama.cpp builds it (src/models/openai-moe.cpp):
//   x = embd[tok]
//   per layer: h = rms(x, attn_norm); q, k, v = W·h + b; NEOX rope (YaRN); attention with one sink
//              logit per head (AttentionConfig::sinks), over a sliding window on the windowed layers;
//              x += Wo · attn + bo
//              h = rms(x, post_attention_norm); x += MoE(h): router logits + bias, top-k of the
//              logits, weights = softmax over the k chosen logits; each expert
//              down · swiglu_oai(gate · h + b, up · h + b) + b (alpha 1.702, limit 7)
//   logits = output · rms(x, output_norm)
// Windowed layers: llama.cpp's set_swa_pattern(n) with n from attention.sliding_window_pattern
// (default 2): layer il slides iff n == 0 or il % n < n - 1, so with 2 the even layers slide and the
// odd ones see everything. The key may also be an array of one bool per layer. Every layer uses
// the same rope (rope.freq_base_swa, when present, for the windowed ones), and q·k is scaled by
// 1/sqrt(n_rot). YaRN's attention factor is llama.cpp's: the rope kernel multiplies by
// 1 + 0.1 ln(factor) and the context's yarn_attn_factor cancels get_mscale(factor), leaving
// rope.scaling.attn_factor.
#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "model/architectures.hpp"
#include "model/blocks.hpp"
#include "model/moe.hpp"

namespace okapi::model {

namespace {

constexpr int64_t kDefaultSwaPattern = 2;  // llama.cpp: load_swa_pattern(ml, 2) for gpt-oss

class GptOssModel final : public DecoderModel {
 public:
  GptOssModel(gguf::File file, HParams hparams) : DecoderModel(std::move(file), std::move(hparams)) {
    const HParams& hp = hparams_;
    const std::string key = hp.arch + ".";
    sliding_window_ = require_int(file_, key + "attention.sliding_window");
    if (sliding_window_ <= 0)
      throw_error("{}: '{}attention.sliding_window' must be positive, got {}", file_.name(), key, sliding_window_);
    // The windowed layers' KV caches are rings of the window (Model::kv_shape).
    const std::vector<uint8_t> windowed = windowed_layers(key + "attention.sliding_window_pattern", kDefaultSwaPattern);
    std::vector<int64_t> windows(windowed.size());
    for (size_t il = 0; il < windowed.size(); ++il) windows[il] = windowed[il] ? sliding_window_ : 0;
    set_layer_windows(std::move(windows));
    if (hp.n_expert <= 0)
      throw_error("{}: '{}expert_count' must be positive for gpt-oss (a mixture of experts), got {}", file_.name(),
                  key, hp.n_expert);
    if (hp.n_ff_exp <= 0)
      throw_error("{}: missing or zero '{}expert_feed_forward_length' (the width of one expert)", file_.name(), key);

    load_embeddings();
    AttentionParts attn;
    attn.qkv.bias = Part::Optional;  // llama.cpp: optional; the released models have them
    attn.output.bias = Part::Required;
    MoeParts moe{.n_expert = hp.n_expert, .n_ff_exp = hp.n_ff_exp, .router_bias = true, .expert_biases = true,
                 .norm = "post_attention_norm"};
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const std::string p = layer_prefix(il);
      Layer l;
      l.attn = attention_weights(p, attn);
      l.sinks = tensor(p + "attn_sinks.weight", {hp.n_head});
      l.moe = moe_weights(p, moe);
      layers_.push_back(std::move(l));
    }
    check_tensors();

    rope_ = rope_config(hp, /*neox=*/true, nullptr);
    swa_rope_ = rope_;
    swa_rope_.freq_base = optional_float(file_, key + "rope.freq_base_swa", rope_.freq_base);
    if (!std::isfinite(swa_rope_.freq_base) || swa_rope_.freq_base <= 0.0f)
      throw_error("{}: '{}rope.freq_base_swa' must be a finite positive number, got {}", file_.name(), key,
                  swa_rope_.freq_base);
    attention_scale_ = 1.0f / std::sqrt(static_cast<float>(hp.n_rot));
    // llama.cpp neither normalizes nor scales gpt-oss's expert weights (it does not read
    // expert_weights_scale for this architecture), whatever the file says.
    moe_config_.routing = {.n_expert = hp.n_expert, .n_used = hp.n_expert_used,
                           .gating = MoeGating::SoftmaxOfSelected};
    moe_config_.activation = MoeActivation::SwigluOai;
  }

 protected:
  void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     const LogitSelection& rows, float* logits) const override {
    const HParams& hp = hparams_;
    const int64_t T = static_cast<int64_t>(tokens.size()), n_embd = hp.n_embd;
    Scratch s(ops.workspace(), hp, T, 0);
    AttentionConfig att = attention_config(hp, attention_scale_);

    ops.get_rows(token_embd_, tokens, s.x.data());
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const Layer& l = layers_[static_cast<size_t>(il)];
      att.layer = il;
      att.sliding_window = layer_window(il);
      const bool swa = att.sliding_window > 0;
      att.sinks = l.sinks.f32();
      attention_block(ops, kv, hp, l.attn, swa ? swa_rope_ : rope_, att, positions, s);
      ops.add(s.x.data(), s.o.data(), T * n_embd, s.x.data());
      moe_block(ops, hp, l.moe, moe_config_, s);
      ops.add(s.x.data(), s.o.data(), T * n_embd, s.x.data());
    }
    output_rows(ops, rows, s, logits);
  }

 private:
  struct Layer {
    AttentionWeights attn;
    Weight sinks;
    MoeWeights moe;
  };

  std::vector<Layer> layers_;
  kernels::RopeConfig rope_, swa_rope_;
  int64_t sliding_window_ = 0;
  float attention_scale_ = 1.0f;
  MoeConfig moe_config_;
};

}  // namespace

std::unique_ptr<Model> make_gpt_oss(gguf::File file, HParams hparams) {
  return std::make_unique<GptOssModel>(std::move(file), std::move(hparams));
}

}  // namespace okapi::model
