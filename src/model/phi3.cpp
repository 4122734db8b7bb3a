// phi3 (Phi-3, Phi-3.5, Phi-4-mini), as llama.cpp builds it: the llama graph (RMSNorm, GQA,
// SwiGLU) with
//   - a fused attn_qkv [n_embd, n_q + n_k + n_v] (q rows, then k, then v; separate attn_q/k/v are
//     accepted too) and a fused ffn_up [n_embd, 2 n_ff] whose first n_ff rows are the gate (silu)
//     and the last n_ff the up projection (ggml_swiglu). Both are split here into row ranges of
//     the stored tensor (no copy), so the forward pass is the llama one;
//   - NEOX rope over the first rope.dimension_count dims of each head (partial rotary);
//   - LongRoPE: rope_factors_long.weight / rope_factors_short.weight divide the rope
//     frequencies; llama.cpp takes the long ones when the context of a sequence (the KV store's
//     n_ctx here) exceeds rope.scaling.original_context_length, else the short ones. The
//     converter's attention factor (rope.scaling.attn_factor) scales cos/sin in both cases.
// attention.sliding_window is ignored, as llama.cpp does for phi3 ("Phi SWA is currently
// disabled"): every layer attends to the whole context, so the logits stay llama.cpp's.
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/architectures.hpp"
#include "model/blocks.hpp"

namespace okapi::model {

namespace {

class Phi3Model final : public DecoderModel {
 public:
  Phi3Model(gguf::File file, HParams hparams) : DecoderModel(std::move(file), std::move(hparams)) {
    const HParams& hp = hparams_;
    load_embeddings();
    int64_t n_ff = hp.n_ff;
    if (n_ff == 0) {  // from the fused up tensor when the metadata lacks it
      if (const gguf::TensorInfo* up = file_.find_tensor("blk.0.ffn_up.weight"); up && up->shape.size() == 2)
        n_ff = up->shape[1] / 2;
    }
    for (int64_t il = 0; il < hp.n_layer; ++il) layers_.push_back(layer(layer_prefix(il), n_ff));
    const std::vector<int64_t> factors_shape = {hp.n_rot / 2};
    rope_long_ = optional_tensor("rope_factors_long.weight", factors_shape);
    rope_short_ = optional_tensor("rope_factors_short.weight", factors_shape);
    check_tensors();
    long_rope_ = rope_config(hp, /*neox=*/true, rope_long_ ? rope_long_.f32() : nullptr);
    short_rope_ = rope_config(hp, /*neox=*/true, rope_short_ ? rope_short_.f32() : nullptr);
  }

  bool can_skip_layers() const override { return true; }  // forward_pre_norm honours it
  bool supports_stages() const override { return true; }    // so does its stage range

 protected:
  void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     const LogitSelection& rows, float* logits) const override {
    forward_pre_norm(ops, kv, tokens, positions, rows, logits, layers_, rope_for(kv, tokens.size()), Activation::SiLU);
  }

 private:
  DecoderLayer layer(const std::string& p, int64_t n_ff) {
    const HParams& hp = hparams_;
    const AttentionDims d = attention_dims(hp);
    DecoderLayer l;
    const bool fused_qkv = file_.find_tensor(p + "attn_qkv.weight") || file_.find_tensor(p + "attn_qkv.lr_out.weight");
    if (!fused_qkv) {
      l.attn = attention_weights(p, {});
    } else {
      l.attn.norm = tensor(p + "attn_norm.weight", {hp.n_embd});
      split(p + "attn_qkv", {{&l.attn.q, d.n_q, "q"}, {&l.attn.k, d.n_k, "k"}, {&l.attn.v, d.n_v, "v"}},
            Part::Optional);
      l.attn.o = projection(p + "attn_output", {d.n_o, hp.n_embd}, {});
    }
    l.ffn.norm = tensor(p + "ffn_norm.weight", {hp.n_embd});
    split(p + "ffn_up", {{&l.ffn.gate, n_ff, "gate"}, {&l.ffn.up, n_ff, "up"}}, Part::None);
    l.ffn.down = projection(p + "ffn_down", {n_ff, hp.n_embd}, {});
    return l;
  }

  // The rope whose LongRoPE factors fit the context of the stores this batch runs in.
  const kernels::RopeConfig& rope_for(const KvBinding& kv, size_t n_tokens) const {
    const auto is_long = [&](const kv::KvStore& store) { return store.n_ctx() > hparams_.rope_n_ctx_orig; };
    const bool long_context = is_long(kv.store(0));
    kv.for_each_run(n_tokens, [&](kv::KvStore& store, size_t, size_t) {
      if (is_long(store) != long_context)
        throw_error("phi3: one batch holds sequences whose contexts ({} and {}) pick different LongRoPE factors "
                    "(original context {})",
                    kv.store(0).n_ctx(), store.n_ctx(), hparams_.rope_n_ctx_orig);
    });
    return long_context ? long_rope_ : short_rope_;
  }

  std::vector<DecoderLayer> layers_;
  Weight rope_long_, rope_short_;
  kernels::RopeConfig long_rope_, short_rope_;
};

}  // namespace

std::unique_ptr<Model> make_phi3(gguf::File file, HParams hparams) {
  return std::make_unique<Phi3Model>(std::move(file), std::move(hparams));
}

}  // namespace okapi::model
