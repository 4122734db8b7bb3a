// Reference (scalar) rows of the k-quant formats, bit-compatible with ggml: dequantize_row_q*_K,
// quantize_row_q*_K_ref (no importance matrix) and the generic ggml_vec_dot_q*_K_q8_K.
// Private to quant/scalar: the rest of okapi reaches them through the format table.
#pragma once
#include <cstdint>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "quant/blocks.hpp"

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

}  // namespace okapi::quant::kquant
