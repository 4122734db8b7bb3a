// The legacy 32-element block formats Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1: reference (de)quantizers
// byte-identical to ggml's quantize_row_*_ref / dequantize_row_*, and the scalar dot products of
// ggml's CPU backend (Q4_0 Q5_0 Q8_0 pair with Q8_0 activations; Q4_1 Q5_1 with Q8_1).
// The float expressions keep ggml's operand order, so results round exactly as ggml's do.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/block_rows.hpp"
#include "kernels/scalar/kquant_search.hpp"

namespace okapi::quant::detail {
namespace {

constexpr int kHalf = 16;  // every legacy block holds 32 values, stored as two halves of 16

int64_t block_count(int64_t n) { return n / QK8_0; }

// The value of largest magnitude (first one wins on ties), signed, as Q4_0/Q5_0 scale by it.
float signed_absmax(const float* x) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < QK8_0; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < QK8_0; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

// ---- Levels: the integers a block stores, 32 per block, in element order ----
//
// Q4: element j < 16 is the low nibble of qs[j], element j + 16 its high nibble. Q5 adds bit j of
// the 32-bit qh as bit 4 of element j. Q8 stores signed bytes as they are.

void unpack_nibbles(const uint8_t* qs, int* q) {
  for (int j = 0; j < kHalf; ++j) {
    q[j] = qs[j] & 0x0F;
    q[kHalf + j] = qs[j] >> 4;
  }
}

void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  unpack_nibbles(qs, q);
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof(qh));
  for (int j = 0; j < QK5_0; ++j) q[j] |= static_cast<int>(((qh >> j) & 1u) << 4);
}

void unpack_levels(const block_q4_0& b, int* q) { unpack_nibbles(b.qs, q); }
void unpack_levels(const block_q4_1& b, int* q) { unpack_nibbles(b.qs, q); }
void unpack_levels(const block_q5_0& b, int* q) { unpack_q5(b.qs, b.qh, q); }
void unpack_levels(const block_q5_1& b, int* q) { unpack_q5(b.qs, b.qh, q); }
void unpack_levels(const block_q8_0& b, int* q) { std::copy(b.qs, b.qs + QK8_0, q); }
void unpack_levels(const block_q8_1& b, int* q) { std::copy(b.qs, b.qs + QK8_1, q); }

void pack_q4(const int* q, uint8_t* qs) {  // levels in [0, 15]
  for (int j = 0; j < kHalf; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[kHalf + j] << 4));
}

void pack_q5(const int* q, uint8_t* qs, uint8_t* qh_bytes) {  // levels in [0, 31]
  uint32_t qh = 0;
  for (int j = 0; j < kHalf; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[kHalf + j] & 0x0F) << 4));
    qh |= static_cast<uint32_t>((q[j] & 0x10) >> 4) << j;
    qh |= static_cast<uint32_t>((q[kHalf + j] & 0x10) >> 4) << (j + kHalf);
  }
  std::memcpy(qh_bytes, &qh, sizeof(qh));
}

void pack_levels(const int* q, block_q4_0& b) { pack_q4(q, b.qs); }
void pack_levels(const int* q, block_q4_1& b) { pack_q4(q, b.qs); }
void pack_levels(const int* q, block_q5_0& b) { pack_q5(q, b.qs, b.qh); }
void pack_levels(const int* q, block_q5_1& b) { pack_q5(q, b.qs, b.qh); }

// ---- Symmetric formats Q4_0, Q5_0 (and Q8_0 / Q8_1 with offset 0): value = (q - kOffset) * d ----

// Levels 0 .. 2 * kOffset - 1; d is chosen so that the value of largest magnitude gets level 0.
template <typename Block, int kOffset>
void quantize_symmetric(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<Block*>(dst);
  for (int64_t i = 0; i < block_count(n); ++i, x += QK8_0) {
    const float d = signed_absmax(x) / -kOffset;
    const float id = inverse_scale(d);
    y[i].d = fp32_to_fp16(d);
    int q[QK8_0];
    // ggml truncates toward zero after adding kOffset + 0.5, i.e. rounds half up.
    for (int j = 0; j < QK8_0; ++j) q[j] = std::min(2 * kOffset - 1, static_cast<int>(x[j] * id + (kOffset + 0.5f)));
    pack_levels(q, y[i]);
  }
}

template <typename Block, int kOffset>
void dequantize_symmetric(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const Block*>(src);
  int q[QK8_0];
  for (int64_t i = 0; i < block_count(n); ++i, y += QK8_0) {
    const float d = fp16_to_fp32(x[i].d);
    unpack_levels(x[i], q);
    for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(q[j] - kOffset) * d;
  }
}

// How a block's integer dot product is scaled: ggml's Q4_0 multiplies by one scale at a time,
// (sumi * dx) * dy; Q5_0 and Q8_0 multiply the two scales first. The two round differently.
enum class ScaleOrder { OneAtATime, ScalesFirst };

template <typename Block, int kOffset, ScaleOrder kOrder>
float dot_symmetric_q8_0(int64_t n, const void* w, const void* a) {
  const auto signed_levels = [](const Block& b, int* q) {
    unpack_levels(b, q);
    for (int j = 0; j < QK8_0; ++j) q[j] -= kOffset;
  };
  const auto term = [](const Block& x, const block_q8_0& y, int sumi) {
    const float dx = fp16_to_fp32(x.d);
    const float dy = fp16_to_fp32(y.d);
    if constexpr (kOrder == ScaleOrder::OneAtATime) {
      return static_cast<float>(sumi) * dx * dy;
    } else {
      return static_cast<float>(sumi) * (dx * dy);
    }
  };
  return block_dot<Block, block_q8_0, QK8_0>(n, w, a, signed_levels, term);
}

// ---- Affine formats Q4_1, Q5_1: value = q * d + m ----

// Levels 0 .. kMaxLevel spread over [min, max] of the block. (ggml clamps Q4_1's levels only;
// for finite input neither can exceed kMaxLevel, so the clamp never changes a Q5_1 level.)
template <typename Block, int kMaxLevel>
void quantize_affine(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<Block*>(dst);
  for (int64_t i = 0; i < block_count(n); ++i, x += QK8_0) {
    float min = 0.0f;
    float max = 0.0f;
    min_max(x, &min, &max);
    const float d = (max - min) / kMaxLevel;
    const float id = inverse_scale(d);
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    int q[QK8_0];
    for (int j = 0; j < QK8_0; ++j) q[j] = std::min(kMaxLevel, static_cast<int>((x[j] - min) * id + 0.5f));
    pack_levels(q, y[i]);
  }
}

template <typename Block>
void dequantize_affine(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const Block*>(src);
  int q[QK8_0];
  for (int64_t i = 0; i < block_count(n); ++i, y += QK8_0) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    unpack_levels(x[i], q);
    for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(q[j]) * d + m;
  }
}

template <typename Block>
float dot_affine_q8_1(int64_t n, const void* w, const void* a) {
  const auto levels = [](const Block& b, int* q) { unpack_levels(b, q); };
  // The offset m times sum(activations) comes from Q8_1's precomputed s = d * sum(qs).
  const auto term = [](const Block& x, const block_q8_1& y, int sumi) {
    return (fp16_to_fp32(x.d) * fp16_to_fp32(y.d)) * static_cast<float>(sumi) +
           fp16_to_fp32(x.m) * fp16_to_fp32(y.s);
  };
  return block_dot<Block, block_q8_1, QK8_1>(n, w, a, levels, term);
}

// ---- Q8_0 / Q8_1 quantizers: 8-bit, rounded to nearest; Q8_1 also stores s = d * sum(qs) ----

// Scale of an 8-bit block and its quants; returns the float (not fp16-rounded) scale.
float quantize_8bit(const float* x, int8_t* qs) {
  float amax = 0.0f;
  for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = inverse_scale(d);
  for (int j = 0; j < QK8_0; ++j) qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  return d;
}

void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_q8_0*>(dst);
  for (int64_t i = 0; i < block_count(n); ++i, x += QK8_0) y[i].d = fp32_to_fp16(quantize_8bit(x, y[i].qs));
}

void quantize_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_q8_1*>(dst);
  for (int64_t i = 0; i < block_count(n); ++i, x += QK8_1) {
    const float d = quantize_8bit(x, y[i].qs);
    int sum = 0;
    for (int j = 0; j < QK8_1; ++j) sum += y[i].qs[j];
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

// ---- With importance weights: ggml's quantize_row_q{4,5}_{0,1}_impl ----
//
// Each element is weighted by importance * sqrt(sigma^2 + x^2), sigma^2 the mean square of the
// whole row; the symmetric formats search the scale with make_qx_quants, the affine ones scale and
// min with make_qkx3_quants (make_qkx2_quants with the same weights computes the same).

float row_sigma2(const float* x, int64_t n) {
  float sum_x2 = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
  return sum_x2 / static_cast<float>(n);
}

void element_weights(const float* xb, const float* qw, float sigma2, float* weight) {
  for (int j = 0; j < QK8_0; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
}

template <typename Block, int kOffset>
void quantize_symmetric_weighted(const float* x, void* dst, int64_t n, const float* importance) {
  auto* y = static_cast<Block*>(dst);
  const float sigma2 = row_sigma2(x, n);
  float weight[QK8_0];
  int8_t L[QK8_0];
  int q[QK8_0];
  for (int64_t i = 0; i < block_count(n); ++i) {
    const float* xb = x + QK8_0 * i;
    element_weights(xb, importance + QK8_0 * i, sigma2, weight);
    y[i].d = fp32_to_fp16(kquant::make_qx_quants(QK8_0, kOffset, xb, L, weight));
    for (int j = 0; j < QK8_0; ++j) q[j] = L[j];
    pack_levels(q, y[i]);
  }
}

template <typename Block, int kMaxLevel>
void quantize_affine_weighted(const float* x, void* dst, int64_t n, const float* importance) {
  constexpr kquant::ScaleSearch kSearch{-0.9f, 0.05f, 36, false};
  auto* y = static_cast<Block*>(dst);
  const float sigma2 = row_sigma2(x, n);
  float weight[QK8_0];
  uint8_t L[QK8_0];
  uint8_t aux[QK8_0];
  int q[QK8_0];
  for (int64_t i = 0; i < block_count(n); ++i) {
    const float* xb = x + QK8_0 * i;
    element_weights(xb, importance + QK8_0 * i, sigma2, weight);
    const kquant::ScaleMin sm = kquant::make_qkx2_quants(QK8_0, kMaxLevel, xb, weight, L, aux, kSearch);
    y[i].d = fp32_to_fp16(sm.scale);
    y[i].m = fp32_to_fp16(-sm.min);
    for (int j = 0; j < QK8_0; ++j) q[j] = L[j];
    pack_levels(q, y[i]);
  }
}

}  // namespace

void add_legacy_formats(std::vector<Format>& table) {
  using enum ScaleOrder;
  table.push_back(reference_format(DType::Q4_0, dequantize_symmetric<block_q4_0, 8>,
                                   quantize_symmetric<block_q4_0, 8>, DType::Q8_0,
                                   dot_symmetric_q8_0<block_q4_0, 8, OneAtATime>));
  table.push_back(reference_format(DType::Q4_1, dequantize_affine<block_q4_1>, quantize_affine<block_q4_1, 15>,
                                   DType::Q8_1, dot_affine_q8_1<block_q4_1>));
  table.push_back(reference_format(DType::Q5_0, dequantize_symmetric<block_q5_0, 16>,
                                   quantize_symmetric<block_q5_0, 16>, DType::Q8_0,
                                   dot_symmetric_q8_0<block_q5_0, 16, ScalesFirst>));
  table.push_back(reference_format(DType::Q5_1, dequantize_affine<block_q5_1>, quantize_affine<block_q5_1, 31>,
                                   DType::Q8_1, dot_affine_q8_1<block_q5_1>));
  table.push_back(reference_format(DType::Q8_0, dequantize_symmetric<block_q8_0, 0>, quantize_q8_0, DType::Q8_0,
                                   dot_symmetric_q8_0<block_q8_0, 0, ScalesFirst>));
  // Q8_1 is an activation format: ggml gives it no dot product of its own (vec_dot_ref stays
  // nullptr). Its dequantization (d * q) is okapi's, for tests and inspection.
  table.push_back(reference_format(DType::Q8_1, dequantize_symmetric<block_q8_1, 0>, quantize_q8_1, DType::Q8_1,
                                   nullptr));
  // ggml's quantize_q{4,5}_{0,1} with quant_weights; Q8_0 ignores them.
  for (Format& f : table) {
    if (f.type == DType::Q4_0) f.quantize_weighted = quantize_symmetric_weighted<block_q4_0, 8>;
    if (f.type == DType::Q5_0) f.quantize_weighted = quantize_symmetric_weighted<block_q5_0, 16>;
    if (f.type == DType::Q4_1) f.quantize_weighted = quantize_affine_weighted<block_q4_1, 15>;
    if (f.type == DType::Q5_1) f.quantize_weighted = quantize_affine_weighted<block_q5_1, 31>;
  }
}

}  // namespace okapi::quant::detail
