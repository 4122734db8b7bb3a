// Helpers for the per-format unit tests: random rows, quantize/dequantize through the table's
// reference pointers, relative error, and the "dequantize both, then dot in double" reference for vec_dot.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/format_table.hpp"

namespace okapi::test {

inline std::vector<float> gaussian_row(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint8_t> quantize_row(DType type, const std::vector<float>& x) {
  std::vector<uint8_t> q(*row_bytes(type, static_cast<int64_t>(x.size())));
  quant::format(type).quantize_ref(x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

inline std::vector<float> dequantize_row(DType type, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  quant::format(type).dequantize_ref(q.data(), y.data(), n);
  return y;
}

// sqrt(sum (x - y)^2 / sum x^2), in double.
inline double relative_rms_error(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    ref += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

struct DotCheck {
  float dot = 0;          // vec_dot_ref
  double reference = 0;   // sum of dequantized products, in double
  double magnitude = 0;   // sum of |products|, to scale tolerances
};

// Quantizes `w` to `type` and `a` to its vec_dot_type, then compares vec_dot_ref with the dot of
// the two dequantized rows.
inline DotCheck dot_check(DType type, const std::vector<float>& w, const std::vector<float>& a) {
  const auto& f = quant::format(type);
  const auto n = static_cast<int64_t>(w.size());
  const auto wq = quantize_row(type, w);
  const auto aq = quantize_row(f.vec_dot_type, a);
  const auto wd = dequantize_row(type, wq, n);
  const auto ad = dequantize_row(f.vec_dot_type, aq, n);
  DotCheck c;
  c.dot = f.vec_dot_ref(n, wq.data(), aq.data());
  for (size_t i = 0; i < wd.size(); ++i) {
    c.reference += static_cast<double>(wd[i]) * ad[i];
    c.magnitude += std::fabs(static_cast<double>(wd[i]) * ad[i]);
  }
  return c;
}

}  // namespace okapi::test
