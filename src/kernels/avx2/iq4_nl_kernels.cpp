// IQ4_NL rows: 32-element blocks of 4-bit indices into ggml's non-linear levels and one fp16 scale.
// One byte shuffle turns 32 indices into their int8 levels; then the Q4_0 path (scale * level).
#include <cstring>

#include "kernels/avx2/row_kernels.hpp"
#include "kernels/avx2/simd.hpp"

namespace okapi::quant::avx2 {

namespace {
constexpr int kBlock = 32;
// ggml's kvalues_iq4nl (kernels/scalar/iq4_nl.cpp).
alignas(16) constexpr int8_t kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
constexpr size_t kBlockBytes = 2 + kBlock / 2;
}  // namespace

void dequantize_iq4_nl(const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  const __m256i levels = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kLevels)));
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const uint8_t* block = bytes + static_cast<size_t>(b) * kBlockBytes;
    uint16_t h;
    std::memcpy(&h, block, sizeof(h));
    const __m256 d = _mm256_set1_ps(half_to_float(h));
    store_scaled_i8x32(_mm256_shuffle_epi8(levels, nibbles_lo_hi(load128(block + 2))), d, dst + b * kBlock);
  }
}

}  // namespace okapi::quant::avx2
