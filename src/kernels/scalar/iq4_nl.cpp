// IQ4_NL: ggml's non-linear 4-bit format. Blocks of 32 values: fp16 d, then 16 bytes whose low
// nibbles index values 0..15 and high nibbles values 16..31 of a fixed 16-level codebook
// (kvalues_iq4nl); value = d * level. The quantizer searches the block scale as ggml's
// quantize_iq4_nl does with ntry = 7 (llama-quantize's and the CPU backend's from_float): start at
// max / 127, assign each value its nearest level, fit d by weighted least squares (weights x^2),
// then try 15 other starting scales and keep the best fit. The dot product pairs with Q8_0.
#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"

namespace okapi::quant::detail {
namespace {

constexpr int kBlock = 32;
constexpr int8_t kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
constexpr int kTries = 7;

struct block_iq4_nl {
  uint16_t d;
  uint8_t qs[kBlock / 2];
};
static_assert(sizeof(block_iq4_nl) == 18);

// The index of the level nearest to x (ties to the lower level), by bisection as ggml.
int nearest_level(float x) {
  if (x <= kLevels[0]) return 0;
  if (x >= kLevels[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < kLevels[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - kLevels[hi - 1] < kLevels[hi] - x ? hi - 1 : hi;
}

// Weighted least-squares fit of d for the assignment at inverse scale `id`: returns sum(w q x)
// and sum(w q^2).
void fit(const float* x, const float* w, float id, float* sum_qx, float* sum_q2) {
  *sum_qx = *sum_q2 = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    const float q = kLevels[nearest_level(id * x[j])];
    *sum_qx += w[j] * q * x[j];
    *sum_q2 += w[j] * q * q;
  }
}

void quantize_block(const float* x, block_iq4_nl* y) {
  float w[kBlock], amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    w[j] = x[j] * x[j];
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  std::memset(y->qs, 0, sizeof(y->qs));
  y->d = fp32_to_fp16(0.0f);
  if (!(amax >= 1e-15f)) return;  // an all-zero (or NaN) block
  float sum_qx, sum_q2;
  fit(x, w, -static_cast<float>(kLevels[0]) / max, &sum_qx, &sum_q2);
  float d = sum_q2 > 0 ? sum_qx / sum_q2 : 0.0f;
  float best = d * sum_qx;
  for (int t = -kTries; t <= kTries; ++t) {
    fit(x, w, (static_cast<float>(t) + kLevels[0]) / max, &sum_qx, &sum_q2);
    if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
      d = sum_qx / sum_q2;
      best = d * sum_qx;
    }
  }
  y->d = fp32_to_fp16(d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kBlock / 2; ++j) {
    y->qs[j] = static_cast<uint8_t>(nearest_level(id * x[j]) | nearest_level(id * x[j + kBlock / 2]) << 4);
  }
}

void quantize_iq4_nl(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_iq4_nl*>(dst);
  for (int64_t b = 0; b < n / kBlock; ++b) quantize_block(x + b * kBlock, y + b);
}

void dequantize_iq4_nl(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq4_nl*>(src);
  for (int64_t b = 0; b < n / kBlock; ++b, y += kBlock) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kBlock / 2; ++j) {
      y[j] = d * kLevels[x[b].qs[j] & 0xF];
      y[j + kBlock / 2] = d * kLevels[x[b].qs[j] >> 4];
    }
  }
}

// ggml's scalar vec_dot_iq4_nl_q8_0: per block (d_w * d_a) * sum(level * a).
float dot_iq4_nl_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq4_nl*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kBlock; ++b) {
    int sumi1 = 0, sumi2 = 0;
    for (int j = 0; j < kBlock / 2; ++j) {
      sumi1 += y[b].qs[j] * kLevels[x[b].qs[j] & 0xF];
      sumi2 += y[b].qs[j + kBlock / 2] * kLevels[x[b].qs[j] >> 4];
    }
    sum += fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d) * static_cast<float>(sumi1 + sumi2);
  }
  return sum;
}

}  // namespace

void add_iq4_nl_format(std::vector<Format>& table) {
  table.push_back(reference_format(DType::IQ4_NL, dequantize_iq4_nl, quantize_iq4_nl, DType::Q8_0, dot_iq4_nl_q8_0));
}

}  // namespace okapi::quant::detail
