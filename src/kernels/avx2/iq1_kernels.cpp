// IQ1_S, IQ1_M: AVX2 dot products with Q8_K, one row against 1..4 tokens (the dot product is the
// one-token case, the multi-token tiles the others, so a batched row equals the lone token). The
// codebook points are -1/0/1 bytes, so a point times the activations is vpsignb; vpmaddubsw by
// ones and vpmaddwd by the odd scales sum them into int32 lanes. IQ1_S takes its shift term from
// Q8_K's block sums as the reference does; IQ1_M signs the activations by each 8 values' shift bit
// the same way. The integer sums are exact and the float steps the reference's, so every result
// equals vec_dot_ref bit for bit.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/avx2/simd.hpp"
#include "kernels/avx2/token_groups.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq1_grid.hpp"

namespace okapi::quant::avx2 {
namespace {

using iq1::block_iq1_m;
using iq1::block_iq1_s;

constexpr int kTileTokens = 4;

inline __m256i points(int i0, int i1, int i2, int i3) {
  return _mm256_setr_epi64x(static_cast<int64_t>(iq1::kGrid[i0]), static_cast<int64_t>(iq1::kGrid[i1]),
                            static_cast<int64_t>(iq1::kGrid[i2]), static_cast<int64_t>(iq1::kGrid[i3]));
}

// Sums of the signed bytes v in 16 int16 lanes (pairs).
inline __m256i byte_pairs(__m256i v) { return _mm256_maddubs_epi16(_mm256_set1_epi8(1), v); }

inline const block_q8_K& activation(const uint8_t* a, size_t a_row, int t, int64_t i) {
  return reinterpret_cast<const block_q8_K*>(a + static_cast<size_t>(t) * a_row)[i];
}

template <int T>
void iq1_s_tokens(int64_t n, const void* w, const uint8_t* a, size_t a_row, float* out) {
  const auto* x = static_cast<const block_iq1_s*>(w);
  float sumf[T];
  for (int t = 0; t < T; ++t) sumf[t] = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    __m256i acc[T];
    int sumi1[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_si256(), sumi1[t] = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const int qh = x[i].qh[ib];
      const uint8_t* qs = x[i].qs + 4 * ib;
      const auto index = [&](int l) { return qs[l] | ((qh >> (3 * l)) & 7) << 8; };
      const int ls = 2 * ((qh >> 12) & 7) + 1;
      const int delta = qh & 0x8000 ? -1 : 1;
      const __m256i grid = points(index(0), index(1), index(2), index(3));
      const __m256i scale = _mm256_set1_epi16(static_cast<int16_t>(ls));
      for (int t = 0; t < T; ++t) {
        const block_q8_K& y = activation(a, a_row, t, i);
        acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(byte_pairs(_mm256_sign_epi8(load256(y.qs + 32 * ib), grid)), scale));
        sumi1[t] += ls * delta * (y.bsums[2 * ib] + y.bsums[2 * ib + 1]);
      }
    }
    const float d_w = half_to_float(x[i].d);
    for (int t = 0; t < T; ++t) {
      const int sumi = hsum_i32(acc[t]);
      sumf[t] += d_w * activation(a, a_row, t, i).d *
                 (static_cast<float>(sumi) + iq1::kDelta * static_cast<float>(sumi1[t]));
    }
  }
  for (int t = 0; t < T; ++t) out[t] = sumf[t];
}

template <int T>
void iq1_m_tokens(int64_t n, const void* w, const uint8_t* a, size_t a_row, float* out) {
  const auto* x = static_cast<const block_iq1_m*>(w);
  float sumf[T];
  for (int t = 0; t < T; ++t) sumf[t] = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint16_t sc[4];
    std::memcpy(sc, x[i].scales, sizeof(sc));
    const auto d16 = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                           (sc[3] & 0xf000));
    __m256i acc1[T], acc2[T];
    for (int t = 0; t < T; ++t) acc1[t] = acc2[t] = _mm256_setzero_si256();
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const uint8_t* qs = x[i].qs + 4 * ib;
      const uint8_t* qh = x[i].qh + 2 * ib;
      const auto nibble = [&](int l) { return qh[l / 2] >> (4 * (l % 2)); };
      const auto index = [&](int l) { return qs[l] | (nibble(l) & 7) << 8; };
      const auto shift = [&](int l) {
        return static_cast<int64_t>(nibble(l) & 8 ? 0xffffffffffffffffULL : 0x0101010101010101ULL);
      };
      const int ls1 = 2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
      const int ls2 = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
      // int16 lanes 0..7 hold values 0..15 (scale ls1), lanes 8..15 values 16..31 (ls2)
      const __m256i scales = _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(ls1)),
                                               _mm_set1_epi16(static_cast<int16_t>(ls2)));
      const __m256i grid = points(index(0), index(1), index(2), index(3));
      const __m256i shifts = _mm256_setr_epi64x(shift(0), shift(1), shift(2), shift(3));
      for (int t = 0; t < T; ++t) {
        const __m256i q8 = load256(activation(a, a_row, t, i).qs + 32 * ib);
        acc1[t] = _mm256_add_epi32(acc1[t], _mm256_madd_epi16(byte_pairs(_mm256_sign_epi8(q8, grid)), scales));
        acc2[t] = _mm256_add_epi32(acc2[t], _mm256_madd_epi16(byte_pairs(_mm256_sign_epi8(q8, shifts)), scales));
      }
    }
    const float d_w = half_to_float(d16);
    for (int t = 0; t < T; ++t) {
      const int sumi1 = hsum_i32(acc1[t]), sumi2 = hsum_i32(acc2[t]);
      sumf[t] += d_w * activation(a, a_row, t, i).d *
                 (static_cast<float>(sumi1) + iq1::kDelta * static_cast<float>(sumi2));
    }
  }
  for (int t = 0; t < T; ++t) out[t] = sumf[t];
}

template <bool kM, int T>
void row_tokens(int64_t n, const void* w, const uint8_t* a, size_t a_row, float* out) {
  if constexpr (kM) {
    iq1_m_tokens<T>(n, w, a, a_row, out);
  } else {
    iq1_s_tokens<T>(n, w, a, a_row, out);
  }
}

template <bool kM>
float vec_dot(int64_t n, const void* w, const void* a) {
  float out;
  row_tokens<kM, 1>(n, w, static_cast<const uint8_t*>(a), 0, &out);
  return out;
}

// The multi-token tile: token groups of up to kTileTokens, each row's dots by row_tokens<kM, G>.
template <bool kM>
struct Iq1Tokens {
  using Block = std::conditional_t<kM, block_iq1_m, block_iq1_s>;
  template <int G>
  struct Group {
    static void run(int64_t n_blocks, const Block* w, const uint8_t* a, size_t a_row, float* out) {
      row_tokens<kM, G>(n_blocks * QK_K, w, a, a_row, out);
    }
  };
};

// y[t * y_stride + r] = scale * dot(row r, token t).
template <bool kM>
void tile(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row, const float*,
          int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  static_assert(kTileTokens == 4, "tile_by_token_groups runs groups of 4 tokens");
  kernels::avx2::tile_by_token_groups<typename Iq1Tokens<kM>::Block, QK_K, Iq1Tokens<kM>::template Group>(
      n, w, w_row, n_rows, a, a_row, n_tokens, scale, y, y_stride);
}

}  // namespace
}  // namespace okapi::quant::avx2

namespace okapi::quant::detail {

void use_avx2_iq1_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    if (f.vec_dot_type != DType::Q8_K || f.vec_dot_ref == nullptr) continue;
    if (f.type == DType::IQ1_S) {
      f.vec_dot = avx2::vec_dot<false>;
      f.tiles = {avx2::tile<false>, false};
    }
    if (f.type == DType::IQ1_M) {
      f.vec_dot = avx2::vec_dot<true>;
      f.tiles = {avx2::tile<true>, false};
    }
  }
}

}  // namespace okapi::quant::detail
