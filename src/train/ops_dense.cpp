// Linear layers, RMSNorm, RoPE, SwiGLU and the embedding: forward and backward (ops.hpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "train/ops.hpp"
#include "train/primitives.hpp"

namespace okapi::train::ops {

using detail::for_range;
using kernels::gemm;

template <typename T>
void linear_forward(const T* x, int64_t n, int64_t in, const T* w, int64_t out, T* y, bool accumulate,
                    ThreadPool* pool) {
  // y = x * W^T: B(p, j) = W[j][p].
  gemm<T>(n, out, in, {x, in, 1}, {w, 1, in}, y, out, accumulate, pool);
}

template <typename T>
void linear_backward_data(const T* dy, int64_t n, int64_t in, int64_t out, const T* w, T* dx, bool accumulate,
                          ThreadPool* pool) {
  gemm<T>(n, in, out, {dy, out, 1}, {w, in, 1}, dx, in, accumulate, pool);
}

template <typename T>
void linear_backward_weight(const T* dy, const T* x, int64_t n, int64_t in, int64_t out, T* dw, ThreadPool* pool) {
  // dW = dy^T x: A(i, p) = dy[p][i], reduction over the n rows.
  gemm<T>(out, in, n, {dy, 1, out}, {x, in, 1}, dw, in, true, pool);
}

template <typename T>
void rmsnorm_forward(const T* x, const T* g, int64_t n, int64_t d, T eps, T* y, T* rstd, ThreadPool* pool) {
  for_range(pool, n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * d;
      const double mean = detail::sum_squares(xr, d) / static_cast<double>(d);
      const T s = static_cast<T>(1.0 / std::sqrt(mean + static_cast<double>(eps)));
      rstd[r] = s;
      for (int64_t i = 0; i < d; ++i) y[r * d + i] = xr[i] * s * g[i];
    }
  });
}

template <typename T>
void rmsnorm_backward(const T* x, const T* g, const T* rstd, const T* dy, int64_t n, int64_t d, T* dx,
                      bool accumulate, T* dg, ThreadPool* pool) {
  // xhat = x * rstd; dx = rstd * (dy*g - xhat * mean(dy*g*xhat)).
  for_range(pool, n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * d;
      const T* dyr = dy + r * d;
      const T s = rstd[r];
      double dot = 0;
      for (int64_t i = 0; i < d; ++i) dot += static_cast<double>(dyr[i] * g[i]) * static_cast<double>(xr[i] * s);
      const T mean = static_cast<T>(dot / static_cast<double>(d));
      T* dxr = dx + r * d;
      for (int64_t i = 0; i < d; ++i) {
        const T v = s * (dyr[i] * g[i] - xr[i] * s * mean);
        dxr[i] = accumulate ? dxr[i] + v : v;
      }
    }
  });
  std::vector<T> sum(static_cast<size_t>(d), T(0));
  for (int64_t r = 0; r < n; ++r) {
    const T s = rstd[r];
    for (int64_t i = 0; i < d; ++i) sum[i] += dy[r * d + i] * (x[r * d + i] * s);
  }
  for (int64_t i = 0; i < d; ++i) dg[i] += sum[i];
}

template <typename T>
RopeTable<T>::RopeTable(int64_t max_seq, int64_t head_dim, double theta) : half(head_dim / 2) {
  cos.resize(static_cast<size_t>(max_seq * half));
  sin.resize(cos.size());
  for (int64_t pos = 0; pos < max_seq; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      const double angle = static_cast<double>(pos) * freq;
      cos[pos * half + i] = static_cast<T>(std::cos(angle));
      sin[pos * half + i] = static_cast<T>(std::sin(angle));
    }
  }
}

template <typename T>
void rope(T* x, int64_t n, int64_t seq, int64_t n_heads, int64_t head_dim, const RopeTable<T>& table, bool neox,
          bool inverse, ThreadPool* pool) {
  const int64_t half = head_dim / 2;
  for_range(pool, n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* c = table.cos.data() + (r % seq) * half;
      const T* sn = table.sin.data() + (r % seq) * half;
      for (int64_t h = 0; h < n_heads; ++h) {
        T* xh = x + (r * n_heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          T* a = neox ? xh + i : xh + 2 * i;
          T* b = neox ? xh + i + half : xh + 2 * i + 1;
          const T s = inverse ? -sn[i] : sn[i];
          const T x0 = *a, x1 = *b;
          *a = x0 * c[i] - x1 * s;
          *b = x0 * s + x1 * c[i];
        }
      }
    }
  });
}

template <typename T>
void swiglu_forward(const T* gate, const T* up, int64_t count, T* out, ThreadPool* pool) {
  for_range(pool, (count + 4095) / 4096, [&](int64_t begin, int64_t end) {
    const int64_t first = begin * 4096, last = std::min(count, end * 4096);
    detail::swiglu(gate + first, up + first, last - first, out + first);
  });
}

template <typename T>
void swiglu_backward(const T* gate, const T* up, const T* dout, int64_t count, T* dgate, T* dup, ThreadPool* pool) {
  // silu(g) = g * sig(g); silu'(g) = sig(g) * (1 + g * (1 - sig(g))).
  for_range(pool, (count + 4095) / 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * 4096; i < std::min(count, end * 4096); ++i) {
      const T g = gate[i];
      const T sig = T(1) / (T(1) + std::exp(-g));
      dup[i] = dout[i] * g * sig;
      dgate[i] = dout[i] * up[i] * (sig * (T(1) + g * (T(1) - sig)));
    }
  });
}

template <typename T>
void embedding_forward(const T* table, const int32_t* tokens, int64_t n, int64_t d, T* out) {
  for (int64_t r = 0; r < n; ++r) {
    const T* row = table + static_cast<int64_t>(tokens[r]) * d;
    for (int64_t i = 0; i < d; ++i) out[r * d + i] = row[i];
  }
}

template <typename T>
void embedding_backward(const int32_t* tokens, const T* dout, int64_t n, int64_t d, T* dtable) {
  for (int64_t r = 0; r < n; ++r) {
    T* row = dtable + static_cast<int64_t>(tokens[r]) * d;
    for (int64_t i = 0; i < d; ++i) row[i] += dout[r * d + i];
  }
}

#define OKAPI_TRAIN_DENSE_OPS(T)                                                                                   \
  template void linear_forward<T>(const T*, int64_t, int64_t, const T*, int64_t, T*, bool, ThreadPool*);           \
  template void linear_backward_data<T>(const T*, int64_t, int64_t, int64_t, const T*, T*, bool, ThreadPool*);   \
  template void linear_backward_weight<T>(const T*, const T*, int64_t, int64_t, int64_t, T*, ThreadPool*);        \
  template void rmsnorm_forward<T>(const T*, const T*, int64_t, int64_t, T, T*, T*, ThreadPool*);                  \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, T*, bool, T*,       \
                                    ThreadPool*);                                                                  \
  template struct RopeTable<T>;                                                                                    \
  template void rope<T>(T*, int64_t, int64_t, int64_t, int64_t, const RopeTable<T>&, bool, bool, ThreadPool*);    \
  template void swiglu_forward<T>(const T*, const T*, int64_t, T*, ThreadPool*);                                   \
  template void swiglu_backward<T>(const T*, const T*, const T*, int64_t, T*, T*, ThreadPool*);                    \
  template void embedding_forward<T>(const T*, const int32_t*, int64_t, int64_t, T*);                             \
  template void embedding_backward<T>(const int32_t*, const T*, int64_t, int64_t, T*);

OKAPI_TRAIN_DENSE_OPS(float)
OKAPI_TRAIN_DENSE_OPS(double)

}  // namespace okapi::train::ops
