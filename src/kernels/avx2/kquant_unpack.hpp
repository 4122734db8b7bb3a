// Unpacking of k-quant block fields into AVX2 registers, shared by quant/avx2's row kernels and
// kernels/avx2's multi-token GEMM. Only for files compiled with AVX2 (under an avx2/ folder).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/avx2/simd.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::avx2 {

// The 8 six-bit scales and 8 six-bit mins of a Q4_K block, one per byte, unpacked from its 12
// bytes with 32-bit word operations: scales / mins 0-3 are the low 6 bits of bytes 0-3 / 4-7;
// scales / mins 4-7 take the low / high nibbles of bytes 8-11 plus, as bits 4-5, the top 2 bits
// of bytes 0-3 / 4-7. (Kept in registers: byte arrays on the stack cost store-forwarding stalls.)
struct ScalesMins {
  __m128i scales;  // bytes 0-7
  __m128i mins;    // bytes 0-7
};

inline ScalesMins unpack_q4_K_scales(const uint8_t* s) {
  uint32_t w[3];
  std::memcpy(w, s, sizeof(w));
  const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
  const uint32_t scales_hi = (w[2] & low4) | (((w[0] >> 6) & low2) << 4);
  const uint32_t mins_hi = ((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4);
  return {_mm_cvtsi64_si128(static_cast<int64_t>((w[0] & low6) | (static_cast<uint64_t>(scales_hi) << 32))),
          _mm_cvtsi64_si128(static_cast<int64_t>((w[1] & low6) | (static_cast<uint64_t>(mins_hi) << 32)))};
}

// The 128 six-bit levels (0..63, unsigned) of half `half` of a Q6_K block, as 4 vectors of 32:
// quarter k holds elements 32k..32k+31 of the half, low 4 bits from ql, high 2 bits at qh bit 2k.
struct Q6Quarters {
  __m256i q[4];
};

inline Q6Quarters unpack_q6_K_half(const block_q6_K& blk, int half) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  const __m256i ql0 = load256(blk.ql + 64 * half);
  const __m256i ql1 = load256(blk.ql + 64 * half + 32);
  const __m256i qh = load256(blk.qh + 32 * half);
  return {{
      _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
      _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45)),
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                      _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)),
  }};
}

}  // namespace okapi::quant::avx2
