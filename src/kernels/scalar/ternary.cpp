// Ternary ({-1, 0, +1} times a scale) formats:
//  * TQ1_0, TQ2_0 (ggml): byte-identical to quantize_row_tq{1,2}_0_ref / dequantize_row_tq*, and
//    ggml's scalar dot products with Q8_K activations.
//  * I2_S (bitnet.cpp, x86 layout): 2-bit codes with ONE float scale per tensor stored after the
//    packed data. Rows here work at unit scale; tensor_ops.cpp reads/writes the tensor scale.
//  * IQ1_BN, IQ2_BN (ik_llama.cpp): dequantization only; each row starts with its scale.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/block_rows.hpp"

namespace okapi::quant::detail {
namespace {

int64_t super_blocks(int64_t n) { return n / QK_K; }

// The TQ quantizers scale a 256-value block by its absolute max: stores it as the block's fp16 d
// and returns the multiplier id = 1 / amax.
float store_absmax_scale(const float* x, uint16_t& d) {
  float amax = 0.0f;
  for (int j = 0; j < QK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
  d = fp32_to_fp16(amax);
  return inverse_scale(amax);
}

// The trit (-1, 0, +1 stored as 0, 1, 2) of a value as ggml's TQ quantizers compute it:
// lroundf(x / amax) + 1.
int tq_code(float x, float id) { return static_cast<int>(std::lround(x * id)) + 1; }

// ---- TQ1_0: 5 trits per byte (base 3, first value most significant), 4 in each qh byte ----
//
// A byte holds ceil(t * 256 / 243) for the 5-trit number t; trit n is the top trit of
// byte * 3^n (mod 256), read as (b * 3) >> 8. Value order: qs[0..31] give values 0..159
// (value 32n + m from byte m, trit n), qs[32..47] give 160..239 (160 + 16n + m), qh[0..3]
// give 240..255 (240 + 4n + j from qh[j], trit n).

constexpr uint8_t kPow3[6] = {1, 3, 9, 27, 81, 243};
constexpr int kTq1WideBytes = 32;                              // first run of qs: 32 bytes
constexpr int kTq1Bytes = sizeof(block_tq1_0::qs);             // 48
constexpr int kTq1NarrowBytes = kTq1Bytes - kTq1WideBytes;     // second run: 16 bytes
constexpr int kTq1HighBytes = sizeof(block_tq1_0::qh);         // 4

int tq1_trit(uint8_t byte, int n) {
  const auto shifted = static_cast<uint8_t>(byte * kPow3[n]);
  return ((shifted * 3) >> 8) - 1;
}

uint8_t tq1_pack(int trits_base3) {  // trits_base3 < 243
  return static_cast<uint8_t>((trits_base3 * 256 + (243 - 1)) / 243);
}

// The 256 values of one block, in element order.
void decode(const block_tq1_0& b, int* v) {
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < kTq1WideBytes; ++m) v[n * kTq1WideBytes + m] = tq1_trit(b.qs[m], n);
  }
  int* narrow = v + 5 * kTq1WideBytes;
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < kTq1NarrowBytes; ++m) {
      narrow[n * kTq1NarrowBytes + m] = tq1_trit(b.qs[kTq1WideBytes + m], n);
    }
  }
  int* high = v + 5 * kTq1Bytes;
  for (int n = 0; n < 4; ++n) {
    for (int j = 0; j < kTq1HighBytes; ++j) high[n * kTq1HighBytes + j] = tq1_trit(b.qh[j], n);
  }
}

void quantize_tq1_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_tq1_0*>(dst);
  for (int64_t i = 0; i < super_blocks(n); ++i, x += QK_K) {
    const float id = store_absmax_scale(x, y[i].d);
    for (int m = 0; m < kTq1WideBytes; ++m) {
      int t = 0;
      for (int k = 0; k < 5; ++k) t = t * 3 + tq_code(x[m + k * kTq1WideBytes], id);
      y[i].qs[m] = tq1_pack(t);
    }
    const float* narrow = x + 5 * kTq1WideBytes;
    for (int m = 0; m < kTq1NarrowBytes; ++m) {
      int t = 0;
      for (int k = 0; k < 5; ++k) t = t * 3 + tq_code(narrow[m + k * kTq1NarrowBytes], id);
      y[i].qs[kTq1WideBytes + m] = tq1_pack(t);
    }
    const float* high = x + 5 * kTq1Bytes;
    for (int j = 0; j < kTq1HighBytes; ++j) {
      int t = 0;
      for (int k = 0; k < 4; ++k) t = t * 3 + tq_code(high[j + k * kTq1HighBytes], id);
      y[i].qh[j] = tq1_pack(t * 3);  // 4 trits: the unused 5th is the least significant
    }
  }
}

// ---- TQ2_0: 2-bit codes; value 128h + 32l + m is in bits 2l..2l+1 of byte 32h + m ----

void decode(const block_tq2_0& b, int* v) {
  for (int e = 0; e < QK_K; ++e) {
    const int half = e / 128;
    const int lane = (e % 128) / 32;
    const int m = e % 32;
    v[e] = ((b.qs[32 * half + m] >> (2 * lane)) & 3) - 1;
  }
}

void quantize_tq2_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_tq2_0*>(dst);
  for (int64_t i = 0; i < super_blocks(n); ++i, x += QK_K) {
    const float id = store_absmax_scale(x, y[i].d);
    for (int half = 0; half < 2; ++half) {
      for (int m = 0; m < 32; ++m) {
        int q = 0;
        for (int lane = 0; lane < 4; ++lane) q |= (tq_code(x[128 * half + 32 * lane + m], id) & 3) << (2 * lane);
        y[i].qs[32 * half + m] = static_cast<uint8_t>(q);
      }
    }
  }
}

// ---- TQ1_0 and TQ2_0 alike: value = trit * d ----

template <typename Block>
void dequantize_tq(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const Block*>(src);
  int v[QK_K];
  for (int64_t i = 0; i < super_blocks(n); ++i, y += QK_K) {
    const float d = fp16_to_fp32(x[i].d);
    decode(x[i], v);
    for (int j = 0; j < QK_K; ++j) y[j] = static_cast<float>(v[j]) * d;
  }
}

template <typename Block>
float dot_tq_q8_K(int64_t n, const void* w, const void* a) {
  const auto trits = [](const Block& b, int* v) { decode(b, v); };
  const auto term = [](const Block& x, const block_q8_K& y, int sumi) {
    return static_cast<float>(sumi) * (fp16_to_fp32(x.d) * y.d);
  };
  return block_dot<Block, block_q8_K, QK_K>(n, w, a, trits, term);
}

// ---- I2_S (bitnet.cpp, QK_I2_S = 128 on x86) ----
//
// Per 128 values, 32 bytes: byte g holds values g, g+32, g+64, g+96 in bits 7-6, 5-4, 3-2, 1-0.
// Codes 0, 1, 2 mean -1, 0, +1 (3 is never written; it reads as +2, as bitnet.cpp's dot product
// sum(code * a) - sum(a) treats it). The rows here are at unit scale.

constexpr int kI2sBlock = 128;
constexpr int kI2sGroup = 32;

int i2s_value(const uint8_t* block, int e) {
  const int group = e / kI2sGroup;
  return ((block[e % kI2sGroup] >> (6 - 2 * group)) & 3) - 1;
}

// bitnet.cpp's quantize_i2_s keeps only the sign: |w| < 1e-6 -> 0, else w > 0 ? +1 : -1 (the
// tensor scale is max|w|, so this equals round(w / scale) on ternary weights). The sign rule
// needs no scale, which lets the row quantizer work without it.
int i2s_code(float w) {
  if (std::fabs(static_cast<double>(w)) < 1e-6) return 1;
  return w > 0.0f ? 2 : 0;
}

void quantize_i2_s(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kI2sBlock; ++b, x += kI2sBlock, y += kI2sGroup) {
    for (int g = 0; g < kI2sGroup; ++g) {
      int byte = 0;
      for (int group = 0; group < 4; ++group) byte |= i2s_code(x[group * kI2sGroup + g]) << (6 - 2 * group);
      y[g] = static_cast<uint8_t>(byte);
    }
  }
}

void dequantize_i2_s(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kI2sBlock; ++b, x += kI2sGroup, y += kI2sBlock) {
    for (int e = 0; e < kI2sBlock; ++e) y[e] = static_cast<float>(i2s_value(x, e));
  }
}

// bitnet.cpp's activations for I2_S (I8_S): one scale per row (token), s = 127 / max|x| with max|x|
// at least 1e-5, levels clamp(nearest(x * s), -128, 127) rounded half to even (ggml's
// nearest_int), and their sum. Row: [float s][int32 sum][int8 levels].
struct I8sRow {
  float s;
  int32_t sum;
};

void quantize_i8_s(const float* x, void* dst, int64_t n) {
  float amax = 1e-5f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));  // fmax skips NaN
  const float s = 127.0f / amax;
  auto* levels = static_cast<int8_t*>(dst) + sizeof(I8sRow);
  int32_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float p = x[i] * s;
    const long q = std::isnan(p) ? 0 : std::lrint(std::clamp(p, -128.0f, 127.0f));  // lrint: half to even
    levels[i] = static_cast<int8_t>(q);
    sum += static_cast<int32_t>(q);
  }
  const I8sRow head{s, sum};
  std::memcpy(dst, &head, sizeof(head));
}

void dequantize_i8_s(const void* src, float* y, int64_t n) {
  I8sRow head;
  std::memcpy(&head, src, sizeof(head));
  const auto* levels = static_cast<const int8_t*>(src) + sizeof(I8sRow);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(levels[i]) / head.s;
}

// bitnet.cpp's I2_S x I8_S dot at unit scale: ((float)sum(code * q) - (float)sum(q)) / s; both
// integers are below 2^24, so this is (float)sum((code - 1) * q) / s. The caller multiplies by the
// tensor scale.
float dot_i2_s_i8_s(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint8_t*>(w);
  I8sRow head;
  std::memcpy(&head, a, sizeof(head));
  const auto* q = static_cast<const int8_t*>(a) + sizeof(I8sRow);
  int32_t sumi = 0;
  for (int64_t b = 0; b < n / kI2sBlock; ++b, x += kI2sGroup, q += kI2sBlock) {
    for (int e = 0; e < kI2sBlock; ++e) sumi += i2s_value(x, e) * q[e];
  }
  return static_cast<float>(sumi) / head.s;
}

// ---- IQ1_BN / IQ2_BN (ik_llama.cpp), 64 values per block, scale at the start of each row ----

constexpr int kBnBlock = 64;

// IQ2_BN: [f32 d] then 16 bytes per block; value 16g + i is in bits 2g..2g+1 of byte i.
void dequantize_iq2_bn(const void* src, float* y, int64_t n) {
  const auto* row = static_cast<const uint8_t*>(src);
  float d;
  std::memcpy(&d, row, sizeof(d));
  const uint8_t* qs = row + sizeof(d);
  for (int64_t b = 0; b < n / kBnBlock; ++b, qs += 16, y += kBnBlock) {
    for (int e = 0; e < kBnBlock; ++e) {
      const int code = (qs[e % 16] >> (2 * (e / 16))) & 3;
      y[e] = d * static_cast<float>(code - 1);
    }
  }
}

// IQ1_BN: [f16 d] then 13 bytes per block: ql[12], extra. Each group of 16 values is 3 ql bytes of
// 5 trits (value 5k + j of the group is trit j of byte k, trit 0 least significant) plus trit
// (group) of `extra`. Trit j is the top trit of byte * 3^(4-j) (mod 256), read as
// (v + v/2) >> 7 like ik_llama.
constexpr uint8_t kBnMult[5] = {81, 27, 9, 3, 1};

int bn_trit(uint8_t byte, int j) {
  const auto v = static_cast<uint8_t>(byte * kBnMult[j]);
  return ((v + (v >> 1)) >> 7) - 1;
}

void dequantize_iq1_bn(const void* src, float* y, int64_t n) {
  const auto* row = static_cast<const uint8_t*>(src);
  uint16_t d_bits;
  std::memcpy(&d_bits, row, sizeof(d_bits));
  const float d = fp16_to_fp32(d_bits);
  const uint8_t* block = row + sizeof(d_bits);
  for (int64_t b = 0; b < n / kBnBlock; ++b, block += 13) {
    const uint8_t extra = block[12];
    for (int group = 0; group < 4; ++group) {
      for (int k = 0; k < 3; ++k) {
        for (int j = 0; j < 5; ++j) *y++ = d * static_cast<float>(bn_trit(block[3 * group + k], j));
      }
      *y++ = d * static_cast<float>(bn_trit(extra, group));
    }
  }
}

}  // namespace

void add_ternary_formats(std::vector<Format>& table) {
  table.push_back(reference_format(DType::TQ1_0, dequantize_tq<block_tq1_0>, quantize_tq1_0, DType::Q8_K,
                                   dot_tq_q8_K<block_tq1_0>));
  table.push_back(reference_format(DType::TQ2_0, dequantize_tq<block_tq2_0>, quantize_tq2_0, DType::Q8_K,
                                   dot_tq_q8_K<block_tq2_0>));
  // As bitnet.cpp: I2_S meets per-token int8 activations (I8_S, the reference models' absmax
  // quantization), which have no dot product of their own.
  table.push_back(reference_format(DType::I2_S, dequantize_i2_s, quantize_i2_s, DType::I8_S, dot_i2_s_i8_s));
  table.push_back(reference_format(DType::I8_S, dequantize_i8_s, quantize_i8_s, DType::F32, nullptr));
  // Read-only: okapi neither writes these nor has their dot products (ik_llama pairs them with its
  // Q8_K64); callers dequantize to F32.
  table.push_back(reference_format(DType::IQ1_BN, dequantize_iq1_bn, nullptr, DType::F32, nullptr));
  table.push_back(reference_format(DType::IQ2_BN, dequantize_iq2_bn, nullptr, DType::F32, nullptr));
}

}  // namespace okapi::quant::detail
