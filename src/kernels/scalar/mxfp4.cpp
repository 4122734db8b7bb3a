// MXFP4 (OCP microscaling FP4, as ggml stores it): blocks of 32 values, one E8M0 exponent byte e
// then 16 bytes of 4-bit E2M1 codes (low nibbles values 0..15, high nibbles 16..31). ggml keeps the
// E2M1 values doubled as int8 (kvalues_mxfp4: 0 1 2 3 4 6 8 12, sign in bit 3) and halves the
// scale: value = 2^(e - 128) * kvalues_mxfp4[code] (ggml_e8m0_to_fp32_half). The quantizer is
// ggml's quantize_row_mxfp4_ref (quantize_mxfp4 ignores importance weights): e from
// floor(log2(max|x|)) - 2, each value the code nearest to x / scale (the first on ties). The dot
// product pairs with Q8_0 as ggml_vec_dot_mxfp4_q8_0_generic.
#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no fused multiply-adds, as ggml's reference

#include <bit>
#include <cmath>
#include <vector>

#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/mxfp4_levels.hpp"

namespace okapi::quant::detail {

float mxfp4_half_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

namespace {

constexpr int kBlock = 32;

// The code whose value times d is nearest to x (the first of equals), as ggml's best_index_mxfp4.
int nearest_code(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kMxfp4Levels[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kMxfp4Levels[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

// The exponent byte of a block whose largest magnitude is amax: floor(log2(amax)) - 2 + 127, as
// ggml converts it (a float cast to uint8_t; on x86 the low byte of the int32 conversion, which is
// what we keep for the out-of-range cases).
uint8_t exponent_of(float amax) {
  if (!(amax > 0.0f)) return 0;
  const float e = std::floor(std::log2(amax)) - 2 + 127;
  if (!(std::fabs(e) < 2147483648.0f)) return 0;  // inf: x86 gives INT32_MIN, whose low byte is 0
  return static_cast<uint8_t>(static_cast<uint32_t>(static_cast<int32_t>(e)) & 0xFFu);
}

void quantize_mxfp4(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_mxfp4*>(dst);
  for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) {
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    }
    y[b].e = exponent_of(amax);
    const float d = mxfp4_half_scale(y[b].e);
    for (int j = 0; j < kBlock / 2; ++j) {
      y[b].qs[j] = static_cast<uint8_t>(nearest_code(x[j], d) | nearest_code(x[j + kBlock / 2], d) << 4);
    }
  }
}

void dequantize_mxfp4(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_mxfp4*>(src);
  for (int64_t b = 0; b < n / kBlock; ++b, y += kBlock) {
    const float d = mxfp4_half_scale(x[b].e);
    for (int j = 0; j < kBlock / 2; ++j) {
      y[j] = static_cast<float>(kMxfp4Levels[x[b].qs[j] & 0xF]) * d;
      y[j + kBlock / 2] = static_cast<float>(kMxfp4Levels[x[b].qs[j] >> 4]) * d;
    }
  }
}

// ggml_vec_dot_mxfp4_q8_0_generic: per block (d_a * scale_w) * sum(level * a).
float dot_mxfp4_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_mxfp4*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float d = fp16_to_fp32(y[b].d) * mxfp4_half_scale(x[b].e);
    int sum1 = 0, sum2 = 0;
    for (int j = 0; j < kBlock / 2; ++j) {
      sum1 += y[b].qs[j] * kMxfp4Levels[x[b].qs[j] & 0xF];
      sum2 += y[b].qs[j + kBlock / 2] * kMxfp4Levels[x[b].qs[j] >> 4];
    }
    sum += d * static_cast<float>(sum1 + sum2);
  }
  return sum;
}

}  // namespace

void add_mxfp4_format(std::vector<Format>& table) {
  table.push_back(reference_format(DType::MXFP4, dequantize_mxfp4, quantize_mxfp4, DType::Q8_0, dot_mxfp4_q8_0));
}

}  // namespace okapi::quant::detail
