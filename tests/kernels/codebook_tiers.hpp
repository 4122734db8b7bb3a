// Every ISA tier's kernels of a codebook format (IQ4_NL, IQ4_XS, MXFP4) against its scalar
// reference row: dequantize bit for bit, vec_dot within a reordered float sum (1e-5 of
// sum |w_i a_i|), the multi-token tiles equal to that tier's vec_dot bit for bit, and the row
// groups equal for a token alone and inside a batch, within the same tolerance of the reference.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.hpp"
#include "core/half.hpp"
#include "kernels/format_table.hpp"

namespace okapi::test {

// Random weight rows of `type`: random bytes, then sane scales (IQ4: fp16 d of either sign,
// zero sometimes; MXFP4: an exponent byte 100..150, or the subnormal 0 / 1 sometimes; 255
// overflows the dots, whose infinities then depend on the order of the sum).
inline std::vector<uint8_t> random_codebook_rows(DType type, int64_t n, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t block = layout(type).block_bytes;
  std::vector<uint8_t> w(*row_bytes(type, n) * static_cast<size_t>(rows));
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  for (size_t at = 0; at < w.size(); at += block) {
    if (type == DType::MXFP4) {
      const auto pick = static_cast<uint32_t>(rng() % 20);
      w[at] = static_cast<uint8_t>(pick == 0 ? 0 : pick == 1 ? 1 : 100 + rng() % 51);
      continue;
    }
    const float d = rng() % 16 == 0 ? 0.0f : std::ldexp(static_cast<float>(rng() % 1000) - 500.0f, -12);
    const uint16_t h = fp32_to_fp16(d);
    std::memcpy(&w[at], &h, sizeof(h));
  }
  return w;
}

inline std::vector<uint8_t> quantized_activations(DType act, int64_t n, int64_t tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * tokens));
  for (auto& v : x) v = dist(rng);
  const size_t a_row = *row_bytes(act, n);
  std::vector<uint8_t> a(a_row * static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) quant::format(act, Isa::scalar).quantize_ref(x.data() + t * n, a.data() + t * a_row, n);
  return a;
}

inline bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(a)) == 0;
}

// Equal (infinities of huge scales, NaN included) or within tol.
inline bool close_float(float a, float b, double tol) {
  return same_float(a, b) || std::fabs(static_cast<double>(a) - b) <= tol;
}

inline void check_codebook_tiers(DType type) {
  const quant::Format& ref = quant::format(type, Isa::scalar);
  const int64_t bs = layout(type).block_size;
  const int64_t n = bs * (bs == 32 ? 24 : 6), rows = 37, tokens = 9;
  const auto w = random_codebook_rows(type, n, rows, 11);
  const size_t w_row = *row_bytes(type, n), a_row = *row_bytes(ref.vec_dot_type, n);
  const auto a = quantized_activations(ref.vec_dot_type, n, tokens, 12);
  // sum |w_i a_i| per (row, token), from the reference dequantizers, for the tolerance.
  std::vector<float> wf(static_cast<size_t>(n * rows)), af(static_cast<size_t>(n * tokens));
  for (int64_t r = 0; r < rows; ++r) ref.dequantize_ref(w.data() + r * w_row, wf.data() + r * n, n);
  for (int64_t t = 0; t < tokens; ++t) {
    quant::format(ref.vec_dot_type, Isa::scalar).dequantize_ref(a.data() + t * a_row, af.data() + t * n, n);
  }
  const auto magnitude = [&](int64_t r, int64_t t) {
    double m = 0;
    for (int64_t i = 0; i < n; ++i) m += std::fabs(static_cast<double>(wf[static_cast<size_t>(r * n + i)]) * af[static_cast<size_t>(t * n + i)]);
    return m;
  };
  for (Isa tier : available_isas()) {
    SCOPED_TRACE(std::string(isa_name(tier)) + " " + std::string(dtype_name(type)));
    const quant::Format& f = quant::format(type, tier);
    std::vector<float> y(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      f.dequantize(w.data() + r * w_row, y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(same_float(y[static_cast<size_t>(i)], wf[static_cast<size_t>(r * n + i)])) << "row " << r << " " << i;
      }
    }
    std::vector<float> dots(static_cast<size_t>(rows * tokens));
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const float fast = f.vec_dot(n, w.data() + r * w_row, a.data() + t * a_row);
        const float want = ref.vec_dot_ref(n, w.data() + r * w_row, a.data() + t * a_row);
        dots[static_cast<size_t>(t * rows + r)] = fast;
        ASSERT_TRUE(close_float(fast, want, 1e-5 * magnitude(r, t) + 1e-30)) << fast << " vs " << want << ": row " << r << " token " << t;
      }
    }
    if (f.tiles.gemm != nullptr) {
      std::vector<float> scales;  // the Q8_0 activations' d as floats, when the tile wants them
      if (f.tiles.float_scales) {
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t b = 0; b < n / 32; ++b) {
            uint16_t h;
            std::memcpy(&h, a.data() + t * a_row + b * 34, 2);
            scales.push_back(fp16_to_fp32(h));
          }
        }
      }
      std::vector<float> tiled(static_cast<size_t>(rows * tokens));
      f.tiles.gemm(n, w.data(), w_row, rows, a.data(), a_row, scales.empty() ? nullptr : scales.data(), tokens, 1.0f,
                   tiled.data(), rows);
      for (size_t i = 0; i < tiled.size(); ++i) ASSERT_TRUE(same_float(tiled[i], dots[i])) << "tile element " << i;
    }
    const quant::RowGroupKernels& k = f.row_groups;
    if (k.rows == 0) continue;
    const int64_t groups = (rows + k.rows - 1) / k.rows;
    const size_t g_bytes = k.group_bytes(n);
    std::vector<uint8_t> packed(g_bytes * static_cast<size_t>(groups));
    for (int64_t g = 0; g < groups; ++g) {
      k.pack(w.data() + static_cast<size_t>(g * k.rows) * w_row, w_row, std::min(k.rows, rows - g * k.rows), n,
             packed.data() + g * g_bytes);
    }
    // The same activations as `a` (the reference quantizer of the same floats), prepared.
    const auto a_same = [&] {
      std::vector<float> xs(static_cast<size_t>(n * tokens));
      std::mt19937 r2(12);
      std::normal_distribution<float> d2(0.0f, 1.0f);
      for (auto& v : xs) v = d2(r2);
      return xs;
    }();
    const size_t p_row = k.activation_bytes(n);
    std::vector<uint8_t> prepared(p_row * static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) k.prepare_activation(a_same.data() + t * n, n, prepared.data() + t * p_row);
    std::vector<float> batch(static_cast<size_t>(rows * tokens)), alone(static_cast<size_t>(rows));
    k.gemm(n, packed.data(), rows, prepared.data(), p_row, tokens, batch.data(), rows);
    for (int64_t t = 0; t < tokens; ++t) {
      k.gemm(n, packed.data(), rows, prepared.data() + t * p_row, p_row, 1, alone.data(), rows);
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_TRUE(same_float(alone[static_cast<size_t>(r)], batch[static_cast<size_t>(t * rows + r)])) << r << " " << t;
        const float want = ref.vec_dot_ref(n, w.data() + r * w_row, a.data() + t * a_row);
        const float got = batch[static_cast<size_t>(t * rows + r)];
        ASSERT_TRUE(close_float(got, want, 1e-5 * magnitude(r, t) + 1e-30))
            << got << " vs " << want << ": row group: row " << r << " token " << t;
      }
    }
  }
}

}  // namespace okapi::test
