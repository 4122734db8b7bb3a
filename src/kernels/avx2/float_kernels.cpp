// F32 and F16 rows. Dots accumulate in float with FMA over 4x8 independent lanes (as ggml's SIMD
// path does); the reference may sum in another order (or in double), hence a tolerance.
#include "kernels/avx2/row_kernels.hpp"
#include "kernels/avx2/simd.hpp"

namespace okapi::quant::avx2 {
namespace {

// F16C quiets signalling NaNs (sets mantissa bit 22); the reference keeps the payload as is.
// Redo a vector that holds a NaN the slow way so dequantization stays bit-identical.
__m256 halves_to_floats(const uint16_t* src) {
  const __m256 f = _mm256_cvtph_ps(load128(src));
  if (_mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)) == 0) return f;
  alignas(32) float out[8];
  _mm256_store_ps(out, f);
  for (int i = 0; i < 8; ++i) {
    if (out[i] != out[i]) {
      uint32_t bits;
      std::memcpy(&bits, &out[i], 4);
      bits = (bits & ~0x00400000u) | (static_cast<uint32_t>(src[i] & 0x0200u) << 13);
      std::memcpy(&out[i], &bits, 4);
    }
  }
  return _mm256_load_ps(out);
}

float half_to_float_exact(uint16_t h) {
  float f = half_to_float(h);
  if (f != f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits = (bits & ~0x00400000u) | (static_cast<uint32_t>(h & 0x0200u) << 13);
    std::memcpy(&f, &bits, 4);
  }
  return f;
}

}  // namespace

void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, halves_to_floats(h + i));
  for (; i < n; ++i) dst[i] = half_to_float_exact(h[i]);
}

// F16C rounds to nearest even like the reference; only NaNs differ (the reference writes the
// canonical 0x7e00 plus the sign, F16C keeps payload bits), so vectors holding one are redone.
void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)) != 0) {
      for (int k = 0; k < 8; ++k) h[i + k] = float_to_half(src[i + k]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) h[i] = float_to_half(src[i]);
}

float vec_dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

float vec_dot_f16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      const __m256 xf = _mm256_cvtph_ps(load128(x + i + 8 * k));
      const __m256 yf = _mm256_cvtph_ps(load128(y + i + 8 * k));
      acc[k] = _mm256_fmadd_ps(xf, yf, acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    acc[0] = _mm256_fmadd_ps(_mm256_cvtph_ps(load128(x + i)), _mm256_cvtph_ps(load128(y + i)), acc[0]);
  }
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += half_to_float(x[i]) * half_to_float(y[i]);
  return sum;
}

}  // namespace okapi::quant::avx2
