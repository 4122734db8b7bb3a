// Row-group kernels (row_groups.hpp) of the 4-bit codebook formats: IQ4_NL and MXFP4 against Q8_0
// activations, IQ4_XS against Q8_K. The rows keep their 4-bit indices; one `vpshufb` of the
// 16-entry codebook, biased by +128 to unsigned bytes, turns them into levels for `vpdpbusd`, and
// the bias comes back through the activation offsets (-128 * the sum of the levels met).
//
// IQ4_NL, MXFP4: packed block of 16 rows, 320 bytes: 4 chunks of 64 bytes whose byte 4r + i holds
// row r's index of value 4k + i (chunk k) in its low nibble and of value 16 + 4k + i in its high
// one (ggml's qs[4k + i]), then the 16 rows' block scales as floats (IQ4_NL: the fp16 d; MXFP4:
// 2^(e - 128), ggml_e8m0_to_fp32_half, for its doubled levels). The activations are the Q8_0
// rows' of Q8_0 weights (q8_0_row_groups: levels, scales, -128 * sum(levels)).
//   per block: dot = -128 sum(a) + sum((level + 128) a) exact; acc = fma(d_w * d_a, float(dot), acc).
// IQ4_XS: packed super-block of 16 rows, 2208 bytes: per block of 32 (j = 0..7) the 4 chunks as
// above (256 bytes), then the block scales ls - 32 as int8 [block][row], then the 16 fp16 d.
// The activations are Q6_K's Q8_K rows (levels, scale, -32 * each sum of 16):
//   per block j: dot_j = 4 (offset_2j + offset_2j+1) + sum((level + 128) a) = sum(level a);
//   per super-block: acc = fma(d_w * d_a, float(sum_j (ls_j - 32) dot_j), acc), all integers exact
//   (|sum| <= 8 * 32 * 32 * 127 * 127 < 2^31).
// The same operations per (row, token) whatever the number of tokens: decode equals prefill.
#include <vector>

#include "kernels/avx512/q8_k_activation.hpp"
#include "kernels/avx512/row_group_driver.hpp"
#include "kernels/avx512/row_groups.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq4_levels.hpp"
#include "kernels/scalar/mxfp4_levels.hpp"

namespace okapi::quant {
namespace avx512 {
namespace {

// ggml's kvalues_iq4nl or kvalues_mxfp4 plus 128, as unsigned bytes.
__m128i biased_codebook(const int8_t* levels) {
  return _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(levels)), _mm_set1_epi8(-128));
}

inline __m512i lookup(__m128i book, __m512i idx) { return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(book), idx); }
inline __m256i lookup(__m128i book, __m256i idx) { return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(book), idx); }

// The 8 level vectors (runs k = 0..7, values 4k..4k+3) of 4 nibble chunks, all 16 rows (Zmm) or
// rows 8h..8h+7 (Ymm).
template <typename Vec>
void unpack_nibbles(__m128i book, const uint8_t* chunks, int h, typename Vec::V* w) {
  const auto mask = Vec::set1(0x0f);
  for (int k = 0; k < 4; ++k) {
    const auto v = Vec::load(chunks + 64 * k, h);
    w[k] = lookup(book, Vec::and_(v, mask));
    w[k + 4] = lookup(book, Vec::and_(Vec::template shift_right16<4>(v), mask));
  }
}

void pack_nibbles(const uint8_t* qs, int64_t r, uint8_t* chunks) {
  for (int k = 0; k < 4; ++k) std::memcpy(chunks + 64 * k + 4 * r, qs + 4 * k, 4);
}

// ---- IQ4_NL and MXFP4 against Q8_0 ----

struct Iq4NlCodebook {
  using Block = block_iq4_nl;
  static __m128i book() { return biased_codebook(detail::kIq4Levels); }
  static float scale(const Block& b) { return _cvtsh_ss(b.d); }
};
struct Mxfp4Codebook {
  using Block = block_mxfp4;
  static __m128i book() { return biased_codebook(detail::kMxfp4Levels); }
  static float scale(const Block& b) { return detail::mxfp4_half_scale(b.e); }
};

// A token's Q8_0 activation row (row_groups.hpp): levels, then nb float scales, then nb offsets.
struct Q8_0Row {
  const uint8_t* levels;
  const float* scales;
  const int32_t* offsets;
  Q8_0Row(const uint8_t* row, int64_t nb)
      : levels(row),
        scales(reinterpret_cast<const float*>(row + static_cast<size_t>(nb) * QK8_0)),
        offsets(reinterpret_cast<const int32_t*>(scales + nb)) {}
};

template <typename C>
struct CodebookRows {
  using Block = typename C::Block;
  static constexpr int64_t kBlockElems = 32;
  static constexpr size_t kScalesOffset = 256;
  static constexpr size_t kBlockBytes = kScalesOffset + kRows * sizeof(float);
  static constexpr int kTokens = 16;

  static void pack_block(const Block& src, int64_t r, uint8_t* dst) {
    pack_nibbles(src.qs, r, dst);
    const float d = C::scale(src);
    std::memcpy(dst + kScalesOffset + r * sizeof(float), &d, sizeof(float));
  }
  static __m512 scales_of(const uint8_t* block) { return _mm512_loadu_ps(block + kScalesOffset); }

  template <int T>
  static void tokens(int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, float* y, int64_t y_stride,
                     __mmask16 store) {
    const __m128i book = C::book();
    over_blocks<T>(nb, y, y_stride, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes;
      __m512i w[8];
      unpack_nibbles<Zmm>(book, block, 0, w);
      const __m512 d_w = scales_of(block);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const Q8_0Row act(a + static_cast<size_t>(t) * a_row, nb);
        __m512i dot = _mm512_set1_epi32(act.offsets[b]);
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          dot = _mm512_dpbusd_epi32(dot, w[k], _mm512_set1_epi32(load_i32(act.levels + b * QK8_0 + 4 * k)));
        }
        acc[t] = accumulate(acc[t], d_w, act.scales[b], dot);
      }
    });
  }

  static void one_token(int64_t nb, const uint8_t* group, const uint8_t* a, float* y, __mmask16 store) {
    const __m128i book = C::book();
    const Q8_0Row act(a, nb);
    over_blocks<1>(nb, y, 0, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes;
      prefetch_ahead<kBlockBytes>(block);
      __m256i lo[8], hi[8];
      unpack_nibbles<Ymm>(book, block, 0, lo);
      unpack_nibbles<Ymm>(book, block, 1, hi);
      __m256i dot_lo = _mm256_set1_epi32(act.offsets[b]), dot_hi = dot_lo;
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i bytes = _mm256_set1_epi32(load_i32(act.levels + b * QK8_0 + 4 * k));
        dot_lo = _mm256_dpbusd_epi32(dot_lo, lo[k], bytes);
        dot_hi = _mm256_dpbusd_epi32(dot_hi, hi[k], bytes);
      }
      acc[0] = accumulate(acc[0], scales_of(block), act.scales[b],
                          _mm512_inserti64x4(_mm512_castsi256_si512(dot_lo), dot_hi, 1));
    });
  }

  // The Q8_0 weights' activations (bias 128; the table installs q8_0_row_groups()' own functions).
  static size_t activation_bytes(int64_t n_in) { return q8_0_row_groups().activation_bytes(n_in); }
  static void prepare_activation(const float* x, int64_t n_in, void* out) {
    q8_0_row_groups().prepare_activation(x, n_in, out);
  }
};

// ---- IQ4_XS against Q8_K ----

struct Iq4XsRows {
  using Block = block_iq4_xs;
  static constexpr int64_t kBlockElems = QK_K;
  static constexpr int kSub = QK_K / 32;
  static constexpr size_t kScalesOffset = kSub * 256;
  static constexpr size_t kDOffset = kScalesOffset + kSub * kRows;
  static constexpr size_t kBlockBytes = kDOffset + kRows * sizeof(uint16_t);
  static constexpr int kTokens = 8;

  static void pack_block(const Block& src, int64_t r, uint8_t* dst) {
    for (int j = 0; j < kSub; ++j) {
      pack_nibbles(src.qs + 16 * j, r, dst + 256 * j);
      const int ls = detail::iq4_xs_block_scale(src.scales_l, src.scales_h, j);
      dst[kScalesOffset + kRows * j + r] = static_cast<uint8_t>(static_cast<int8_t>(ls));
    }
    std::memcpy(dst + kDOffset + r * sizeof(uint16_t), &src.d, sizeof(uint16_t));
  }

  static int32_t start(const KActivationRow& act, int64_t b, int j) {
    return 4 * (act.offset(b, 2 * j) + act.offset(b, 2 * j + 1));
  }

  template <int T>
  static void tokens(int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, float* y, int64_t y_stride,
                     __mmask16 store) {
    const __m128i book = biased_codebook(detail::kIq4Levels);
    over_blocks<T>(nb, y, y_stride, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes;
      __m512i sum[T];
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
      for (int j = 0; j < kSub; ++j) {
        __m512i w[8];
        unpack_nibbles<Zmm>(book, block + 256 * j, 0, w);
        const __m512i scale = _mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + kScalesOffset + kRows * j)));
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
          const KActivationRow act(a + static_cast<size_t>(t) * a_row, nb);
          __m512i dot = _mm512_set1_epi32(start(act, b, j));
#pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) dot = _mm512_dpbusd_epi32(dot, w[k], act.bytes(b, 8 * j + k));
          sum[t] = _mm512_add_epi32(sum[t], _mm512_mullo_epi32(dot, scale));
        }
      }
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const KActivationRow act(a + static_cast<size_t>(t) * a_row, nb);
        acc[t] = accumulate(acc[t], row_scales(block + kDOffset), act.scales[b], sum[t]);
      }
    });
  }

  static void one_token(int64_t nb, const uint8_t* group, const uint8_t* a, float* y, __mmask16 store) {
    const __m128i book = biased_codebook(detail::kIq4Levels);
    const KActivationRow act(a, nb);
    over_blocks<1>(nb, y, 0, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes;
      const uint8_t* levels = act.levels + b * QK_K;
      prefetch_ahead<kBlockBytes>(block);
      __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int j = 0; j < kSub; ++j) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          __m256i w[8];
          unpack_nibbles<Ymm>(book, block + 256 * j, h, w);
          __m256i dot[2] = {_mm256_set1_epi32(start(act, b, j)), _mm256_setzero_si256()};
#pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) {
            dot[k % 2] = _mm256_dpbusd_epi32(dot[k % 2], w[k], _mm256_set1_epi32(load_i32(levels + 32 * j + 4 * k)));
          }
          const __m256i scale = _mm256_cvtepi8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + kScalesOffset + kRows * j + 8 * h)));
          sum[h] = _mm256_add_epi32(sum[h], _mm256_mullo_epi32(_mm256_add_epi32(dot[0], dot[1]), scale));
        }
      }
      const __m512i total = _mm512_inserti64x4(_mm512_castsi256_si512(sum[0]), sum[1], 1);
      acc[0] = accumulate(acc[0], row_scales(block + kDOffset), act.scales[b], total);
    });
  }

  // Q6_K's Q8_K activations (-32 * each sum of 16).
  static size_t activation_bytes(int64_t n_in) { return q8_K_activation_bytes(n_in); }
  static void prepare_activation(const float* x, int64_t n_in, void* out) { prepare_q8_K<Sums::q6_K>(x, n_in, out); }
};

}  // namespace
}  // namespace avx512

namespace detail {

// The kernels with the activation functions of the weights they share them with (Q8_0, Q6_K), so
// that a matmul group of such weights prepares its activations once.
template <typename W>
RowGroupKernels sharing_activations(const RowGroupKernels& with) {
  RowGroupKernels k = avx512::make_row_groups<W>();
  k.activation_bytes = with.activation_bytes;
  k.prepare_activation = with.prepare_activation;
  return k;
}

void use_avx512_iq_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    if (f.vec_dot_ref == nullptr) continue;
    if (f.type == DType::IQ4_NL && f.vec_dot_type == DType::Q8_0) {
      f.row_groups = sharing_activations<avx512::CodebookRows<avx512::Iq4NlCodebook>>(avx512::q8_0_row_groups());
    }
    if (f.type == DType::MXFP4 && f.vec_dot_type == DType::Q8_0) {
      f.row_groups = sharing_activations<avx512::CodebookRows<avx512::Mxfp4Codebook>>(avx512::q8_0_row_groups());
    }
    if (f.type == DType::IQ4_XS && f.vec_dot_type == DType::Q8_K) {
      f.row_groups = sharing_activations<avx512::Iq4XsRows>(avx512::q6_K_row_groups());
    }
  }
}

}  // namespace detail
}  // namespace okapi::quant
