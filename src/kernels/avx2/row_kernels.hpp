// AVX2+FMA+F16C row kernels. Same signatures and contracts as the scalar reference rows
// (quant.hpp); callable only after cpu_features().use_avx2() said yes.
//
// Dequantize: bit-identical to the reference (same float operations in the same order).
// Dot products: the integer part is exact; the float combination of the per-block (or per-lane)
// partial sums is done in a different order than the reference, so results agree to a few ulps of
// sum(|w_i * a_i|), not bit for bit.
// Activation quantizers (F16, Q8_0, Q8_1, Q8_K): byte-identical to the reference.
#pragma once
#include <cstdint>

namespace okapi::quant::avx2 {

void dequantize_f32(const void* src, float* dst, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void dequantize_iq4_nl(const void* src, float* dst, int64_t n);
void dequantize_q4_K(const void* src, float* dst, int64_t n);
void dequantize_q6_K(const void* src, float* dst, int64_t n);
void dequantize_tq2_0(const void* src, float* dst, int64_t n);

void quantize_f16(const float* src, void* dst, int64_t n);  // F16 "activations" of F16 dots
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void quantize_q8_K(const float* src, void* dst, int64_t n);

float vec_dot_f32(int64_t n, const void* w, const void* a);        // F32 . F32
float vec_dot_f16(int64_t n, const void* w, const void* a);        // F16 . F16
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a);  // a: no -128 (see simd.hpp)
float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a);  // uses a's s = d * sum(qs)
float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* a);  // uses a's s = d * sum(qs)
float vec_dot_q2_K_q8_K(int64_t n, const void* w, const void* a);  // uses a's bsums
float vec_dot_q3_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a);  // uses a's bsums
float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a);  // uses a's bsums
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a);  // uses a's bsums
float vec_dot_tq2_0_q8_K(int64_t n, const void* w, const void* a); // uses a's bsums
float vec_dot_i2_s_i8_s(int64_t n, const void* w, const void* a);  // unit scale, as the reference

}  // namespace okapi::quant::avx2
