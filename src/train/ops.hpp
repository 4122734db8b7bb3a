// Each operation of the trainable model as a forward and an explicit backward, templated over
// the scalar type: training runs them in float, the gradient checks (tests/train) run the very
// same code in double against central finite differences. Layout: row-major, one row per token
// (n = batch * seq rows, the tokens of sequence b at rows [b * seq, (b + 1) * seq)).
// `pool` may be null. Results never depend on the pool size: every output element is computed
// by one task with a fixed summation order.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/float_gemm.hpp"

namespace okapi::train::ops {

// ---- linear layers: W is [out x in] row-major (nn.Linear) ----
// y[n x out] (+)= x[n x in] W^T (accumulate: the residual add, y = y + x W^T)
template <typename T>
void linear_forward(const T* x, int64_t n, int64_t in, const T* w, int64_t out, T* y, bool accumulate,
                    ThreadPool* pool);
// dx[n x in] (+)= dy[n x out] W
template <typename T>
void linear_backward_data(const T* dy, int64_t n, int64_t in, int64_t out, const T* w, T* dx, bool accumulate,
                          ThreadPool* pool);
// dw[out x in] += dy^T x (summed over the n rows in order)
template <typename T>
void linear_backward_weight(const T* dy, const T* x, int64_t n, int64_t in, int64_t out, T* dw, ThreadPool* pool);

// ---- RMSNorm: y = x * rstd * g, rstd = 1 / sqrt(mean(x^2) + eps) per row ----
template <typename T>
void rmsnorm_forward(const T* x, const T* g, int64_t n, int64_t d, T eps, T* y, T* rstd, ThreadPool* pool);
// dx (+)= d/dx, dg += d/dg (rows summed in order).
template <typename T>
void rmsnorm_backward(const T* x, const T* g, const T* rstd, const T* dy, int64_t n, int64_t d, T* dx,
                      bool accumulate, T* dg, ThreadPool* pool);

// ---- RoPE ----
// cos/sin of position * theta^(-2i / head_dim), [max_seq x head_dim / 2], computed in double.
template <typename T>
struct RopeTable {
  RopeTable(int64_t max_seq, int64_t head_dim, double theta);
  int64_t half = 0;
  std::vector<T> cos, sin;
};
// Rotates every head of every row in place: adjacent pairs (x[2i], x[2i+1]) or NeoX halves
// (x[i], x[i + head_dim / 2]); row r sits at position r % seq. inverse = rotate by -angle, which is
// the backward (the rotation is orthogonal).
template <typename T>
void rope(T* x, int64_t n, int64_t seq, int64_t n_heads, int64_t head_dim, const RopeTable<T>& table, bool neox,
          bool inverse, ThreadPool* pool);

// ---- causal self-attention (MHA / GQA) ----
struct AttentionShape {
  int64_t batch = 0, seq = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
};
// q [n x H*hd], k, v [n x KV*hd] -> out [n x H*hd]; probs [batch x H x seq x seq] keeps the
// softmax (zeros above the diagonal) for the backward. Query head h reads kv head h / (H / KV).
template <typename T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, T* probs, T* out,
                       ThreadPool* pool);
// dq, dk, dv overwritten. probs is consumed (overwritten with the score gradients).
template <typename T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, T* probs, const T* dout, T* dq,
                        T* dk, T* dv, ThreadPool* pool);

// ---- SwiGLU gate: out = silu(gate) * up ----
template <typename T>
void swiglu_forward(const T* gate, const T* up, int64_t count, T* out, ThreadPool* pool);
template <typename T>
void swiglu_backward(const T* gate, const T* up, const T* dout, int64_t count, T* dgate, T* dup, ThreadPool* pool);

// ---- embedding ----
template <typename T>
void embedding_forward(const T* table, const int32_t* tokens, int64_t n, int64_t d, T* out);
// dtable[token] += dout row, rows in order.
template <typename T>
void embedding_backward(const int32_t* tokens, const T* dout, int64_t n, int64_t d, T* dtable);

// ---- cross-entropy (mean over the rows whose target is >= 0; negative targets are ignored) ----
// Returns the SUM of the per-row losses log(sum exp z) - z[target] (stable: max-subtracted).
// When grad_scale != 0 the logits are replaced by grad_scale * (softmax - onehot(target)) (zero
// rows for ignored targets); the caller passes grad_scale = loss_scale / counted rows.
template <typename T>
double cross_entropy(T* logits, const int32_t* targets, int64_t n, int64_t vocab, T grad_scale, ThreadPool* pool);

// ---- b1.58 quantization (forward only; the backward is the straight-through identity) ----
// wq = clamp(round(w / s), -1, 1) * s, s = max(mean|w|, 1e-5); returns s.
template <typename T>
T ternarize_weights(const T* w, int64_t count, T* wq, ThreadPool* pool);
// Per row: xq = clamp(round(x * 127 / a), -128, 127) * a / 127, a = max(max|x|, 1e-5).
template <typename T>
void quantize_activations(const T* x, int64_t n, int64_t d, T* xq, ThreadPool* pool);

}  // namespace okapi::train::ops
