// The tbq rows' decode with AVX-512 (kv/lloyd_max.hpp layout): per 16 coordinates, one 16-bit
// mask per bit plane builds the level indices by masked adds, and one permute reads the scaled
// codebook (at most 16 floats, one register). Same values as the scalar decode.
// The codebooks are built once per call, not per row: a row of 64 values is only four steps, and
// rebuilding them through memory each row cost more than the decode itself.
#include <cstring>

#include "core/half.hpp"
#include "kernels/avx512/simd.hpp"  // <immintrin.h> with GCC 12's false warnings silenced
#include "kv/lloyd_max.hpp"

namespace okapi::kv::avx512 {

namespace {

// One row's 16 coordinates from `bits` planes: the level indices, then the codebook entries.
template <int kBits>
[[gnu::always_inline]] inline __m512 decode16(const uint8_t* in, const size_t* plane_offset, int64_t c, __m512 book) {
  __m512i index = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int k = 0; k < kBits; ++k) {
    uint16_t m;
    std::memcpy(&m, in + plane_offset[k] + c / 8, sizeof(m));
    index = _mm512_mask_add_epi32(index, static_cast<__mmask16>(m), index, _mm512_set1_epi32(1 << k));
  }
  return _mm512_permutexvar_ps(index, book);
}

// The widths as template arguments, so that the plane loops unroll.
template <int kHi, int kLo>
void decode_rows(const uint8_t* in, size_t stride, int64_t n, int64_t dim, float* out) {
  const int64_t half = dim / 2;
  size_t plane_offset[4] = {};
  size_t offset = sizeof(uint16_t);
  for (int k = 0; k < (kHi > kLo ? kHi : kLo); ++k) {
    plane_offset[k] = offset;
    offset += static_cast<size_t>(((k < kLo ? dim : half) + 7) / 8);
  }
  __m512 books[2];
  for (int i = 0; i < 2; ++i) {
    const auto levels = lloyd_max_levels(i == 0 ? kHi : kLo);
    alignas(64) float padded[16] = {};
    std::memcpy(padded, levels.data(), levels.size() * sizeof(float));
    books[i] = _mm512_load_ps(padded);
  }
  for (int64_t r = 0; r < n; ++r, in += stride, out += dim) {
    uint16_t h;
    std::memcpy(&h, in, sizeof(h));
    const __m512 s = _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(h)));
    const __m512 hi = _mm512_mul_ps(books[0], s), lo = _mm512_mul_ps(books[1], s);
    for (int64_t c = 0; c < half; c += 16) _mm512_storeu_ps(out + c, decode16<kHi>(in, plane_offset, c, hi));
    for (int64_t c = half; c < dim; c += 16) _mm512_storeu_ps(out + c, decode16<kLo>(in, plane_offset, c, lo));
  }
}

}  // namespace

bool tbq_decode_rows(const TbqSpec& spec, const uint8_t* in, size_t stride, int64_t n, int64_t dim, float* out) {
  switch (spec.bits_hi * 10 + spec.bits_lo) {
    case 32: decode_rows<3, 2>(in, stride, n, dim, out); return true;
    case 33: decode_rows<3, 3>(in, stride, n, dim, out); return true;
    case 43: decode_rows<4, 3>(in, stride, n, dim, out); return true;
    case 44: decode_rows<4, 4>(in, stride, n, dim, out); return true;
    default: return false;  // a width pair without an instance: the scalar decode
  }
}

}  // namespace okapi::kv::avx512
