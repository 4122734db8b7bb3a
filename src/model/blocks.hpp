// The pieces every decoder here is built from: a pre-norm attention block
//   h = rms(x, norm); q, k, v = project(h) [+ bias, * scale]; optional per-head rms(q), rms(k);
//   rope(q), rope(k); append K/V; attention; optional rms(attention, sub_norm); o = project(Wo)
// and a gated FFN block
//   h = rms(x, norm); f = act(project(gate)) * project(up); optional rms(f, sub_norm); o = project(down)
// Each block leaves its output in Scratch::o; the architecture adds it to x (after its own
// post-norm, if any), so every forward_batch() still reads top to bottom.
#pragma once
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kernels.hpp"
#include "model/model.hpp"

namespace okapi::model {

struct MoeWeights;  // moe.hpp
struct MoeParts;

// A projection with its optional bias and optional one-element output scale (BitNet's `*.scale`).
// A low-rank projection (okapi compress) keeps W ≈ out · in as two weights: `in` (rank x n_in,
// tensor NAME.lr_in.weight) applied first, then `w` = out (n_out x rank, NAME.lr_out.weight).
// An in-factor shared by several projections is stored once; the others carry the metadata key
// kSharedInKeyPrefix + NAME naming its tensor.
inline constexpr std::string_view kSharedInKeyPrefix = "okapi.lr_in.";
// A fused tensor (phi3's attn_qkv, ffn_up) is used as row ranges named "<tensor>[<part>]"; the
// stored tensor of such a weight name is the name without the bracket (other names: unchanged).
inline std::string_view stored_tensor_name(std::string_view weight_name) {
  const size_t bracket = weight_name.find('[');
  return bracket == std::string_view::npos ? weight_name : weight_name.substr(0, bracket);
}
struct Projection {
  Weight w, bias, scale;
  Weight in;  // set only for a low-rank projection
};

struct AttentionWeights {
  Weight norm;            // attn_norm
  Projection q, k, v, o;  // attn_q, attn_k, attn_v, attn_output
  Weight q_norm, k_norm;  // per-head RMSNorm of q and k before RoPE (qwen3, gemma3); may be empty
  Weight sub_norm;        // RMSNorm of the attention output before Wo (BitNet); may be empty
};

struct FfnWeights {
  Weight norm;                 // ffn_norm
  Projection gate, up, down;   // ffn_gate, ffn_up, ffn_down
  Weight sub_norm;             // RMSNorm of act(gate) * up before Wdown (BitNet); may be empty
};

// The projection widths of one attention block.
struct AttentionDims {
  int64_t n_q, n_k, n_v, n_o;
};
AttentionDims attention_dims(const HParams& hp);

// Heads and head sizes from the hyper-parameters; `scale` multiplies q·k.
AttentionConfig attention_config(const HParams& hp, float scale);

// RoPE parameters from the hyper-parameters, as llama.cpp sets them up (YaRN only when the
// scaling type is "yarn").
kernels::RopeConfig rope_config(const HParams& hp, bool neox, const float* freq_factors);

// "blk.<il>.", the prefix of layer il's tensor names.
std::string layer_prefix(int64_t il);

// The FFN width as stored in blk.0.ffn_gate.weight, or `fallback` when that tensor is absent or
// not 2-D.
int64_t ffn_width_from_gate(const gguf::File& file, int64_t fallback);

// Activations of one forward pass over T tokens, reused across layers: views of the backend's
// workspace (Ops::workspace), which keeps them from one forward pass to the next.
struct Scratch {
  Scratch(Workspace& workspace, const HParams& hp, int64_t n_tokens, int64_t n_ff);
  int64_t n_tokens;
  std::span<float> x, h, o;     // residual stream, normed input, block output [T x n_embd]
  std::span<float> q, k, v;     // [T x n_q], [T x n_k], [T x n_v]
  std::span<float> attn;        // attention output [T x n_o]
  std::span<float> gate, up;    // [T x n_ff]
};

// y = W·x, then times the scale, then plus the bias (llama.cpp's order), each when present.
void project(Ops& ops, const Projection& p, const float* x, int64_t n_tokens, float* y);
// project() of one x by each of `n` projections into ys[i], the mat-muls as one Ops::matmul_group.
void project_group(Ops& ops, const Projection* const* ps, float* const* ys, size_t n, const float* x, int64_t n_tokens);

// The attention block of layer att.layer on s.x; writes s.o. Token t's K/V go to kv.store(t) and
// its attention reads that store: store_kv + attention once per run of tokens sharing a store.
// A rope with n_rot 0 leaves q and k unrotated (layers without rope: smollm3, granite).
void attention_block(Ops& ops, const KvBinding& kv, const HParams& hp, const AttentionWeights& w,
                     const kernels::RopeConfig& rope, const AttentionConfig& att, std::span<const int32_t> positions,
                     Scratch& s);

// attention_block() without its norm: the projections read `input` (T rows of n_embd) instead of
// rms(s.x) (post-norm encoders: bert). A non-causal `att` lets each query see its whole run.
void attention_core(Ops& ops, const KvBinding& kv, const HParams& hp, const AttentionWeights& w,
                    const kernels::RopeConfig& rope, const AttentionConfig& att, std::span<const int32_t> positions,
                    const float* input, Scratch& s);

// The gated FFN block on s.x; writes s.o.
void ffn_block(Ops& ops, const HParams& hp, const FfnWeights& w, Activation act, Scratch& s);

// One layer of a decoder whose blocks carry no post-norms (llama, qwen2/3, BitNet).
struct DecoderLayer {
  AttentionWeights attn;
  FfnWeights ffn;
};

// One layer of a decoder whose blocks carry post-norms (gemma2, gemma3): x += rms(block(x), post-norm).
struct PostNormLayer {
  AttentionWeights attn;
  Weight post_attn_norm;  // post_attention_norm
  FfnWeights ffn;
  Weight post_ffn_norm;   // post_ffw_norm
};

// logits = output · rms(x, output_norm) for the rows of s.x that `rows` selects, packed: the
// selected rows are normed into s.h (gathered), so the LM head multiplies only those.
void output_logits(Ops& ops, const HParams& hp, const Weight& output_norm, const Weight& output,
                   const LogitSelection& rows, Scratch& s, float* logits);

// The scales and rope pattern some llama-like decoders add to the plain graph (granite,
// smollm3); the defaults are the plain graph.
struct PreNormOptions {
  float embedding_scale = 1.0f;    // x = embd[tok] * embedding_scale
  float residual_scale = 1.0f;     // x += residual_scale * block output, for both blocks
  float attention_scale = 0.0f;    // multiplies q·k; 0: 1 / sqrt(head_dim)
  float logit_scale = 1.0f;        // logits * (1 / logit_scale)
  int64_t no_rope_layer_step = 0;  // > 0: layer il has no rope when (il + 1) % step == 0
};

// A decoder-only model made of these blocks: it owns the embedding, output norm and head, and
// looks a layer's block tensors up by the usual GGUF names.
class DecoderModel : public Model {
 protected:
  DecoderModel(gguf::File file, HParams hparams) : Model(std::move(file), std::move(hparams)) {}

  // Whether a projection's bias / scale is looked up, and whether a missing one is an error.
  enum class Part { None, Optional, Required };
  struct ProjectionParts {
    Part bias = Part::None;
    Part scale = Part::None;
  };
  struct AttentionParts {
    ProjectionParts qkv;     // attn_q, attn_k, attn_v
    ProjectionParts output;  // attn_output
    bool qk_norm = false;    // required attn_q_norm / attn_k_norm
    bool sub_norm = false;   // required attn_sub_norm
  };

  // token_embd, output_norm and output (token_embd when output.weight is absent: tied).
  void load_embeddings();
  // output_logits() for the rows `rows` selects, or with hidden output on (forward_sequences_hidden)
  // their rms(x, output_norm) rows written packed into `out` (the hidden states, no LM head).
  void output_rows(Ops& ops, const LogitSelection& rows, Scratch& s, float* out) const;
  bool has_hidden_states() const override { return true; }

  // A fused projection `prefix` (its rows: each part's, in order) as one projection per part: row
  // ranges of the weight (of the out-factor, the in-factor shared, for a low-rank one made by
  // okapi compress) and of the bias (phi3's attn_qkv and ffn_up, bert's attn_qkv).
  struct PartOf {
    Projection* projection;
    int64_t rows;
    const char* name;
  };
  void split(const std::string& prefix, std::initializer_list<PartOf> parts, Part bias);
  // Rows [first, first + count) of the 2-D weight `w` (elements, for a 1-D one) as a weight of its
  // own, named "<w's name>[part]" (stored_tensor_name: distinct names, for backends and compress
  // key on them). An empty `w` (a problem already recorded) gives an empty weight.
  Weight rows_of(const Weight& w, int64_t first, int64_t count, const char* part);
  // `prefix` + ".weight" of ggml shape `shape`, with its bias / scale as `parts` says.
  // register_w false: `w` (the whole weight, or the out-factor of a low-rank one) is not recorded
  // for the matmuls; the caller passes row ranges of it instead (phi3's fused tensors).
  Projection projection(const std::string& prefix, std::vector<int64_t> shape, ProjectionParts parts,
                        bool register_w = true);
  AttentionWeights attention_weights(const std::string& prefix, const AttentionParts& parts);
  FfnWeights ffn_weights(const std::string& prefix, int64_t n_ff, ProjectionParts parts, bool sub_norm);
  // Every layer of a post-norm decoder (gemma2, gemma3, gemma-embedding): attention as `attn` says,
  // post_attention_norm, the gated FFN (its width read from blk.0.ffn_gate), post_ffw_norm.
  std::vector<PostNormLayer> post_norm_layers(const AttentionParts& attn);
  // One flag per layer, set for a sliding-window layer, from `key`: an array of one bool per layer,
  // or a period n (absent: default_pattern) where layer il is windowed iff il % n < n - 1 (n = 0: all).
  std::vector<uint8_t> windowed_layers(const std::string& key, int64_t default_pattern) const;
  // A mixture-of-experts FFN: ffn_norm, the router, each expert sliced from the 3-D ffn_*_exps
  // tensors, and what `parts` adds (moe.hpp; defined in moe.cpp).
  MoeWeights moe_weights(const std::string& prefix, const MoeParts& parts);


  // The whole forward pass of a pre-norm decoder: x = embd[tok]; per layer x += attention(x) with
  // 1/sqrt(head_dim) scaling, x += ffn(x); then output_logits (with `options`' changes).
  void forward_pre_norm(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                        std::span<const int32_t> positions, const LogitSelection& rows, float* logits,
                        std::span<const DecoderLayer> layers, const kernels::RopeConfig& rope,
                        Activation ffn_activation, const PreNormOptions& options = {}) const;

  // Gemma's layers up to the final norm: x = embd[tok] * sqrt(n_embd); per layer x += rms(attention(x)),
  // x += rms(ffn(x)), the windowed layers (layer_window) with `local_rope`, the others with
  // `global_rope`. `att` carries the scale and soft-cap; its layer and window are set per layer.
  void forward_post_norm(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                         std::span<const int32_t> positions, std::span<const PostNormLayer> layers,
                         const kernels::RopeConfig& global_rope, const kernels::RopeConfig& local_rope,
                         AttentionConfig att, Activation ffn_activation, Scratch& s) const;

  Weight token_embd_, output_norm_, output_;

 private:
  std::deque<std::string> part_names_;  // the names of the row ranges (Weight::name views them)
};

}  // namespace okapi::model
