// The trainable Llama-2 model (seed 002): configs, the flat parameter layout, and a fp32
// forward + explicit backward over micro-batches of B sequences of T tokens.
//
// Block (llama2.c / PyTorch order): h = rms(x)*attn_norm; q,k,v = Wq h, Wk h, Wv h; RoPE on q,k;
// causal softmax(q·k / sqrt(head_dim)) · v (GQA: query head h reads kv head h / (n_heads /
// n_kv_heads)); [ternary: rms(attn)*attn_sub_norm]; x += Wo attn; h = rms(x)*ffn_norm;
// f = silu(W1 h) * (W3 h); [ternary: rms(f)*ffn_sub_norm]; x += W2 f. Then rms(x)*output_norm,
// logits = Wout x (Wout = token_embd when tied), mean cross-entropy over the targets.
//
// RoPE: llama (float) models rotate adjacent pairs (x[2i], x[2i+1]), as llama.cpp's `llama`
// arch; ternary models rotate NeoX halves (x[i], x[i + d/2]), as llama.cpp's `bitnet` arch, so
// each exports to an architecture the engine runs without permuting weights.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace okapi {
class ThreadPool;
}

namespace okapi::train {

// A projection stored as two trainable factors W ~ out · in (okapi compress's layout): `in` is
// rank x n_in, `out` is n_out x rank, y = out · (in · x).
struct LowRankProjection {
  std::string name;  // the projection, e.g. "blk.3.attn_q"
  int64_t rank = 0;
  // The tensor holding the in-factor: "<name>.lr_in.weight", or one shared with other
  // projections (the source model's okapi.lr_in.<name> key names it).
  std::string in_factor;
  bool shares_in_factor() const { return in_factor != name + ".lr_in.weight"; }
};

struct ModelConfig {
  std::string name = "custom";
  int64_t dim = 0;
  int64_t hidden_dim = 0;  // FFN width
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t vocab_size = 0;
  int64_t seq_len = 0;  // the longest context (RoPE table size, exported context_length)
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  bool tied_embeddings = true;
  bool ternary = false;  // b1.58 QAT: ternary projections, 8-bit activations, sub-norms, NeoX rope
  // Projections kept as low-rank factors (a compressed model fine-tuned with --init-from); the
  // others are dense. Float models only.
  std::vector<LowRankProjection> low_rank;
  const LowRankProjection* find_low_rank(std::string_view projection) const;  // null: dense
  int64_t head_dim() const { return dim / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  // Throws okapi::Error naming the first bad field (non-positive sizes, dim % n_heads,
  // n_heads % n_kv_heads, odd head_dim, a low-rank entry that names no projection, has a rank
  // outside [1, min(n_in, n_out)] or sits in a ternary model).
  void validate() const;
};

// The llama2.c shapes: stories260K (dim 64, hidden 172, 5 layers, 8 heads, 4 kv heads, seq 512),
// stories15M (288, 768, 6, 6, 6, 256), stories42M (512, 1376, 8, 8, 8, 1024), stories110M (768,
// 2048, 12, 12, 12, 1024). vocab_size comes from the tokenizer. Unknown name: an error listing
// the known ones.
ModelConfig config_by_name(std::string_view name, int64_t vocab_size);
std::span<const std::string_view> config_names();

enum class TensorRole { Embedding, Norm, Matrix, Output };

// One tensor inside the flat parameter buffer. Matrices are row-major [rows = n_out][cols = n_in]
// (PyTorch nn.Linear layout = ggml ne [cols, rows]); a norm is 1 x dim. Names are the GGUF ones:
// token_embd.weight, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, attn_sub_norm,
// ffn_norm, ffn_gate (W1), ffn_down (W2), ffn_up (W3), ffn_sub_norm}.weight, output_norm.weight,
// output.weight (untied only). Sub-norms exist only in ternary models. A low-rank projection P
// has P.lr_in.weight (rank x n_in; or its shared in-factor's name) and P.lr_out.weight
// (n_out x rank) instead of P.weight, both Matrix slots.
struct TensorSlot {
  std::string name;
  TensorRole role = TensorRole::Matrix;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t offset = 0;  // in floats
  size_t size() const { return static_cast<size_t>(rows * cols); }
};

// Where a projection's weights sit in the buffer: rank 0, the dense matrix at `weight`; else the
// out-factor (n_out x rank) at `weight` and the in-factor (rank x n_in) at `in`.
struct ProjectionSlots {
  size_t weight = 0;
  size_t in = 0;
  int64_t rank = 0;
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelConfig& config);  // validates the config
  const std::vector<TensorSlot>& slots() const { return slots_; }
  size_t total() const { return total_; }  // floats
  const TensorSlot& find(std::string_view name) const;  // throws okapi::Error when absent
  // A projection by name ("blk.3.attn_q"); throws okapi::Error when absent.
  ProjectionSlots projection(std::string_view name) const;

 private:
  std::vector<TensorSlot> slots_;
  std::vector<std::pair<std::string, ProjectionSlots>> projections_;
  size_t total_ = 0;
};

// The projection kinds of a block, in layout order, and the (n_out, n_in) of each.
std::span<const std::string_view> projection_kinds();
std::pair<int64_t, int64_t> projection_shape(const ModelConfig& config, std::string_view kind);

enum class Init {
  Xavier,   // seed 002: uniform(+-sqrt(6 / (fan_in + fan_out))) matrices, norms 1
  Llama2c,  // normal(0, 0.02), wo/W2 normal(0, 0.02 / sqrt(2 n_layers)), norms 1
};
// Deterministic in (layout, init, seed) on every machine (own RNG and transforms, no libm-dependent
// distribution classes).
void initialize(const ParameterLayout& layout, Init init, uint64_t seed, std::span<float> params);

// b1.58 absmean ternarization of one weight matrix, the rule both QAT and the exporter use:
// scale = mean|w| (clamped below by 1e-5), q = clamp(round(w / scale), -1, 1); w ~ q * scale.
float ternarize(std::span<const float> w, std::span<int8_t> q);

// Forward/backward over one micro-batch. Keeps its own activation buffers (resized on demand),
// so one instance is reused across steps. Not thread-safe; uses `pool` for its matmuls.
class Transformer {
 public:
  Transformer(const ModelConfig& config, ThreadPool* pool);
  ~Transformer();
  const ModelConfig& config() const;
  const ParameterLayout& layout() const;

  // Weight gradients dW = dy^T x on a second thread beside the backward data path (seed 002's
  // overlap); off: computed inline. Results are bit-identical either way.
  void set_overlap_weight_gradients(bool on);

  // tokens/targets: batch * seq ids (row-major [batch][seq]), seq <= config.seq_len. Returns the
  // mean cross-entropy over all targets and ADDS loss_scale * d(mean loss)/d(params) into
  // grads (so micro-batches accumulate with loss_scale = 1 / accum_steps). Targets < 0 are
  // ignored: not counted in the mean (none counted: loss 0 and no gradient).
  // Bit-identical for a given input whatever the pool size.
  float forward_backward(std::span<const float> params, std::span<const int32_t> tokens,
                         std::span<const int32_t> targets, int64_t batch, int64_t seq, float loss_scale,
                         std::span<float> grads);
  // Mean cross-entropy only (evaluation).
  float forward_loss(std::span<const float> params, std::span<const int32_t> tokens,
                     std::span<const int32_t> targets, int64_t batch, int64_t seq);
  // Logits [seq x vocab] of one sequence (sampling, export checks).
  void forward_logits(std::span<const float> params, std::span<const int32_t> tokens, std::span<float> logits);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace okapi::train
