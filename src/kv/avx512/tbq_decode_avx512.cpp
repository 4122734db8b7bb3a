// The tbq rows' decode with AVX-512 (kv/lloyd_max.hpp layout): per 16 coordinates, one 16-bit
// mask per bit plane builds the level indices by masked adds, and one permute reads the scaled
// codebook (at most 16 floats, one register). Same values as the scalar decode.
#include <cstring>

#include "core/half.hpp"
#include "kv/lloyd_max.hpp"
#include "quant/avx512/simd.hpp"  // <immintrin.h> with GCC 12's false warnings silenced

namespace okapi::kv::avx512 {

void tbq_decode(const TbqSpec& spec, const uint8_t* in, int64_t dim, float* out) {
  uint16_t h;
  std::memcpy(&h, in, sizeof(h));
  const __m512 s = _mm512_set1_ps(fp16_to_fp32(h));
  const int64_t half = dim / 2;
  const uint8_t* planes[4] = {};
  const uint8_t* p = in + sizeof(uint16_t);
  const int max_bits = spec.bits_hi > spec.bits_lo ? spec.bits_hi : spec.bits_lo;
  for (int k = 0; k < max_bits; ++k) {
    planes[k] = p;
    p += static_cast<size_t>(((k < spec.bits_lo ? dim : half) + 7) / 8);
  }
  __m512 books[2];
  for (int i = 0; i < 2; ++i) {
    const auto levels = lloyd_max_levels(i == 0 ? spec.bits_hi : spec.bits_lo);
    alignas(64) float padded[16] = {};
    std::memcpy(padded, levels.data(), levels.size() * sizeof(float));
    books[i] = _mm512_mul_ps(_mm512_load_ps(padded), s);
  }
  for (int64_t c = 0; c < dim; c += 16) {
    const int which = c < half ? 0 : 1;
    const int bits = which == 0 ? spec.bits_hi : spec.bits_lo;
    __m512i index = _mm512_setzero_si512();
    for (int k = 0; k < bits; ++k) {
      uint16_t m;
      std::memcpy(&m, planes[k] + c / 8, sizeof(m));
      index = _mm512_mask_add_epi32(index, static_cast<__mmask16>(m), index, _mm512_set1_epi32(1 << k));
    }
    _mm512_storeu_ps(out + c, _mm512_permutexvar_ps(index, books[which]));
  }
}

}  // namespace okapi::kv::avx512
