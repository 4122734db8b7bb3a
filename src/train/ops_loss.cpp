// Cross-entropy and the b1.58 quantizers (ops.hpp), and the exporter's ternarize() (model.hpp),
// which shares the absmean rule with the quantization-aware forward.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "train/model.hpp"
#include "train/ops.hpp"
#include "train/primitives.hpp"

namespace okapi::train::ops {

using detail::for_range;

template <typename T>
double cross_entropy(T* logits, const int32_t* targets, int64_t n, int64_t vocab, T grad_scale, ThreadPool* pool) {
  std::vector<double> row_loss(static_cast<size_t>(n), 0.0);
  for_range(pool, n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* row = logits + r * vocab;
      const int32_t target = targets[r];
      if (target < 0) {
        if (grad_scale != T(0)) std::fill(row, row + vocab, T(0));
        continue;
      }
      T max = row[0];
      for (int64_t j = 1; j < vocab; ++j) max = row[j] > max ? row[j] : max;
      const T z_target = row[target];
      const double sum = detail::exp_shifted(row, vocab, max);  // row now holds exp(z - max)
      row_loss[r] = std::log(sum) + static_cast<double>(max) - static_cast<double>(z_target);
      if (grad_scale == T(0)) continue;
      const T factor = static_cast<T>(static_cast<double>(grad_scale) / sum);
      for (int64_t j = 0; j < vocab; ++j) row[j] *= factor;
      row[target] -= grad_scale;
    }
  });
  double total = 0;
  for (const double l : row_loss) total += l;
  return total;
}

namespace {

constexpr int64_t kAbsBlock = 4096;

// sum |w| in fixed blocks of 4096 (each in double), the blocks added in order.
template <typename T>
double abs_sum(const T* w, int64_t count, ThreadPool* pool) {
  const int64_t blocks = (count + kAbsBlock - 1) / kAbsBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  for_range(pool, blocks, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      double s = 0;
      for (int64_t i = blk * kAbsBlock; i < std::min(count, (blk + 1) * kAbsBlock); ++i) {
        s += std::fabs(static_cast<double>(w[i]));
      }
      partial[blk] = s;
    }
  });
  double total = 0;
  for (const double p : partial) total += p;
  return total;
}

template <typename T>
T absmean_scale(const T* w, int64_t count, ThreadPool* pool) {
  const double mean = count > 0 ? abs_sum(w, count, pool) / static_cast<double>(count) : 0.0;
  return static_cast<T>(std::max(mean, 1e-5));
}

template <typename T>
T ternary_code(T w, T scale) {
  return std::clamp(std::nearbyint(w / scale), T(-1), T(1));  // round half to even, as torch.round
}

}  // namespace

template <typename T>
T ternarize_weights(const T* w, int64_t count, T* wq, ThreadPool* pool) {
  const T scale = absmean_scale(w, count, pool);
  for_range(pool, (count + kAbsBlock - 1) / kAbsBlock, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * kAbsBlock; i < std::min(count, end * kAbsBlock); ++i) wq[i] = ternary_code(w[i], scale) * scale;
  });
  return scale;
}

template <typename T>
void quantize_activations(const T* x, int64_t n, int64_t d, T* xq, ThreadPool* pool) {
  for_range(pool, n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * d;
      T amax = T(0);
      for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::fabs(xr[i]));
      const T s = T(127) / std::max(amax, static_cast<T>(1e-5));
      for (int64_t i = 0; i < d; ++i) xq[r * d + i] = std::clamp(std::nearbyint(xr[i] * s), T(-128), T(127)) / s;
    }
  });
}

template double cross_entropy<float>(float*, const int32_t*, int64_t, int64_t, float, ThreadPool*);
template double cross_entropy<double>(double*, const int32_t*, int64_t, int64_t, double, ThreadPool*);
template float ternarize_weights<float>(const float*, int64_t, float*, ThreadPool*);
template double ternarize_weights<double>(const double*, int64_t, double*, ThreadPool*);
template void quantize_activations<float>(const float*, int64_t, int64_t, float*, ThreadPool*);
template void quantize_activations<double>(const double*, int64_t, int64_t, double*, ThreadPool*);

}  // namespace okapi::train::ops

namespace okapi::train {

float ternarize(std::span<const float> w, std::span<int8_t> q) {
  if (q.size() != w.size()) throw_error("ternarize: {} codes for {} weights", q.size(), w.size());
  const auto count = static_cast<int64_t>(w.size());
  const float scale = ops::absmean_scale(w.data(), count, nullptr);
  for (size_t i = 0; i < w.size(); ++i) q[i] = static_cast<int8_t>(ops::ternary_code(w[i], scale));
  return scale;
}

}  // namespace okapi::train
