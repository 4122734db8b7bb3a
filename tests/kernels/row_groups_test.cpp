// The format table's row-group kernels (quant.hpp RowGroupKernels: weights repacked into groups of
// interleaved rows, one kernel for decode and prefill), on every tier this CPU runs that has them:
//  * prepared activations hold the reference quantizer's levels and scales (Q8_0, Q8_1, Q8_K);
//  * every (row, token) result equals, bit for bit, a scalar model of the kernels' arithmetic
//    (per block in order: acc = fma(d_w * d_a, float(exact integer dot), acc), then for Q4_1 / Q5_1
//    acc = fma(m_w, s_a, acc); for Q6_K / Q4_K
//    the integer dot of a super-block is sum_j scale_j * dot_j over its sub-blocks (IQ4_XS: its
//    blocks of 32, the codebook levels, scales ls - 32), and Q4_K / Q5_K
//    then subtract (dmin_w * d_a) * float(sum_j min_j * sum(a_j)) in a second FMA), for any
//    number of rows (partial last group) and tokens (partial token groups), extreme levels
//    included;
//  * and agrees with the reference vec_dot within the tolerance of a reordered float sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "core/cpu.hpp"
#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "support/random_data.hpp"

namespace okapi::quant {
namespace {

using test::gaussian;

// The value of type T stored at p (a prepared activation's scale or offset, a block's scale).
template <typename T>
T read_at(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

struct Tiered {
  Isa tier;
  DType type;
};

// Every (tier, quantized format) pair with row-group kernels (the float formats' are the float
// GEMM's: tests/kernels/float_row_groups_test.cpp).
std::vector<Tiered> row_group_formats() {
  std::vector<Tiered> out;
  for (Isa tier : available_isas()) {
    for (DType type : supported_types()) {
      // IQ3_* / IQ1_*: their own scalar models are in iq3_test.cpp / iq1_test.cpp.
      const bool own_test = type == DType::IQ3_XXS || type == DType::IQ3_S || type == DType::IQ1_S || type == DType::IQ1_M;
      if (format(type, tier).row_groups.rows > 0 && layout(type).block_size > 1 && !own_test) out.push_back({tier, type});
    }
  }
  return out;
}

// Level e % 32 of a Q4_0 / Q4_1 block (0..15), and of a Q5_0 / Q5_1 block (0..31; ggml's
// dequantize_row_q5_0: qh bit i is level i's fifth bit).
template <typename Block>
int nibble_level(const Block& b, int64_t e) {
  const int i = static_cast<int>(e % 32);
  return i < 16 ? b.qs[i] & 0x0f : b.qs[i - 16] >> 4;
}
template <typename Block>
int five_bit_level(const Block& b, int64_t e) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, sizeof(qh));
  return nibble_level(b, e) | static_cast<int>(((qh >> (e % 32)) & 1) << 4);
}

// The 256 values (-1..1) of block b of a TQ2_0 / TQ1_0 row: the reference dequantizer on a copy of
// the block with d = 1 (d is the last field of both).
std::vector<int> ternary_levels(DType type, const uint8_t* row, int64_t b) {
  const size_t bytes = layout(type).block_bytes;
  std::vector<uint8_t> block(row + static_cast<size_t>(b) * bytes, row + static_cast<size_t>(b + 1) * bytes);
  const uint16_t one = fp32_to_fp16(1.0f);
  std::memcpy(block.data() + bytes - sizeof(one), &one, sizeof(one));
  std::vector<float> values(QK_K);
  format(type, Isa::scalar).dequantize_ref(block.data(), values.data(), QK_K);
  return std::vector<int>(values.begin(), values.end());
}

// The level e of a weight row as the kernels multiply it (Q8_0: signed; Q4_0: 0..15 - 8; Q6_K:
// 0..63, its -32 being applied through the activation sums), and the fp16 scale of block b.
// ggml's kvalues_iq4nl and kvalues_mxfp4.
constexpr int kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
constexpr int kMxfp4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// IQ4_XS's block scale ls - 32 of block j (0..7) of a super-block.
int iq4_xs_scale(const block_iq4_xs& b, int j) {
  return (((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4)) - 32;
}

int weight_level(DType type, const uint8_t* row, int64_t e) {
  if (type == DType::IQ4_NL) return kIq4Levels[nibble_level(reinterpret_cast<const block_iq4_nl*>(row)[e / 32], e)];
  if (type == DType::MXFP4) return kMxfp4Levels[nibble_level(reinterpret_cast<const block_mxfp4*>(row)[e / 32], e)];
  if (type == DType::IQ4_XS) {
    const auto& b = reinterpret_cast<const block_iq4_xs*>(row)[e / QK_K];
    const int i = static_cast<int>(e % QK_K), j = i / 32, l = i % 32;
    return kIq4Levels[l < 16 ? b.qs[16 * j + l] & 0xF : b.qs[16 * j + l - 16] >> 4];
  }
  if (type == DType::Q8_0) return reinterpret_cast<const block_q8_0*>(row)[e / QK8_0].qs[e % QK8_0];
  if (type == DType::Q2_K || type == DType::Q3_K) {  // ggml's dequantize_row_q2_K / q3_K
    const int i = static_cast<int>(e % QK_K), h = i / 128, j = (i % 128) / 32, l = i % 32;
    if (type == DType::Q2_K) return (reinterpret_cast<const block_q2_K*>(row)[e / QK_K].qs[32 * h + l] >> (2 * j)) & 3;
    const auto& b = reinterpret_cast<const block_q3_K*>(row)[e / QK_K];
    return ((b.qs[32 * h + l] >> (2 * j)) & 3) - (((b.hmask[l] >> (4 * h + j)) & 1) ? 0 : 4);
  }
  if (type == DType::Q4_0) return nibble_level(reinterpret_cast<const block_q4_0*>(row)[e / QK4_0], e) - 8;
  if (type == DType::Q4_1) return nibble_level(reinterpret_cast<const block_q4_1*>(row)[e / QK4_1], e);
  if (type == DType::I2_S) {  // bitnet.cpp: byte g of a 128-value block holds g, g+32, g+64, g+96 from the top
    const uint8_t byte = row[e / 128 * 32 + e % 32];
    return ((byte >> (6 - 2 * (e % 128 / 32))) & 3) - 1;
  }
  if (type == DType::Q5_0) return five_bit_level(reinterpret_cast<const block_q5_0*>(row)[e / QK5_0], e) - 16;
  if (type == DType::Q5_1) return five_bit_level(reinterpret_cast<const block_q5_1*>(row)[e / QK5_1], e);
  const int i = static_cast<int>(e % QK_K);
  if (type == DType::Q4_K) {
    const auto& b = reinterpret_cast<const block_q4_K*>(row)[e / QK_K];
    return (b.qs[(i / 64) * 32 + i % 32] >> (4 * ((i / 32) % 2))) & 0xF;
  }
  if (type == DType::Q5_K) {  // ggml's dequantize_row_q5_K: qh bit i / 32 of byte i % 32 adds 16
    const auto& b = reinterpret_cast<const block_q5_K*>(row)[e / QK_K];
    const int low = (b.qs[(i / 64) * 32 + i % 32] >> (4 * ((i / 32) % 2))) & 0xF;
    return low | (((b.qh[i % 32] >> (i / 32)) & 1) << 4);
  }
  const auto& b = reinterpret_cast<const block_q6_K*>(row)[e / QK_K];
  const int h = i / 128, k = (i % 128) / 32, l = i % 32;
  const int low = (b.ql[h * 64 + (k % 2) * 32 + l] >> (4 * (k / 2))) & 0xF;
  return low | (((b.qh[h * 32 + l] >> (2 * k)) & 3) << 4);
}

// Q3_K's signed 6-bit scale of sub-block j (-32..31).
int q3_K_scale(const block_q3_K& b, int j) {
  const int low = j < 8 ? b.scales[j] & 0xF : b.scales[j - 8] >> 4;
  return (low | ((b.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
}

// Q4_K's and Q5_K's 6-bit scale and min of sub-block j (ggml's get_scale_min_k4).
std::pair<int, int> k4_scale_min(const uint8_t* q, int j) {
  if (j < 4) return {q[j] & 63, q[j + 4] & 63};
  return {(q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)};
}
uint16_t weight_scale(DType type, const uint8_t* row, int64_t b) {
  if (type == DType::I2_S) return fp32_to_fp16(1.0f);  // unit rows: the tensor scale is the matmul's
  if (type == DType::Q8_0) return reinterpret_cast<const block_q8_0*>(row)[b].d;
  if (type == DType::Q5_0) return reinterpret_cast<const block_q5_0*>(row)[b].d;
  if (type == DType::Q4_1) return reinterpret_cast<const block_q4_1*>(row)[b].d;
  if (type == DType::Q5_1) return reinterpret_cast<const block_q5_1*>(row)[b].d;
  return reinterpret_cast<const block_q4_0*>(row)[b].d;
}
// The float scale of block b of a 32-value format: the fp16 d, or MXFP4's 2^(e - 128).
float weight_scale_float(DType type, const uint8_t* row, int64_t b) {
  if (type == DType::MXFP4) {
    const int e = reinterpret_cast<const block_mxfp4*>(row)[b].e;
    return std::ldexp(1.0f, e - 128);  // ggml_e8m0_to_fp32_half, subnormal for e < 2
  }
  if (type == DType::IQ4_NL) return fp16_to_fp32(reinterpret_cast<const block_iq4_nl*>(row)[b].d);
  return fp16_to_fp32(weight_scale(type, row, b));
}
// The fp16 min m of block b of an affine format (Q4_1, Q5_1).
uint16_t weight_min(DType type, const uint8_t* row, int64_t b) {
  if (type == DType::Q4_1) return reinterpret_cast<const block_q4_1*>(row)[b].m;
  return reinterpret_cast<const block_q5_1*>(row)[b].m;
}

struct Problem {
  DType type = DType::Q8_0, act_type = DType::Q8_0;
  int64_t n_in = 0, n_out = 0, n_tokens = 0;
  std::vector<uint8_t> w;    // n_out rows in storage layout
  std::vector<uint8_t> act;  // n_tokens rows of act_type (reference quantizer)
  std::vector<float> x;
  size_t w_row() const { return *row_bytes(type, n_in); }
  size_t a_row() const { return *row_bytes(act_type, n_in); }
  const uint8_t* w_at(int64_t o) const { return w.data() + static_cast<size_t>(o) * w_row(); }
  const uint8_t* act_at(int64_t t) const { return act.data() + static_cast<size_t>(t) * a_row(); }
  void quantize_activations() {
    act.resize(a_row() * static_cast<size_t>(n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t) {
      format(act_type, Isa::scalar)
          .quantize_ref(x.data() + t * n_in, act.data() + static_cast<size_t>(t) * a_row(), n_in);
    }
  }
};

// Weights at the ends of their ranges: every Q8_0 level -128 (its quantizer never writes it),
// Q4_0 blocks of all 0 or all 15, Q6_K levels all 63 with scales -128, Q4_K levels all 15 (Q5_K
// 31) with scales and mins 63.
void make_extreme(Problem& p) {
  const size_t block = layout(p.type).block_bytes;
  for (size_t b = 0; b < p.w.size() / block; ++b) {
    uint8_t* blk = p.w.data() + b * block;
    if (p.type == DType::Q8_0) std::memset(reinterpret_cast<block_q8_0*>(blk)->qs, 0x80, QK8_0);
    if (p.type == DType::Q4_0) std::memset(reinterpret_cast<block_q4_0*>(blk)->qs, (b % 2) ? 0x00 : 0xff, QK4_0 / 2);
    if (p.type == DType::I2_S) std::memset(blk, (b % 2) ? 0x00 : 0xaa, block);  // all -1 or all +1
    if (p.type == DType::Q4_1) std::memset(reinterpret_cast<block_q4_1*>(blk)->qs, (b % 2) ? 0x00 : 0xff, QK4_1 / 2);
    const auto five_bits = [&](auto* q5) {  // all levels 0 or all 31
      std::memset(q5->qs, (b % 2) ? 0x00 : 0xff, sizeof(q5->qs));
      std::memset(q5->qh, (b % 2) ? 0x00 : 0xff, sizeof(q5->qh));
    };
    if (p.type == DType::Q5_0) five_bits(reinterpret_cast<block_q5_0*>(blk));
    if (p.type == DType::Q5_1) five_bits(reinterpret_cast<block_q5_1*>(blk));
    if (p.type == DType::TQ2_0 || p.type == DType::TQ1_0) {  // all levels +1 or all -1
      std::memset(blk, (b % 2) ? 0x00 : (p.type == DType::TQ2_0 ? 0xaa : 0xff), block - sizeof(uint16_t));
    }
    if (p.type == DType::Q2_K) {  // levels all 3 with scales and mins 15, or all 0
      auto* q2 = reinterpret_cast<block_q2_K*>(blk);
      std::memset(q2->qs, (b % 2) ? 0x00 : 0xff, sizeof(q2->qs));
      std::memset(q2->scales, 0xff, sizeof(q2->scales));
    }
    if (p.type == DType::Q3_K) {  // levels all -4 with scales -32, or all 3 with scales 31
      auto* q3 = reinterpret_cast<block_q3_K*>(blk);
      std::memset(q3->qs, (b % 2) ? 0x00 : 0xff, sizeof(q3->qs));
      std::memset(q3->hmask, (b % 2) ? 0x00 : 0xff, sizeof(q3->hmask));
      std::memset(q3->scales, (b % 2) ? 0x00 : 0xff, sizeof(q3->scales));
    }
    if (p.type == DType::IQ4_NL) std::memset(reinterpret_cast<block_iq4_nl*>(blk)->qs, (b % 2) ? 0x00 : 0xff, 16);
    if (p.type == DType::MXFP4) std::memset(reinterpret_cast<block_mxfp4*>(blk)->qs, (b % 2) ? 0x77 : 0xff, 16);
    if (p.type == DType::IQ4_XS) {  // levels -127 with scales -32, or 113 with scales 31
      auto* x4 = reinterpret_cast<block_iq4_xs*>(blk);
      std::memset(x4->qs, (b % 2) ? 0x00 : 0xff, sizeof(x4->qs));
      std::memset(x4->scales_l, (b % 2) ? 0x00 : 0xff, sizeof(x4->scales_l));
      x4->scales_h = (b % 2) ? 0 : 0xffff;
    }
    if (p.type == DType::Q6_K) {
      auto* q6 = reinterpret_cast<block_q6_K*>(blk);
      std::memset(q6->ql, 0xff, sizeof(q6->ql));
      std::memset(q6->qh, 0xff, sizeof(q6->qh));
      std::memset(q6->scales, 0x80, sizeof(q6->scales));
    }
    if (p.type == DType::Q4_K) {
      auto* q4 = reinterpret_cast<block_q4_K*>(blk);
      std::memset(q4->qs, 0xff, sizeof(q4->qs));
      std::memset(q4->scales, 0xff, sizeof(q4->scales));
    }
    if (p.type == DType::Q5_K) {
      auto* q5 = reinterpret_cast<block_q5_K*>(blk);
      std::memset(q5->qs, 0xff, sizeof(q5->qs));
      std::memset(q5->qh, 0xff, sizeof(q5->qh));
      std::memset(q5->scales, 0xff, sizeof(q5->scales));
    }
  }
}

Problem make_problem(DType type, int64_t n_in, int64_t n_out, int64_t n_tokens, uint32_t seed, bool extreme) {
  Problem p{type, format(type, Isa::scalar).vec_dot_type, n_in, n_out, n_tokens, {}, {}, {}};
  std::vector<float> w = gaussian(static_cast<size_t>(n_in * n_out), seed);
  p.x = gaussian(static_cast<size_t>(n_in * n_tokens), seed + 1, 3.0f);
  if (extreme) {
    for (size_t i = 0; i < p.x.size(); ++i) p.x[i] = (i % 3 == 0) ? -5.0f : 5.0f;  // levels +-127
  }
  const auto& scalar_format = format(type, Isa::scalar);
  if (scalar_format.quantize_ref != nullptr || scalar_format.quantize_weighted == nullptr) {
    p.w = quantize_tensor(type, w.data(), std::vector<int64_t>{n_in, n_out}, true);
  } else {  // formats that need importance weights (IQ2_XXS, IQ2_XS): unit weights
    const auto& f = format(type, Isa::scalar);
    const std::vector<float> ones(static_cast<size_t>(n_in), 1.0f);
    p.w.resize(p.w_row() * static_cast<size_t>(n_out));
    for (int64_t o = 0; o < n_out; ++o) f.quantize_weighted(w.data() + o * n_in, p.w.data() + static_cast<size_t>(o) * p.w_row(), n_in, ones.data());
  }
  if (extreme) make_extreme(p);
  p.quantize_activations();
  return p;
}

// The scalar model of one (row, token) lane.
float model_dot(const Problem& p, int64_t o, int64_t t) {
  const uint8_t* row = p.w_at(o);
  float acc = 0.0f;
  if (p.act_type == DType::Q8_0) {
    const auto* a = reinterpret_cast<const block_q8_0*>(p.act_at(t));
    for (int64_t b = 0; b < p.n_in / QK8_0; ++b) {
      int32_t sum = 0;
      for (int64_t j = 0; j < QK8_0; ++j) sum += weight_level(p.type, row, b * QK8_0 + j) * a[b].qs[j];
      acc = std::fma(weight_scale_float(p.type, row, b) * fp16_to_fp32(a[b].d), static_cast<float>(sum), acc);
    }
    return acc;
  }
  if (p.act_type == DType::I8_S) {  // bitnet.cpp: (float)sum((code - 1) * q) / s, s one per token
    const uint8_t* a = p.act_at(t);
    const auto* q = reinterpret_cast<const int8_t*>(a + 8);
    int32_t sum = 0;
    for (int64_t e = 0; e < p.n_in; ++e) sum += weight_level(p.type, row, e) * q[e];
    return static_cast<float>(sum) / read_at<float>(a);
  }
  if (p.act_type == DType::Q8_1) {  // affine weights: then acc = fma(m_w, s_a, acc)
    const auto* a = reinterpret_cast<const block_q8_1*>(p.act_at(t));
    for (int64_t b = 0; b < p.n_in / QK8_1; ++b) {
      int32_t sum = 0;
      for (int64_t j = 0; j < QK8_1; ++j) sum += weight_level(p.type, row, b * QK8_1 + j) * a[b].qs[j];
      acc = std::fma(fp16_to_fp32(weight_scale(p.type, row, b)) * fp16_to_fp32(a[b].d), static_cast<float>(sum), acc);
      acc = std::fma(fp16_to_fp32(weight_min(p.type, row, b)), fp16_to_fp32(a[b].s), acc);
    }
    return acc;
  }
  const auto* a = reinterpret_cast<const block_q8_K*>(p.act_at(t));
  if (p.type == DType::IQ2_XXS || p.type == DType::IQ2_XS || p.type == DType::IQ2_S) {
    // Value i at d = 1 is (2s + 1) / 8 * grid * sign: 8 times it is the integer the kernels sum;
    // then acc = fma(d_w * (d_a / 8), sum, acc). d is the first field of the three blocks.
    const size_t block_bytes = layout(p.type).block_bytes;
    for (int64_t b = 0; b < p.n_in / QK_K; ++b) {
      std::vector<uint8_t> block(row + static_cast<size_t>(b) * block_bytes, row + static_cast<size_t>(b + 1) * block_bytes);
      const auto d = read_at<uint16_t>(block.data());
      const uint16_t one = fp32_to_fp16(1.0f);
      std::memcpy(block.data(), &one, sizeof(one));
      std::vector<float> values(QK_K);
      format(p.type, Isa::scalar).dequantize_ref(block.data(), values.data(), QK_K);
      int32_t sum = 0;
      for (int64_t i = 0; i < QK_K; ++i) sum += static_cast<int32_t>(8.0f * values[static_cast<size_t>(i)]) * a[b].qs[i];
      acc = std::fma(fp16_to_fp32(d) * (a[b].d * 0.125f), static_cast<float>(sum), acc);
    }
    return acc;
  }
  if (p.type == DType::TQ2_0 || p.type == DType::TQ1_0) {  // d is the last field of both blocks
    const size_t block_bytes = layout(p.type).block_bytes;
    for (int64_t b = 0; b < p.n_in / QK_K; ++b) {
      const std::vector<int> levels = ternary_levels(p.type, row, b);
      int32_t sum = 0;
      for (int64_t i = 0; i < QK_K; ++i) sum += levels[static_cast<size_t>(i)] * a[b].qs[i];
      const auto d = read_at<uint16_t>(row + static_cast<size_t>(b + 1) * block_bytes - sizeof(uint16_t));
      acc = std::fma(fp16_to_fp32(d) * a[b].d, static_cast<float>(sum), acc);
    }
    return acc;
  }
  if (p.type == DType::Q2_K) {
    for (int64_t b = 0; b < p.n_in / QK_K; ++b) {
      const auto& w = reinterpret_cast<const block_q2_K*>(row)[b];
      int32_t scaled = 0, mins = 0;
      for (int j = 0; j < QK_K / 16; ++j) {
        int32_t dot = 0, sum = 0;
        for (int i = 16 * j; i < 16 * j + 16; ++i) {
          dot += weight_level(p.type, row, b * QK_K + i) * a[b].qs[i];
          sum += a[b].qs[i];
        }
        scaled += (w.scales[j] & 0xF) * dot;
        mins += (w.scales[j] >> 4) * sum;
      }
      acc = std::fma(fp16_to_fp32(w.d) * a[b].d, static_cast<float>(scaled), acc);
      acc = std::fma(-(fp16_to_fp32(w.dmin) * a[b].d), static_cast<float>(mins), acc);
    }
    return acc;
  }
  if (p.type == DType::Q3_K) {
    for (int64_t b = 0; b < p.n_in / QK_K; ++b) {
      const auto& w = reinterpret_cast<const block_q3_K*>(row)[b];
      int32_t sum = 0;
      for (int j = 0; j < QK_K / 16; ++j) {
        int32_t dot = 0;
        for (int i = 16 * j; i < 16 * j + 16; ++i) dot += weight_level(p.type, row, b * QK_K + i) * a[b].qs[i];
        sum += q3_K_scale(w, j) * dot;
      }
      acc = std::fma(fp16_to_fp32(w.d) * a[b].d, static_cast<float>(sum), acc);
    }
    return acc;
  }
  if (p.type == DType::IQ4_XS) {
    for (int64_t b = 0; b < p.n_in / QK_K; ++b) {
      const auto& w = reinterpret_cast<const block_iq4_xs*>(row)[b];
      int32_t scaled = 0;
      for (int j = 0; j < QK_K / 32; ++j) {
        int32_t dot = 0;
        for (int i = 32 * j; i < 32 * j + 32; ++i) dot += weight_level(p.type, row, b * QK_K + i) * a[b].qs[i];
        scaled += iq4_xs_scale(w, j) * dot;
      }
      acc = std::fma(fp16_to_fp32(w.d) * a[b].d, static_cast<float>(scaled), acc);
    }
    return acc;
  }
  if (p.type == DType::Q4_K || p.type == DType::Q5_K) {
    // Both blocks start with d, dmin and the 12 bytes of scales and mins.
    const size_t block_bytes = layout(p.type).block_bytes;
    for (int64_t b = 0; b < p.n_in / QK_K; ++b) {
      const auto& w = *reinterpret_cast<const block_q4_K*>(row + static_cast<size_t>(b) * block_bytes);
      int32_t scaled = 0, mins = 0;
      for (int j = 0; j < QK_K / 32; ++j) {
        int32_t dot = 0, sum = 0;
        for (int i = 32 * j; i < 32 * j + 32; ++i) {
          dot += weight_level(p.type, row, b * QK_K + i) * a[b].qs[i];
          sum += a[b].qs[i];
        }
        const auto [scale, min] = k4_scale_min(w.scales, j);
        scaled += scale * dot;
        mins += min * sum;
      }
      acc = std::fma(fp16_to_fp32(w.d) * a[b].d, static_cast<float>(scaled), acc);
      acc = std::fma(-(fp16_to_fp32(w.dmin) * a[b].d), static_cast<float>(mins), acc);
    }
    return acc;
  }
  for (int64_t b = 0; b < p.n_in / QK_K; ++b) {
    const auto& w = reinterpret_cast<const block_q6_K*>(row)[b];
    int32_t sum = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      int32_t dot = 0;
      for (int i = 16 * j; i < 16 * j + 16; ++i) dot += (weight_level(p.type, row, b * QK_K + i) - 32) * a[b].qs[i];
      sum += w.scales[j] * dot;
    }
    acc = std::fma(fp16_to_fp32(w.d) * a[b].d, static_cast<float>(sum), acc);
  }
  return acc;
}

struct Packed {
  std::vector<uint8_t> groups, acts;
  size_t a_row = 0;
  const uint8_t* act_at(int64_t t) const { return acts.data() + static_cast<size_t>(t) * a_row; }
};


Packed pack_all(const RowGroupKernels& k, const Problem& p) {
  Packed out;
  const size_t w_row = p.w_row(), g_bytes = k.group_bytes(p.n_in);
  EXPECT_EQ(g_bytes % 64, 0u);
  const int64_t n_groups = (p.n_out + k.rows - 1) / k.rows;
  out.groups.assign(static_cast<size_t>(n_groups) * g_bytes, 0xa5);
  for (int64_t g = 0; g < n_groups; ++g) {
    k.pack(p.w.data() + static_cast<size_t>(g * k.rows) * w_row, w_row, std::min(k.rows, p.n_out - g * k.rows), p.n_in,
           out.groups.data() + static_cast<size_t>(g) * g_bytes);
  }
  out.a_row = k.activation_bytes(p.n_in);
  out.acts.assign(out.a_row * static_cast<size_t>(p.n_tokens), 0x5a);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    k.prepare_activation(p.x.data() + t * p.n_in, p.n_in, out.acts.data() + static_cast<size_t>(t) * out.a_row);
  }
  return out;
}

class RowGroups : public ::testing::TestWithParam<Tiered> {};

// Q8_0 activations (Q8_0, Q4_0 weights): levels, the fp16 scale as float and -bias * sum(levels)
// per block, bias 128 or 8. Token 0 holds rounding ties: blocks whose max|x| is 127 have d = 1,
// so x = +-(k + 0.5) are exact halfway cases (the reference rounds them away from zero); one
// block is all zeros (d = 0), one has a NaN (skipped by the max), one is tiny (subnormal d).
// Q8_1 activations (Q4_1, Q5_1 weights) hold s = d * sum(levels) as float where Q8_0's hold the
// offset.
void check_q8_0_activations(const RowGroupKernels& k, DType type) {
  const bool affine = type == DType::Q4_1 || type == DType::Q5_1;
  Problem p = make_problem(type, 640, 1, 5, 3, false);  // 20 blocks (I2_S: 5 of 128)
  for (int64_t i = 0; i < p.n_in; ++i) {
    const int64_t b = i / QK8_0, j = i % QK8_0;
    const float tie = (j % 2 ? -1.0f : 1.0f) * (static_cast<float>(j) + 0.5f);
    p.x[static_cast<size_t>(i)] = j == 0 ? 127.0f : tie;
    if (b == 1) p.x[static_cast<size_t>(i)] = 0.0f;
    if (b == 3) p.x[static_cast<size_t>(i)] *= 1e-40f;
  }
  p.x[2 * QK8_0 + 5] = std::numeric_limits<float>::quiet_NaN();
  p.x[2 * QK8_0 + 6] = 0.0f;
  p.quantize_activations();
  const Packed packed = pack_all(k, p);
  const int64_t nb = p.n_in / QK8_0;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const uint8_t* row = packed.act_at(t);
    const uint8_t* ref = p.act_at(t);
    const size_t ref_block = affine ? sizeof(block_q8_1) : sizeof(block_q8_0);
    for (int64_t b = 0; b < nb; ++b) {
      SCOPED_TRACE(::testing::Message() << "token " << t << " block " << b);
      const uint8_t* ref_b = ref + static_cast<size_t>(b) * ref_block;
      const int8_t* ref_qs = reinterpret_cast<const int8_t*>(ref_b + (affine ? 4 : 2));
      std::vector<int8_t> got(row + b * QK8_0, row + (b + 1) * QK8_0), want(ref_qs, ref_qs + QK8_0);
      if (t == 0 && b == 2) got[5] = want[5] = 0;  // the reference's level for a NaN is undefined
      ASSERT_EQ(got, want);
      ASSERT_EQ(read_at<float>(row + nb * QK8_0 + b * 4), fp16_to_fp32(read_at<uint16_t>(ref_b)));
      if (affine) {
        if (t == 0 && b == 2) continue;  // s sums the NaN's undefined level
        ASSERT_EQ(read_at<float>(row + nb * (QK8_0 + 4) + b * 4), fp16_to_fp32(read_at<uint16_t>(ref_b + 2)));
        continue;
      }
      int32_t sum = 0;
      for (int8_t q : got) sum += q;
      const bool bias128 = type == DType::Q8_0 || type == DType::IQ4_NL || type == DType::MXFP4;
      ASSERT_EQ(read_at<int32_t>(row + nb * (QK8_0 + 4) + b * 4), -(bias128 ? 128 : type == DType::Q5_0 ? 16 : 8) * sum);
    }
  }
}

// Q8_K activations (K-quant and IQ4_XS weights): levels, the float scale, and 16 words per
// super-block: Q6_K, Q3_K and IQ4_XS -32 * each sum of 16 levels, Q4_K and Q5_K the int16 pairs of
// the sums of 32, Q2_K those of the sums of 16 (then zeros).
void check_q8_K_activations(const RowGroupKernels& k, DType type) {
  const Problem p = make_problem(type, 768, 1, 3, 3, false);
  const Packed packed = pack_all(k, p);
  const int64_t nb = p.n_in / QK_K;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const uint8_t* row = packed.act_at(t);
    const auto* ref = reinterpret_cast<const block_q8_K*>(p.act_at(t));
    for (int64_t b = 0; b < nb; ++b) {
      SCOPED_TRACE(::testing::Message() << "token " << t << " block " << b);
      ASSERT_EQ(std::memcmp(row + b * QK_K, ref[b].qs, QK_K), 0);
      ASSERT_EQ(read_at<float>(row + nb * QK_K + b * 4), ref[b].d);
      for (int j = 0; j < QK_K / 16; ++j) {
        int32_t want = -32 * ref[b].bsums[j];
        if (type == DType::TQ2_0 || type == DType::TQ1_0) {
          want = 0;
          if (j == 0) {
            for (int16_t bsum : ref[b].bsums) want -= bsum;
          }
        }
        if (type == DType::Q2_K) {
          const auto pair = [&](int s16) { return static_cast<uint32_t>(static_cast<uint16_t>(ref[b].bsums[s16])); };
          want = j < 8 ? static_cast<int32_t>(pair(2 * j) | pair(2 * j + 1) << 16) : 0;
        }
        if (type == DType::Q4_K || type == DType::Q5_K) {
          const auto sum32 = [&](int s32) {
            return static_cast<uint16_t>(ref[b].bsums[2 * s32] + ref[b].bsums[2 * s32 + 1]);
          };
          want = j < 4 ? static_cast<int32_t>(sum32(2 * j) | static_cast<uint32_t>(sum32(2 * j + 1)) << 16) : 0;
        }
        ASSERT_EQ(read_at<int32_t>(row + nb * (QK_K + 4) + (b * (QK_K / 16) + j) * 4), want) << j;
      }
    }
  }
}

// I8_S activations (I2_S weights), in the Q8_0 row layout: the reference levels, unit scales,
// -sum(levels) per 32 values, then the token's s. Token 0 has ties (max|x| = 127 gives s = 1, so
// x = k + 0.5 must round to even), a NaN (level 0) and values beyond the clamp; token 1 is all
// zeros (max|x| floored at 1e-5).
void check_i8_s_activations(const RowGroupKernels& k, DType type) {
  Problem p = make_problem(type, 256, 1, 3, 3, false);
  for (int64_t i = 0; i < p.n_in; ++i) {
    p.x[static_cast<size_t>(i)] = i == 0 ? 127.0f : (i % 2 ? -1.0f : 1.0f) * (static_cast<float>(i % 100) + 0.5f);
    p.x[static_cast<size_t>(p.n_in + i)] = 0.0f;
  }
  p.x[7] = std::numeric_limits<float>::quiet_NaN();
  p.x[9] = 1e30f;  // max|x| = 1e30: every other level rounds to 0 or +-1
  p.quantize_activations();
  const Packed packed = pack_all(k, p);
  const int64_t nb = p.n_in / QK8_0;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    SCOPED_TRACE(::testing::Message() << "token " << t);
    const uint8_t* row = packed.act_at(t);
    const uint8_t* ref = p.act_at(t);
    ASSERT_EQ(std::memcmp(row, ref + 8, static_cast<size_t>(p.n_in)), 0);
    for (int64_t b = 0; b < nb; ++b) {
      int32_t sum = 0;
      for (int64_t j = 0; j < QK8_0; ++j) sum += static_cast<int8_t>(row[b * QK8_0 + j]);
      ASSERT_EQ(read_at<float>(row + nb * QK8_0 + b * 4), 1.0f);
      ASSERT_EQ(read_at<int32_t>(row + nb * (QK8_0 + 4) + b * 4), -sum);
    }
    ASSERT_EQ(read_at<float>(row + nb * (QK8_0 + 8)), read_at<float>(ref));
  }
}

TEST_P(RowGroups, PreparedActivationsAreTheReferenceQuantization) {
  const auto [tier, type] = GetParam();
  const RowGroupKernels& k = format(type, tier).row_groups;
  if (format(type, tier).vec_dot_type == DType::I8_S) {
    check_i8_s_activations(k, type);
  } else if (format(type, tier).vec_dot_type == DType::Q8_0 || format(type, tier).vec_dot_type == DType::Q8_1) {
    check_q8_0_activations(k, type);
  } else {
    check_q8_K_activations(k, type);
  }
}

TEST_P(RowGroups, EveryLaneEqualsTheScalarModelBitForBit) {
  const auto [tier, type] = GetParam();
  const RowGroupKernels& k = format(type, tier).row_groups;
  for (bool extreme : {false, true}) {
    const int64_t bs = layout(type).block_size;
    for (const auto& [n_in, n_out, n_tokens] : std::vector<std::array<int64_t, 3>>{
             {bs, 1, 1}, {17 * bs, 37, 19}, {8 * bs, 16, 8}, {3 * bs, 33, 9}, {16 * bs, 5, 2}}) {
      SCOPED_TRACE(::testing::Message() << isa_name(tier) << " " << dtype_name(type) << " n_in " << n_in << " n_out "
                                        << n_out << " tokens " << n_tokens << (extreme ? " extreme" : ""));
      const Problem p = make_problem(type, n_in, n_out, n_tokens, 7, extreme);
      const Packed packed = pack_all(k, p);
      const int64_t y_stride = n_out + 3;  // a wider output row: nothing past n_out is written
      std::vector<float> y(static_cast<size_t>(y_stride * n_tokens), -1.0f);
      k.gemm(n_in, packed.groups.data(), n_out, packed.acts.data(), packed.a_row, n_tokens, y.data(), y_stride);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t o = 0; o < n_out; ++o) {
          ASSERT_EQ(y[static_cast<size_t>(t * y_stride + o)], model_dot(p, o, t)) << "token " << t << " row " << o;
        }
        for (int64_t o = n_out; o < y_stride; ++o) ASSERT_EQ(y[static_cast<size_t>(t * y_stride + o)], -1.0f);
      }
    }
  }
}

TEST_P(RowGroups, AgreesWithTheReferenceDot) {
  const auto [tier, type] = GetParam();
  const RowGroupKernels& k = format(type, tier).row_groups;
  const Problem p = make_problem(type, 2048, 40, 3, 11, false);
  const Packed packed = pack_all(k, p);
  std::vector<float> y(static_cast<size_t>(p.n_out * p.n_tokens));
  k.gemm(p.n_in, packed.groups.data(), p.n_out, packed.acts.data(), packed.a_row, p.n_tokens, y.data(), p.n_out);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    for (int64_t o = 0; o < p.n_out; ++o) {
      const float ref = format(type, Isa::scalar).vec_dot_ref(p.n_in, p.w_at(o), p.act_at(t));
      EXPECT_NEAR(y[static_cast<size_t>(t * p.n_out + o)], ref, 1e-4 * (1.0 + std::fabs(ref)))
          << "token " << t << " row " << o;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, RowGroups, ::testing::ValuesIn(row_group_formats()),
                         [](const ::testing::TestParamInfo<Tiered>& param_info) {
                           return std::string(isa_name(param_info.param.tier)) + "_" +
                                  std::string(dtype_name(param_info.param.type));
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RowGroups);

// Which formats have row-group kernels where: below avx512 only the float formats (from avx2 up);
// on avx512 every weight format but the activation-only ones (Q8_1, Q8_K, I8_S) and ik_llama.cpp's
// read-only IQ1_BN / IQ2_BN.
TEST(RowGroupTable, InstalledOnTheAvx512TierOnly) {
  const std::vector<DType> without_row_groups = {DType::Q8_1, DType::Q8_K, DType::I8_S, DType::IQ1_BN, DType::IQ2_BN};
  for (Isa tier : available_isas()) {
    for (DType type : supported_types()) {
      const bool is_float = type == DType::F32 || type == DType::F16 || type == DType::BF16;
      const bool quantized_weight = !is_float && std::find(without_row_groups.begin(), without_row_groups.end(),
                                                           type) == without_row_groups.end();
      const bool expected = (is_float && tier >= Isa::avx2) || (tier == Isa::avx512 && quantized_weight);
      EXPECT_EQ(format(type, tier).row_groups.rows > 0, expected) << isa_name(tier) << " " << dtype_name(type);
    }
  }
}

}  // namespace
}  // namespace okapi::quant
