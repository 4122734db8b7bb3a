// The parts of the avx512 row-group kernels (row_groups.hpp) that do not depend on the format:
// packing a group of 16 rows block by block, and the loop of a GEMM / GEMV over token groups and
// row groups. A format plugs in a traits struct W:
//   Block, kBlockElems                  the stored block and its element count
//   kBlockBytes                         bytes of one packed block of 16 rows (a multiple of 32)
//   kTokens                             tokens per pass over a group's blocks (2..16)
//   pack_block(const Block&, r, dst)    writes row r's part of a packed block
//   activation_bytes(n_in), prepare_activation(x, n_in, out)
//   tokens<T>(nb, group, a, a_row, y, y_stride, store)   T in [2, kTokens] tokens x one group
//   one_token(nb, group, a, y, store)                     one token x one group
// Include ONLY from files under avx512/ (inline code compiled with the avx512 tier's flags).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/avx512/simd.hpp"
#include "kernels/format_table.hpp"

namespace okapi::quant::avx512 {
namespace {

constexpr int64_t kRows = 16;

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The float step of every lane, the same for a lone token and a batch: acc += (d_w * d_a) * dot.
inline __m512 accumulate(__m512 acc, __m512 d_w, float d_a, __m512i dot) {
  return _mm512_fmadd_ps(_mm512_mul_ps(d_w, _mm512_set1_ps(d_a)), _mm512_cvtepi32_ps(dot), acc);
}

// 16 fp16 row scales at p, as floats.
inline __m512 row_scales(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Byte vectors of one width, for unpacking code written once: Zmm holds a whole 64-byte chunk
// (16 rows x 4 bytes), Ymm its half h (rows 8h .. 8h+7), which decode uses (this CPU streams
// weights from DRAM faster with 256-bit loads and vpdpbusd).
struct Zmm {
  using V = __m512i;
  static V load(const uint8_t* chunk, int /*h*/) { return _mm512_loadu_si512(chunk); }
  static V set1(int8_t b) { return _mm512_set1_epi8(b); }
  static V and_(V a, V b) { return _mm512_and_si512(a, b); }
  static V or_(V a, V b) { return _mm512_or_si512(a, b); }
  template <int kBits>
  static V shift_right16(V a) {
    return _mm512_srli_epi16(a, kBits);
  }
  template <int kBits>
  static V shift_left16(V a) {
    return _mm512_slli_epi16(a, kBits);
  }
};
struct Ymm {
  using V = __m256i;
  static V load(const uint8_t* chunk, int h) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * h));
  }
  static V set1(int8_t b) { return _mm256_set1_epi8(b); }
  static V and_(V a, V b) { return _mm256_and_si256(a, b); }
  static V or_(V a, V b) { return _mm256_or_si256(a, b); }
  template <int kBits>
  static V shift_right16(V a) {
    return _mm256_srli_epi16(a, kBits);
  }
  template <int kBits>
  static V shift_left16(V a) {
    return _mm256_slli_epi16(a, kBits);
  }
};

// Bit kBit of every byte of v moved to bit 4, the other bits cleared (a fifth level bit; 16-bit
// shifts: the mask drops what the neighbouring byte shifts in).
template <typename Vec, int kBit>
typename Vec::V fifth_bit(typename Vec::V v) {
  if constexpr (kBit < 4) v = Vec::template shift_left16<4 - kBit>(v);
  if constexpr (kBit > 4) v = Vec::template shift_right16<kBit - 4>(v);
  return Vec::and_(v, Vec::set1(0x10));
}

// Decode streams the weights from DRAM once: asking for the bytes kAhead on from each packed block
// (the next group's past a group's end; a prefetch never faults) lifts the rate this CPU reaches,
// most on K-quant layouts, whose reads jump between levels, scales and mins (Q4_K 15 -> 35 GB/s
// on one thread).
template <size_t kBlockBytes, size_t kAhead = 4096>
inline void prefetch_ahead(const uint8_t* block) {
  const char* p = reinterpret_cast<const char*>(block + kAhead);
  for (size_t off = 0; off < kBlockBytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// The frame of a kernel over T tokens: T float accumulators, `block(b, acc)` for every block in
// order, then the lanes in `store` written to y[t * y_stride + r].
template <int T, typename BlockFn>
void over_blocks(int64_t nb, float* y, int64_t y_stride, __mmask16 store, BlockFn block) {
  __m512 acc[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) block(b, acc);
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * y_stride, store, acc[t]);
}

template <typename W>
size_t group_bytes(int64_t n_in) {
  return (static_cast<size_t>(n_in / W::kBlockElems) * W::kBlockBytes + 63) / 64 * 64;
}

template <typename W>
void pack(const void* w, size_t w_row, int64_t n_rows, int64_t n_in, void* group) {
  const int64_t nb = n_in / W::kBlockElems;
  std::memset(group, 0, group_bytes<W>(n_in));
  for (int64_t r = 0; r < std::min(n_rows, kRows); ++r) {
    const auto* src =
        reinterpret_cast<const typename W::Block*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * w_row);
    for (int64_t b = 0; b < nb; ++b)
      W::pack_block(src[b], r, static_cast<uint8_t*>(group) + static_cast<size_t>(b) * W::kBlockBytes);
  }
}

// W::tokens<n_t> for a run-time n_t in [2, T].
template <typename W, int T = W::kTokens>
void with_token_count(int64_t n_t, int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, float* y,
                      int64_t y_stride, __mmask16 store) {
  if constexpr (T >= 2) {
    if (n_t == T) return W::template tokens<T>(nb, group, a, a_row, y, y_stride, store);
    with_token_count<W, T - 1>(n_t, nb, group, a, a_row, y, y_stride, store);
  }
}

template <typename W>
void gemm(int64_t n_in, const void* groups, int64_t n_rows, const void* a, size_t a_row, int64_t n_tokens, float* y,
          int64_t y_stride) {
  const int64_t nb = n_in / W::kBlockElems;
  const size_t g_bytes = group_bytes<W>(n_in);
  const int64_t n_groups = (n_rows + kRows - 1) / kRows;
  // Token groups outside, row groups inside: the tokens' activations stay in L1 across the rows.
  for (int64_t t0 = 0; t0 < n_tokens; t0 += W::kTokens) {
    const int64_t n_t = std::min<int64_t>(W::kTokens, n_tokens - t0);
    const uint8_t* a_t = static_cast<const uint8_t*>(a) + static_cast<size_t>(t0) * a_row;
    for (int64_t g = 0; g < n_groups; ++g) {
      const uint8_t* group = static_cast<const uint8_t*>(groups) + static_cast<size_t>(g) * g_bytes;
      const int64_t rows_left = n_rows - g * kRows;
      const auto store = static_cast<__mmask16>(rows_left >= kRows ? 0xffff : (1u << rows_left) - 1);
      float* y_g = y + t0 * y_stride + g * kRows;
      if (n_t == 1) {
        W::one_token(nb, group, a_t, y_g, store);
      } else {
        with_token_count<W>(n_t, nb, group, a_t, a_row, y_g, y_stride, store);
      }
    }
  }
}

template <typename W>
RowGroupKernels make_row_groups() {
  static_assert(W::kBlockBytes % 32 == 0 && W::kTokens >= 2 && W::kTokens <= 16);
  RowGroupKernels k;
  k.rows = kRows;
  k.group_bytes = group_bytes<W>;
  k.pack = pack<W>;
  k.activation_bytes = W::activation_bytes;
  k.prepare_activation = W::prepare_activation;
  k.gemm = gemm<W>;
  return k;
}

}  // namespace
}  // namespace okapi::quant::avx512
