// The legacy 32-element block formats Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1: reference (de)quantizers
// byte-identical to ggml's quantize_row_*_ref / dequantize_row_*, and the scalar dot products of
// ggml's CPU backend (Q4_0 Q5_0 Q8_0 pair with Q8_0 activations; Q4_1 Q5_1 with Q8_1).
// The float expressions keep ggml's operand order, so results round exactly as ggml's do.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "quant/blocks.hpp"
#include "quant/quant.hpp"

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

uint32_t load_qh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, sizeof(v));
  return v;
}

// ---- Q4_0: 4-bit, symmetric, value = (q - 8) * d ----

void quantize_q4_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_q4_0*>(dst);
  for (int64_t i = 0; i < block_count(n); ++i, x += QK4_0) {
    const float d = signed_absmax(x) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kHalf; ++j) {
      // ggml truncates toward zero after adding 8.5, i.e. rounds half up within [0, 16].
      const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[kHalf + j] * id + 8.5f));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void dequantize_q4_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_q4_0*>(src);
  for (int64_t i = 0; i < block_count(n); ++i, y += QK4_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[kHalf + j] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

float dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q4_0*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < block_count(n); ++i) {
    int sumi = 0;
    for (int j = 0; j < kHalf; ++j) {
      sumi += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
      sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[kHalf + j];
    }
    sum += static_cast<float>(sumi) * fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
  }
  return sum;
}

// ---- Q4_1: 4-bit with offset, value = q * d + m ----

void quantize_q4_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_q4_1*>(dst);
  for (int64_t i = 0; i < block_count(n); ++i, x += QK4_1) {
    float min = 0.0f;
    float max = 0.0f;
    min_max(x, &min, &max);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = std::min(15, static_cast<int>((x[j] - min) * id + 0.5f));
      const int q1 = std::min(15, static_cast<int>((x[kHalf + j] - min) * id + 0.5f));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void dequantize_q4_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_q4_1*>(src);
  for (int64_t i = 0; i < block_count(n); ++i, y += QK4_1) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[kHalf + j] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

float dot_q4_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q4_1*>(w);
  const auto* y = static_cast<const block_q8_1*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < block_count(n); ++i) {
    int sumi = 0;
    for (int j = 0; j < kHalf; ++j) {
      sumi += (x[i].qs[j] & 0x0F) * y[i].qs[j];
      sumi += (x[i].qs[j] >> 4) * y[i].qs[kHalf + j];
    }
    // The offset m times sum(activations) comes from Q8_1's precomputed s = d * sum(qs).
    sum += (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * static_cast<float>(sumi) +
           fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
  }
  return sum;
}

// ---- Q5_0 / Q5_1: the 5th bit of value j lives in bit j of qh ----

int q5_value(const uint8_t* qs, uint32_t qh, int j) {
  const int low = j < kHalf ? (qs[j] & 0x0F) : (qs[j - kHalf] >> 4);
  return low | static_cast<int>(((qh >> j) & 1u) << 4);
}

void pack_q5(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < kHalf; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[kHalf + j] & 0x0F) << 4));
    qh |= static_cast<uint32_t>((q[j] & 0x10) >> 4) << j;
    qh |= static_cast<uint32_t>((q[kHalf + j] & 0x10) >> 4) << (j + kHalf);
  }
  std::memcpy(qh_bytes, &qh, sizeof(qh));
}

void quantize_q5_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_q5_0*>(dst);
  for (int64_t i = 0; i < block_count(n); ++i, x += QK5_0) {
    const float d = signed_absmax(x) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    int q[QK5_0];
    for (int j = 0; j < QK5_0; ++j) q[j] = std::min(31, static_cast<int>(x[j] * id + 16.5f));
    pack_q5(q, y[i].qs, y[i].qh);
  }
}

void dequantize_q5_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_q5_0*>(src);
  for (int64_t i = 0; i < block_count(n); ++i, y += QK5_0) {
    const float d = fp16_to_fp32(x[i].d);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < QK5_0; ++j) y[j] = static_cast<float>(q5_value(x[i].qs, qh, j) - 16) * d;
  }
}

float dot_q5_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q5_0*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < block_count(n); ++i) {
    const uint32_t qh = load_qh(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < QK5_0; ++j) sumi += (q5_value(x[i].qs, qh, j) - 16) * y[i].qs[j];
    sum += (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * static_cast<float>(sumi);
  }
  return sum;
}

void quantize_q5_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_q5_1*>(dst);
  for (int64_t i = 0; i < block_count(n); ++i, x += QK5_1) {
    float min = 0.0f;
    float max = 0.0f;
    min_max(x, &min, &max);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    int q[QK5_1];  // ggml does not clamp here: (max - min) * id rounds to at most 31
    for (int j = 0; j < QK5_1; ++j) q[j] = static_cast<int>((x[j] - min) * id + 0.5f);
    pack_q5(q, y[i].qs, y[i].qh);
  }
}

void dequantize_q5_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_q5_1*>(src);
  for (int64_t i = 0; i < block_count(n); ++i, y += QK5_1) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < QK5_1; ++j) y[j] = static_cast<float>(q5_value(x[i].qs, qh, j)) * d + m;
  }
}

float dot_q5_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q5_1*>(w);
  const auto* y = static_cast<const block_q8_1*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < block_count(n); ++i) {
    const uint32_t qh = load_qh(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < QK5_1; ++j) sumi += q5_value(x[i].qs, qh, j) * y[i].qs[j];
    sum += (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * static_cast<float>(sumi) +
           fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
  }
  return sum;
}

// ---- Q8_0 / Q8_1: 8-bit, symmetric; Q8_1 also stores s = d * sum(qs) ----

// Scale of an 8-bit block and its quants; returns the float (not fp16-rounded) scale.
float quantize_8bit(const float* x, int8_t* qs) {
  float amax = 0.0f;
  for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
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

template <typename Block>
void dequantize_8bit(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const Block*>(src);
  for (int64_t i = 0; i < block_count(n); ++i, y += QK8_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

float dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q8_0*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < block_count(n); ++i) {
    int sumi = 0;
    for (int j = 0; j < QK8_0; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    sum += static_cast<float>(sumi) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return sum;
}

Format row(DType type, DequantizeRowFn dq, QuantizeRowFn q, DType dot_type, VecDotFn dot) {
  Format f;
  f.type = type;
  f.dequantize_ref = dq;
  f.quantize_ref = q;
  f.vec_dot_type = dot_type;
  f.vec_dot_ref = dot;
  return f;
}

}  // namespace

void add_legacy_formats(std::vector<Format>& table) {
  table.push_back(row(DType::Q4_0, dequantize_q4_0, quantize_q4_0, DType::Q8_0, dot_q4_0_q8_0));
  table.push_back(row(DType::Q4_1, dequantize_q4_1, quantize_q4_1, DType::Q8_1, dot_q4_1_q8_1));
  table.push_back(row(DType::Q5_0, dequantize_q5_0, quantize_q5_0, DType::Q8_0, dot_q5_0_q8_0));
  table.push_back(row(DType::Q5_1, dequantize_q5_1, quantize_q5_1, DType::Q8_1, dot_q5_1_q8_1));
  table.push_back(row(DType::Q8_0, dequantize_8bit<block_q8_0>, quantize_q8_0, DType::Q8_0, dot_q8_0_q8_0));
  // Q8_1 is an activation format: ggml gives it no dot product of its own (vec_dot_ref stays
  // nullptr). Its dequantization (d * q) is okapi's, for tests and inspection.
  table.push_back(row(DType::Q8_1, dequantize_8bit<block_q8_1>, quantize_q8_1, DType::Q8_1, nullptr));
}

}  // namespace okapi::quant::detail
