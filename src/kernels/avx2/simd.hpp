// Small AVX2 helpers shared by the kernels in this folder. Include ONLY from files under
// kernels/avx2/ (compiled with -mavx2 -mfma -mf16c): these inline functions contain AVX code, and
// an out-of-line copy emitted elsewhere could be picked by the linker for a non-AVX caller.
// For the same reason the avx2/ files avoid including headers with inline functions that other
// code uses too (core/half.hpp): fp16 conversions here use the F16C instructions instead.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace okapi::quant::avx2 {

// GCC may contract a*b+c into an FMA in C++ mode even across statements (-ffp-contract=fast is
// its default outside ISO C), and the _mm256_mul_ps/_mm256_sub_ps intrinsics are plain vector
// operators to it. Dequantization and quantization must round exactly like the scalar reference
// (a rounded product, then a rounded add), so their products go through this empty-asm barrier,
// which costs no instruction.
inline __m256 mul_rounded(__m256 a, __m256 b) {
  __m256 p = _mm256_mul_ps(a, b);
  asm("" : "+x"(p));
  return p;
}

// fp16 -> fp32 of one value (exact; F16C).
inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// fp32 -> fp16 of one value as core/half.hpp does it: F16C rounds to nearest even like the
// reference, but keeps NaN payloads, where the reference writes the canonical quiet NaN 0x7e00
// (plus sign). (Not _cvtss_sh: Clang's macro for it is not valid C++.)
inline uint16_t float_to_half(float f) {
  if (f != f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7e00u);
  }
  return static_cast<uint16_t>(_mm_cvtsi128_si32(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT)));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int32_t hsum_i32(__m128i v) {
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(v);
}
inline int32_t hsum_i32(__m256i v) {
  return hsum_i32(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// 8 signed bytes at p -> 8 floats (exact).
inline __m256 i8x8_to_float(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)); }

// The 4 groups of 8 int8 in a 32-byte vector, as floats, times `scale` (each product rounded
// once, as the scalar reference's scale*q), stored to out[0..32).
inline void store_scaled_i8x32(__m256i q, __m256 scale, float* out) {
  const __m128i lo = _mm256_castsi256_si128(q);
  const __m128i hi = _mm256_extracti128_si256(q, 1);
  _mm256_storeu_ps(out + 0, mul_rounded(i8x8_to_float(lo), scale));
  _mm256_storeu_ps(out + 8, mul_rounded(i8x8_to_float(_mm_srli_si128(lo, 8)), scale));
  _mm256_storeu_ps(out + 16, mul_rounded(i8x8_to_float(hi), scale));
  _mm256_storeu_ps(out + 24, mul_rounded(i8x8_to_float(_mm_srli_si128(hi, 8)), scale));
}

// Signed-by-signed byte dot in int16 pairs, via maddubs(|x|, y*sign(x)). Exact unless a y byte
// is -128 where x is negative (sign(y) cannot represent +128): callers document that y comes
// from our activation quantizers, which never produce -128 (ggml has the same contract).
inline __m256i dot_i8_pairs(__m256i x, __m256i y) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}
// Sum adjacent int16 pairs into int32 lanes.
inline __m256i sum_i16_pairs(__m256i v) { return _mm256_madd_epi16(v, _mm256_set1_epi16(1)); }

// Low / high nibbles of 16 bytes, as 32 bytes: [lo(0..15) | hi(0..15)] in element order of the
// legacy formats (element j in low nibble of byte j, element j+16 in its high nibble).
inline __m256i nibbles_lo_hi(__m128i bytes) {
  const __m128i mask = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask), _mm_and_si128(bytes, mask));
}

}  // namespace okapi::quant::avx2
