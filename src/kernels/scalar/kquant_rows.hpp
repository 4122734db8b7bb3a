// Reference (scalar) rows of the k-quant formats, bit-compatible with ggml: dequantize_row_q*_K,
// quantize_row_q*_K_ref (no importance matrix) and the generic ggml_vec_dot_q*_K_q8_K.
// Private to quant/scalar: the rest of okapi reaches them through the format table.
#pragma once
#include "kernels/scalar/kquant_strict_fp.hpp"  // the templates below must not contract a*b+c either

#include <algorithm>
#include <cstdint>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/scalar/kquant_search.hpp"

namespace okapi::quant::kquant {

void dequantize_q2_K(const void* src, float* dst, int64_t n);
void quantize_q2_K(const float* src, void* dst, int64_t n);
float vec_dot_q2_K(int64_t n, const void* w, const void* a);

void dequantize_q3_K(const void* src, float* dst, int64_t n);
void quantize_q3_K(const float* src, void* dst, int64_t n);
float vec_dot_q3_K(int64_t n, const void* w, const void* a);

void dequantize_q4_K(const void* src, float* dst, int64_t n);
void quantize_q4_K(const float* src, void* dst, int64_t n);
float vec_dot_q4_K(int64_t n, const void* w, const void* a);

void dequantize_q5_K(const void* src, float* dst, int64_t n);
void quantize_q5_K(const float* src, void* dst, int64_t n);
float vec_dot_q5_K(int64_t n, const void* w, const void* a);

void dequantize_q6_K(const void* src, float* dst, int64_t n);
void quantize_q6_K(const float* src, void* dst, int64_t n);
float vec_dot_q6_K(int64_t n, const void* w, const void* a);

// quantize_q*_K with quant_weights (quantize_row_q*_K_impl): one row of n, `importance` n floats.
void quantize_q2_K_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_q3_K_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_q4_K_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_q5_K_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_q6_K_weighted(const float* src, void* dst, int64_t n, const float* importance);

void dequantize_q8_K(const void* src, float* dst, int64_t n);
void quantize_q8_K(const float* src, void* dst, int64_t n);

// Number of 256-element super-blocks in a row of n; throws for a length that does not fit.
inline int64_t super_blocks(int64_t n, DType type) {
  if (n < 0 || n % QK_K != 0) {
    throw_error("{} row length {} is not a multiple of {}", dtype_name(type), n, QK_K);
  }
  return n / QK_K;
}

// ggml's scalar k-quant dot products keep 8 float partial sums: lane l collects, per super-block,
// d * (integer dot product of the elements whose index % 8 == l). The lanes are added in order at
// the end. Integer parts are exact, so only this float structure matters for bit-equality.
class LaneSums {
 public:
  // Adds scale * q8[e] * q[e] for e in [0, count) to the integer lanes of the current block.
  void add_group(int32_t scale, const int8_t* q8, const int8_t* q, int count) {
    for (int e = 0; e < count; ++e) block_[e % 8] += scale * (q8[e] * q[e]);
  }
  // Closes a super-block with its float scale d.
  void finish_block(float d) {
    for (int l = 0; l < 8; ++l) {
      lanes_[l] += d * static_cast<float>(block_[l]);
      block_[l] = 0;
    }
  }
  float total(float start) const {
    for (float lane : lanes_) start += lane;
    return start;
  }

 private:
  int32_t block_[8] = {};
  float lanes_[8] = {};
};

// quantize_row_q*_K_ref: `quantize_block(x, block)` for each super-block in order.
template <typename Block, typename QuantizeBlock>
void quantize_super_blocks(const float* src, void* dst, int64_t n, DType type, QuantizeBlock quantize_block) {
  auto* blocks = static_cast<Block*>(dst);
  const int64_t nb = super_blocks(n, type);
  for (int64_t i = 0; i < nb; ++i) quantize_block(src + i * QK_K, blocks[i]);
}

// The same with importance weights: `quantize_block(x, qw, block)`, qw the block's 256 weights.
template <typename Block, typename QuantizeBlock>
void quantize_super_blocks_weighted(const float* src, void* dst, int64_t n, const float* importance, DType type,
                                    QuantizeBlock quantize_block) {
  auto* blocks = static_cast<Block*>(dst);
  const int64_t nb = super_blocks(n, type);
  for (int64_t i = 0; i < nb; ++i) quantize_block(src + i * QK_K, importance + i * QK_K, blocks[i]);
}

// The last step of the Q3_K and Q6_K quantizers: re-pick the levels of each 16-element group
// against the scale that is actually stored, d = d_super * group_scale(j):
// L = clamp(nearest_int(x / d), -nmax, nmax - 1) + nmax. A group whose stored scale is 0 keeps its levels.
template <typename GroupScale>
void requantize_groups16(const float* x, float d_super, int nmax, GroupScale group_scale, int8_t* L) {
  for (int j = 0; j < QK_K / 16; ++j) {
    const float d = d_super * static_cast<float>(group_scale(j));
    if (d == 0.0f) continue;
    for (int l = 0; l < 16; ++l) {
      const int q = nearest_int(x[16 * j + l] / d);
      L[16 * j + l] = static_cast<int8_t>(std::clamp(q, -nmax, nmax - 1) + nmax);
    }
  }
}

// ggml_vec_dot_q{3,6}_K_q8_K's generic path: 16 groups of 16 elements, each with a signed integer
// scale `group_scale(block, j)` and no min; `level(block, e)` is element e's signed level.
template <typename Block, typename Level, typename GroupScale>
float vec_dot_groups16(int64_t n, const void* w, const void* a, DType type, Level level, GroupScale group_scale) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  const int64_t nb = super_blocks(n, type);
  LaneSums sums;
  int8_t levels[QK_K];
  for (int64_t i = 0; i < nb; ++i) {
    for (int e = 0; e < QK_K; ++e) levels[e] = static_cast<int8_t>(level(x[i], e));
    for (int j = 0; j < QK_K / 16; ++j) sums.add_group(group_scale(x[i], j), y[i].qs + 16 * j, levels + 16 * j, 16);
    sums.finish_block(fp16_to_fp32(x[i].d) * y[i].d);
  }
  return sums.total(0.0f);
}

}  // namespace okapi::quant::kquant
