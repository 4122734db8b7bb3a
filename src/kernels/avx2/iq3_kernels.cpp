// IQ3_XXS, IQ3_S: AVX2 dot products with Q8_K, one row against 1..4 tokens (the dot product is
// the one-token case, the multi-token tiles the others, so a batched row equals the lone token).
// Per group of 32 values: the 8 grid points gathered into one vector of magnitudes (bytes), the
// 32 sign bits spread to +-1 bytes and put on each token's activations (vpsignb), vpmaddubsw,
// then vpmaddwd by the group's odd scale 2s + 1 into int32 lanes. The integer sum of a
// super-block is exact and the float steps are the reference's in its order
// (sum += (d_w * d_a) * float(sum)), so every result equals vec_dot_ref bit for bit.
#include <algorithm>
#include <vector>

#include "kernels/avx2/simd.hpp"
#include "kernels/avx2/token_groups.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq3_grids.hpp"

namespace okapi::quant::avx2 {
namespace {

using iq3::block_iq3_s;
using iq3::block_iq3_xxs;

constexpr int kTileTokens = 4;

// +1 / -1 bytes from 32 sign bits (bit j set: value j negative).
inline __m256i sign_vector(uint32_t sign_bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(sign_bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i negative = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(negative, _mm256_set1_epi8(1));
}

// One group of 32 values decoded: magnitudes, +-1 signs and the odd scale.
struct Group {
  __m256i magnitudes, signs;
  int16_t scale;
};

Group decode(const block_iq3_xxs& b, int g) {
  const uint8_t* q = b.qs + 8 * g;
  uint32_t word;
  std::memcpy(&word, b.qs + QK_K / 4 + 4 * g, sizeof(word));
  const uint32_t sign_bits = iq3::kSigns[word & 127] | iq3::kSigns[(word >> 7) & 127] << 8 |
                             iq3::kSigns[(word >> 14) & 127] << 16 |
                             static_cast<uint32_t>(iq3::kSigns[(word >> 21) & 127]) << 24;
  const auto point = [&](int k) { return static_cast<int32_t>(iq3::kXxsGrid[q[k]]); };
  return {_mm256_setr_epi32(point(0), point(1), point(2), point(3), point(4), point(5), point(6), point(7)),
          sign_vector(sign_bits), static_cast<int16_t>(2 * (word >> 28) + 1)};
}

Group decode(const block_iq3_s& b, int g) {
  const uint8_t* q = b.qs + 8 * g;
  const uint32_t high = b.qh[g];
  const auto point = [&](int k) { return static_cast<int32_t>(iq3::kSGrid[q[k] | ((high >> k) & 1) << 8]); };
  uint32_t sign_bits;
  std::memcpy(&sign_bits, b.signs + 4 * g, sizeof(sign_bits));
  return {_mm256_setr_epi32(point(0), point(1), point(2), point(3), point(4), point(5), point(6), point(7)),
          sign_vector(sign_bits), static_cast<int16_t>(2 * ((b.scales[g / 2] >> (4 * (g % 2))) & 0xf) + 1)};
}

// out[t] = dot(row w, activation row a + t * a_row) for t < T, as vec_dot_ref computes it.
template <typename Block, int T>
void row_tokens(int64_t n, const void* w, const uint8_t* a, size_t a_row, float* out) {
  const auto* x = static_cast<const Block*>(w);
  float sumf[T];
  for (int t = 0; t < T; ++t) sumf[t] = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    __m256i acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_si256();
    for (int g = 0; g < QK_K / 32; ++g) {
      const Group group = decode(x[i], g);
      const __m256i scale = _mm256_set1_epi16(group.scale);
      for (int t = 0; t < T; ++t) {
        const auto& y = reinterpret_cast<const block_q8_K*>(a + static_cast<size_t>(t) * a_row)[i];
        const __m256i q8 = _mm256_sign_epi8(load256(y.qs + 32 * g), group.signs);
        acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(group.magnitudes, q8), scale));
      }
    }
    const float d_w = half_to_float(x[i].d);
    for (int t = 0; t < T; ++t) {
      const auto& y = reinterpret_cast<const block_q8_K*>(a + static_cast<size_t>(t) * a_row)[i];
      const float d = d_w * y.d;
      sumf[t] += d * static_cast<float>(hsum_i32(acc[t]));
    }
  }
  for (int t = 0; t < T; ++t) out[t] = std::is_same_v<Block, block_iq3_xxs> ? 0.25f * sumf[t] : sumf[t];
}

template <typename Block>
float vec_dot(int64_t n, const void* w, const void* a) {
  float out;
  row_tokens<Block, 1>(n, w, static_cast<const uint8_t*>(a), 0, &out);
  return out;
}

// The multi-token tile: token groups of up to kTileTokens, each row's dots by row_tokens<Block, G>.
template <typename Block>
struct Iq3Tokens {
  template <int G>
  struct Group {
    static void run(int64_t n_blocks, const Block* w, const uint8_t* a, size_t a_row, float* out) {
      row_tokens<Block, G>(n_blocks * QK_K, w, a, a_row, out);
    }
  };
};

// y[t * y_stride + r] = scale * dot(row r, token t).
template <typename Block>
void tile(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row, const float*,
          int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  static_assert(kTileTokens == 4, "tile_by_token_groups runs groups of 4 tokens");
  kernels::avx2::tile_by_token_groups<Block, QK_K, Iq3Tokens<Block>::template Group>(n, w, w_row, n_rows, a, a_row,
                                                                                      n_tokens, scale, y, y_stride);
}

}  // namespace
}  // namespace okapi::quant::avx2

namespace okapi::quant::detail {

void use_avx2_iq3_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    if (f.vec_dot_type != DType::Q8_K || f.vec_dot_ref == nullptr) continue;
    if (f.type == DType::IQ3_XXS) {
      f.vec_dot = avx2::vec_dot<iq3::block_iq3_xxs>;
      f.tiles = {avx2::tile<iq3::block_iq3_xxs>, false};
    }
    if (f.type == DType::IQ3_S) {
      f.vec_dot = avx2::vec_dot<iq3::block_iq3_s>;
      f.tiles = {avx2::tile<iq3::block_iq3_s>, false};
    }
  }
}

}  // namespace okapi::quant::detail
