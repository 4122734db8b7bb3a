// The operations a forward pass is written against. Architectures (llama.cpp, qwen2.cpp, ...)
// call only these; a backend (CPU float, exact integer, GPU, low-rank) implements them.
// Activations are float32, row-major, one row per token.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "kv/cache_type.hpp"
#include "kv/exact_store.hpp"
#include "kv/kv_store.hpp"

namespace okapi::kernels {
struct RopeConfig;  // kernels/kernels.hpp: what rope() rotates by, in ggml_rope_ext's terms
}

namespace okapi::model {

// A typed view of one GGUF tensor inside the mapped file (no copy). For a 2-D weight, n_out rows
// of n_in elements (ggml ne = [n_in, n_out]); a 1-D tensor (norm, bias) has n_out == 1.
struct Weight {
  std::string_view name;
  DType type = DType::F32;
  const void* data = nullptr;
  int64_t n_in = 0;
  int64_t n_out = 0;
  // Its index in its model's WeightSet::matmul (-1: in none): where a backend that prepared the
  // set keeps its copy of it, found without a search on every matmul.
  int32_t matmul_index = -1;
  // Expert e of a 3-D MoE weight ([n_in, n_out, n_expert], `name` the whole tensor's): e; else -1.
  // Lets an observer (compress::ObservingOps) tell the experts of one tensor apart.
  int32_t expert = -1;
  explicit operator bool() const { return data != nullptr; }
  const float* f32() const { return static_cast<const float*>(data); }  // 1-D tensors are F32
};

// What a backend prepares at load (Ops::prepare): every weight the model passes to matmul, and
// the file bytes they lie in.
struct WeightSet {
  std::span<const uint8_t> file;  // the bytes holding the weights (may be empty)
  bool file_is_mapped = false;    // a read-only file mapping: pages of a weight the backend has
                                  // copied may be dropped (they map back from the file if read)
  std::vector<Weight> matmul;     // each once, matmul[i].matmul_index == i; one without data
                                  // belongs to another pipeline stage (Model::set_stage) and is
                                  // neither prepared nor used
};

// The KV cache a backend is asked for: the store of the cache types, or in exact mode the exact
// store that computes q.k as `exact_scores` says (the cache types then unused).
struct KvTypes {
  kv::CacheTypes cache;
  kv::ExactScores exact_scores = kv::ExactScores::Direct;
};

// One weight of a group of matmuls that share their input (Q/K/V, gate/up): y = W·x.
struct MatmulTarget {
  const Weight* w = nullptr;
  float* y = nullptr;
};

// Float buffers a forward pass reuses from call to call: slot i grows to the largest size asked
// for and is kept, so once a batch of the largest size has run, later passes allocate nothing.
// One forward pass at a time per backend (as the backends' other state).
class Workspace {
 public:
  float* floats(size_t slot, size_t count);
  size_t bytes() const;  // what the slots hold now
 private:
  std::vector<std::vector<float>> slots_;
};

// Gated FFN: act(gate) * up. GELU is ggml's CPU GELU (tanh approximation looked up in an fp16
// table, as llama.cpp); GELUF32 is the same formula evaluated in float per element, as ik_llama.cpp's
// fused up-gate kernels do (gemma3's goldens come from ik_llama).
enum class Activation { SiLU, GELU, ReLU2, GELUF32 };

struct AttentionConfig {
  int64_t layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;  // GQA: query head h reads kv head h / (n_head / n_head_kv)
  int64_t head_dim_k = 0;
  int64_t head_dim_v = 0;
  float scale = 1.0f;           // applied to q·k before the softmax
  int64_t sliding_window = 0;   // > 0: key j visible from query i iff 0 <= i - j < window (non-causal:
                                // |i - j| <= window / 2, as attention_core arranges; backends see the former)
  float softcap = 0.0f;         // > 0: score = softcap * tanh(score * scale * (1 / softcap)): the scale
                                // first (gemma2 scales q), then the cap, as llama.cpp's graph
  // gpt-oss: attention sinks, one logit per query head (n_head values; null: none). Head h's
  // softmax denominator gains exp(sinks[h]) (a logit compared unscaled with the scaled scores,
  // as ggml_soft_max_ext / ggml_flash_attn_ext_add_sinks); the sink has no value row.
  const float* sinks = nullptr;
  // false: every query of a run sees every key of its run (encoders). Backends read a query's
  // position only for what it sees, so attention_block passes each query of a non-causal run the
  // run's last position; a backend need not look at this flag.
  bool causal = true;
};

// The queries of one attention() call: tokens at `positions` over the store `kv` (already holding
// their K/V), q [n x n_head x head_dim_k] in, out [n x n_head x head_dim_v] written.
struct AttentionRun {
  const kv::KvStore* kv = nullptr;
  const float* q = nullptr;
  std::span<const int32_t> positions;
  float* out = nullptr;
};

// Mixture of experts (moe.hpp): how a token's router logits pick its experts and weigh them, as
// llama.cpp's build_moe_ffn does.
enum class MoeGating {
  Softmax,            // p = softmax(logits); top-k of p (+ selection bias); weights from p
  Sigmoid,            // p = sigmoid(logits); likewise
  SoftmaxOfSelected,  // top-k of the logits; weights = softmax over those k logits (gpt-oss)
};
struct MoeRouting {
  int64_t n_expert = 0;
  int64_t n_used = 0;               // experts per token (top-k), 1 <= n_used <= n_expert
  MoeGating gating = MoeGating::Softmax;
  bool normalize_weights = false;   // weights /= max(sum of the k weights, 2^-14)
  float weights_scale = 0.0f;       // weights *= scale unless it is 0 or 1
  const float* selection_bias = nullptr;  // [n_expert] added to p for the choice only (deepseek2's exp_probs_b)
};

// One expert of a MoE block over its own input rows: y = down · (act(gate · x) * (up · x)), with
// g and u [n_tokens x gate.n_out] scratch (g ends holding the activation).
struct ExpertRun {
  const Weight* gate = nullptr;
  const Weight* up = nullptr;
  const Weight* down = nullptr;
  const float* x = nullptr;
  int64_t n_tokens = 0;
  float* g = nullptr;
  float* u = nullptr;
  float* y = nullptr;
};

// A backend. Besides the operations it owns what it computes with: the copies of the weights it
// makes at load (prepare), the forward pass's buffers (workspace) and the KV stores (make_kv).
class Ops {
 public:
  virtual ~Ops() = default;

  // Load time: repack / convert / upload each weight once into memory the backend owns. Weights
  // never prepared still work (converted per call). The weights must stay valid, unchanged and
  // at their addresses for as long as this backend is used with them. A backend prepares one
  // set: preparing another replaces what it made of the first.
  virtual void prepare(const WeightSet& weights) = 0;
  // A KV store this backend's attention can read (throws okapi::Error on an unknown type).
  virtual std::unique_ptr<kv::KvStore> make_kv(const kv::KvShape& shape, const KvTypes& types) = 0;
  Workspace& workspace() { return workspace_; }

  // y[t][o] = W[o] · x[t] for t < n_tokens; x has w.n_in columns, y w.n_out.
  virtual void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y) = 0;
  // matmul() for each target, all with the same x (every w has the same n_in). A backend may
  // prepare x once for the group and run it as one parallel loop; each y is the same bits as
  // matmul() would give. The default calls matmul() per target.
  virtual void matmul_group(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens);
  // A gated FFN's input side: gate_y = act(gate · x) * (up · x), with up_y the up projection
  // (scratch of the same size). Same bits as matmul_group({gate, up}) then glu(); a backend may
  // run it as one pass. The default does exactly those two steps.
  virtual void matmul_glu(Activation act, const Weight& gate, const Weight& up, const float* x, int64_t n_tokens,
                          float* gate_y, float* up_y);
  // x[t][i] += bias[i]; bias is a 1-D F32 tensor of n elements.
  virtual void add_bias(const Weight& bias, float* x, int64_t n_tokens) = 0;
  // Each of n_rows rows of n: y = x / sqrt(mean(x^2) + eps) * weight (weight may be empty).
  // x and y may alias.
  virtual void rmsnorm(const float* x, const Weight& weight, int64_t n_rows, int64_t n, float eps, float* y) = 0;
  // Rotates x[t][n_heads][head_dim] in place, token t at positions[t].
  virtual void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, std::span<const int32_t> positions,
                    const kernels::RopeConfig& config) = 0;
  // Writes k[t] (n_head_kv * head_dim_k) and v[t] into the store at positions[t].
  virtual void store_kv(kv::KvStore& kv, int64_t layer, const float* k, const float* v,
                        std::span<const int32_t> positions) = 0;
  // Causal attention for queries q[t][n_head][head_dim_k] at positions[t] over the cells
  // [0, positions[t]] of the store (already holding this batch's K/V); out[t][n_head][head_dim_v].
  virtual void attention(const kv::KvStore& kv, const AttentionConfig& config, const float* q,
                         std::span<const int32_t> positions, float* out) = 0;
  // attention() for each run, each over its own store (several sequences in one pass: a decode
  // step is one token per store). A backend may spread all the runs' work over its threads at
  // once; each out is the same bits as attention() of its run alone. The default calls
  // attention() per run. forward() calls only attention(); forward_sequences() calls this, so a
  // backend that wraps attention() (to observe it) wraps this too.
  virtual void attention_runs(std::span<const AttentionRun> runs, const AttentionConfig& config);
  // LayerNorm (llama.cpp's build_norm LLM_NORM: ggml_norm, then ggml_mul by weight, ggml_add of
  // bias), each of n_rows rows of n: y = (x - mean) / sqrt(var + eps) * weight + bias, the mean
  // and variance summed in double as ggml_compute_forward_norm_f32 does (the variance in 16-lane
  // float partials, as its AVX-512 build). weight and bias may be empty. x and y may alias.
  virtual void layernorm(const float* x, const Weight& weight, const Weight& bias, int64_t n_rows, int64_t n,
                         float eps, float* y);
  // A plain (non-gated) activation over n values: out = act(x). GELU as glu()'s (ggml's fp16
  // table). out may alias x.
  virtual void activation(Activation act, const float* x, int64_t n, float* out);
  // out = act(gate) * up, n_rows rows of n.
  virtual void glu(Activation act, const float* gate, const float* up, int64_t n_rows, int64_t n, float* out) = 0;
  // Elementwise over n values; out may alias an input.
  virtual void add(const float* a, const float* b, int64_t n, float* out) = 0;
  virtual void mul(const float* a, const float* b, int64_t n, float* out) = 0;
  virtual void scale(const float* a, float s, int64_t n, float* out) = 0;
  // out[t] = dequantized row ids[t] of table (an embedding matrix of n_out rows of n_in).
  virtual void get_rows(const Weight& table, std::span<const int32_t> ids, float* out) = 0;
  // Soft-capping (gemma2's final logits), in place over n values, in ggml's steps:
  // x = cap * tanh(x * (1 / cap)). The default uses std::tanh (ggml's tanhf).
  virtual void softcap(float* x, int64_t n, float cap);

  // ---- mixture of experts (moe.hpp); the defaults compute in float with detmath's exp, the same
  // bits on every build (exact mode uses them as they are) ----
  // Each token's experts from its router logits [n_tokens x n_expert]: selected [n_tokens x n_used]
  // in decreasing order of their selection score (ties: lower index first), weights likewise.
  virtual void route_experts(const float* logits, int64_t n_tokens, const MoeRouting& routing, int32_t* selected,
                             float* weights);
  // Each run's expert FFN (every gate the same n_in, every down too). A backend may run all the
  // experts' matmuls as one parallel loop; each y is the bits of matmul_glu then matmul of its run
  // alone, which the default does run by run.
  virtual void expert_ffns(Activation act, std::span<const ExpertRun> runs);
  // out[i] = x[rows[i]], rows of n values.
  virtual void gather_rows(const float* x, int64_t n, std::span<const int32_t> rows, float* out);
  // out[t] = sum over j < n_used, in order j = 0, 1, ..., of weights[t][j] * y[rows[t][j]] (rows of
  // n values; rows and weights [n_tokens x n_used]). A token's sum does not depend on the others.
  virtual void combine_experts(const float* y, int64_t n, std::span<const int32_t> rows, const float* weights,
                               int64_t n_used, int64_t n_tokens, float* out);
  // out[t] += sigmoid(gate[t]) * y[t], n_tokens rows of n (qwen2moe's gated shared expert; the
  // sigmoid as llama.cpp writes it: silu(g) / g).
  virtual void add_sigmoid_gated(const float* y, const float* gate, int64_t n_tokens, int64_t n, float* out);
  // gpt-oss's clamped SwiGLU: x = min(gate, limit), u = clamp(up, -limit, limit),
  // out = x * sigmoid(alpha * x) * (u + 1); n_rows rows of n; out may alias gate.
  virtual void swiglu_oai(const float* gate, const float* up, int64_t n_rows, int64_t n, float alpha, float limit,
                          float* out);

 private:
  Workspace workspace_;
};

}  // namespace okapi::model
