// granite (IBM Granite 3.x dense), as llama.cpp builds it: the llama graph (normal rope) with
//   x = embd[tok] * embedding_scale
//   x += residual_scale * attention(x), with q·k scaled by attention.scale (not 1/sqrt(head_dim))
//   x += residual_scale * ffn(x)
//   logits = (output · rms(x)) * (1 / logit_scale)
// logit_scale is required; the other scales are optional (absent or 0: not applied, and
// 1/sqrt(head_dim) for attention). Optional biases: attn_q/k/v, attn_output, ffn_gate/up/down.
// rope.scaling.finetuned = false (llama.cpp's switch for granite) turns rope off in every layer.
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "model/architectures.hpp"
#include "model/llama.hpp"

namespace okapi::model {

namespace {

class GraniteModel final : public LlamaModel {
 public:
  GraniteModel(gguf::File file, HParams hparams) : LlamaModel(std::move(file), std::move(hparams), LlamaOptions{}) {
    const HParams& hp = hparams_;
    const std::string a = hp.arch + ".";
    const auto scale = [&](const std::string& key, bool required) {
      const float value = required ? require_float(file_, a + key) : optional_float(file_, a + key, 0.0f);
      if (!std::isfinite(value) || value < 0.0f || (required && value == 0.0f))
        throw_error("{}: '{}{}' must be a finite {} number, got {}", file_.name(), a, key,
                    required ? "positive" : "non-negative", value);
      return value;
    };
    const float logit_scale = scale("logit_scale", true);
    options_.logit_scale = logit_scale;
    if (const float s = scale("embedding_scale", false); s != 0.0f) options_.embedding_scale = s;
    if (const float s = scale("residual_scale", false); s != 0.0f) options_.residual_scale = s;
    options_.attention_scale = scale("attention.scale", false);
    if (const gguf::Value* finetuned = file_.find(a + "rope.scaling.finetuned"); finetuned && !finetuned->as_bool())
      options_.no_rope_layer_step = 1;
    if (hp.rope_scaling_type == "longrope")
      throw_error("{}: granite with LongRoPE factors ('{}rope.scaling.type' longrope) is not supported", file_.name(), a);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const std::string p = layer_prefix(il);
      DecoderLayer& l = layers_[static_cast<size_t>(il)];
      l.attn.o.bias = optional_tensor(p + "attn_output.bias", {hp.n_embd});
      l.ffn.gate.bias = optional_tensor(p + "ffn_gate.bias", {l.ffn.gate.w.n_out});
      l.ffn.up.bias = optional_tensor(p + "ffn_up.bias", {l.ffn.up.w.n_out});
      l.ffn.down.bias = optional_tensor(p + "ffn_down.bias", {hp.n_embd});
    }
    check_tensors();
  }

 protected:
  void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     const LogitSelection& rows, float* logits) const override {
    forward_pre_norm(ops, kv, tokens, positions, rows, logits, layers_, rope_, Activation::SiLU, options_);
  }

 private:
  PreNormOptions options_;
};

}  // namespace

std::unique_ptr<Model> make_granite(gguf::File file, HParams hparams) {
  return std::make_unique<GraniteModel>(std::move(file), std::move(hparams));
}

}  // namespace okapi::model
