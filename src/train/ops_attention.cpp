// Causal softmax attention, forward and backward, per (sequence, head) through the training
// GEMM on the calling thread; the pool spreads (sequence, head) pairs. GQA: query head h reads
// kv head h / (H / KV); the backward runs per (sequence, kv head) so that the gradients of a
// shared kv head are summed over its query heads in a fixed order.
#include <cmath>
#include <vector>

#include "train/ops.hpp"
#include "train/primitives.hpp"

namespace okapi::train::ops {

using kernels::gemm;

template <typename T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, T* probs, T* out,
                       ThreadPool* pool) {
  const int64_t t_len = s.seq, hd = s.head_dim, qd = s.n_heads * hd, kvd = s.n_kv_heads * hd;
  const int64_t group = s.n_heads / s.n_kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  detail::for_range(pool, s.batch * s.n_heads, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / s.n_heads, h = task % s.n_heads, kvh = h / group;
      const T* qh = q + b * t_len * qd + h * hd;
      const T* kh = k + b * t_len * kvd + kvh * hd;
      const T* vh = v + b * t_len * kvd + kvh * hd;
      T* p = probs + task * t_len * t_len;
      gemm<T>(t_len, t_len, hd, {qh, qd, 1}, {kh, 1, kvd}, p, t_len, false, nullptr);  // q k^T
      for (int64_t i = 0; i < t_len; ++i) {
        T* row = p + i * t_len;
        T max = row[0] * scale;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] *= scale;
          max = row[j] > max ? row[j] : max;
        }
        const T inv = static_cast<T>(1.0 / detail::exp_shifted(row, i + 1, max));
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        for (int64_t j = i + 1; j < t_len; ++j) row[j] = T(0);
      }
      gemm<T>(t_len, hd, t_len, {p, t_len, 1}, {vh, kvd, 1}, out + b * t_len * qd + h * hd, qd, false, nullptr);
    }
  });
}

template <typename T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, T* probs, const T* dout, T* dq,
                        T* dk, T* dv, ThreadPool* pool) {
  const int64_t t_len = s.seq, hd = s.head_dim, qd = s.n_heads * hd, kvd = s.n_kv_heads * hd;
  const int64_t group = s.n_heads / s.n_kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  detail::for_range(pool, s.batch * s.n_kv_heads, [&](int64_t begin, int64_t end) {
    thread_local std::vector<T> dp;
    dp.resize(static_cast<size_t>(t_len * t_len));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / s.n_kv_heads, kvh = task % s.n_kv_heads;
      const T* kh = k + b * t_len * kvd + kvh * hd;
      const T* vh = v + b * t_len * kvd + kvh * hd;
      T* dkh = dk + b * t_len * kvd + kvh * hd;
      T* dvh = dv + b * t_len * kvd + kvh * hd;
      for (int64_t i = 0; i < t_len; ++i) {
        for (int64_t j = 0; j < hd; ++j) dkh[i * kvd + j] = dvh[i * kvd + j] = T(0);
      }
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const T* qh = q + b * t_len * qd + h * hd;
        const T* doh = dout + b * t_len * qd + h * hd;
        T* p = probs + (b * s.n_heads + h) * t_len * t_len;
        gemm<T>(t_len, t_len, hd, {doh, qd, 1}, {vh, 1, kvd}, dp.data(), t_len, false, nullptr);  // dP = dO v^T
        gemm<T>(t_len, hd, t_len, {p, 1, t_len}, {doh, qd, 1}, dvh, kvd, true, nullptr);          // dV += P^T dO
        // dS = P * (dP - sum_j P dP) * scale, in place of P (causal: j <= i).
        for (int64_t i = 0; i < t_len; ++i) {
          T* row = p + i * t_len;
          const T* drow = dp.data() + i * t_len;
          double dot = 0;
          for (int64_t j = 0; j <= i; ++j) dot += static_cast<double>(row[j]) * static_cast<double>(drow[j]);
          const T d = static_cast<T>(dot);
          for (int64_t j = 0; j <= i; ++j) row[j] = row[j] * (drow[j] - d) * scale;
        }
        gemm<T>(t_len, hd, t_len, {p, t_len, 1}, {kh, kvd, 1}, dq + b * t_len * qd + h * hd, qd, false,
                nullptr);                                                                   // dQ = dS k
        gemm<T>(t_len, hd, t_len, {p, 1, t_len}, {qh, qd, 1}, dkh, kvd, true, nullptr);  // dK += dS^T q
      }
    }
  });
}

template void attention_forward<float>(const AttentionShape&, const float*, const float*, const float*, float*,
                                       float*, ThreadPool*);
template void attention_forward<double>(const AttentionShape&, const double*, const double*, const double*, double*,
                                        double*, ThreadPool*);
template void attention_backward<float>(const AttentionShape&, const float*, const float*, const float*, float*,
                                        const float*, float*, float*, float*, ThreadPool*);
template void attention_backward<double>(const AttentionShape&, const double*, const double*, const double*,
                                         double*, const double*, double*, double*, double*, ThreadPool*);

}  // namespace okapi::train::ops
