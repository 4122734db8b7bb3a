// AVX-512 tile kernels. Rows are taken 16 cells at a time: each block of rows is converted to
// float once into a small buffer and then met by every query of the tile (a GQA group, several
// prefill tokens).
// - Scores: the 16 dot products of a block run as 16 independent FMA chains and are summed
//   across lanes together by one transposing tree (15 shuffle-add steps for 16 keys instead of one
//   horizontal reduction per key). Each key's sum is the same tree _mm512_reduce_add_ps uses, so a
//   score's bits do not depend on where its key falls in a block.
// - Values: a query's accumulator row stays in registers across the block's cells (at most 8
//   vectors at a time), and is updated in cell order as before.
#include <climits>

#include "kernels/avx512/simd.hpp"  // <immintrin.h> with GCC 12's false warnings silenced
#include "kv/tile_kernels.hpp"

namespace okapi::kv::tile {
namespace {

constexpr int64_t kBlock = 16;  // cells per block

__mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << remaining) - 1u);
}
int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

// row[0, dim) as floats into buf (dim rounded up to 16 with zeros).
void widen(const float* row, int64_t dim, float* buf) {
  for (int64_t d = 0; d < dim; d += 16) _mm512_store_ps(buf + d, _mm512_maskz_loadu_ps(tail_mask(dim - d), row + d));
}
void widen(const uint16_t* row, int64_t dim, float* buf) {
  for (int64_t d = 0; d < dim; d += 16)
    _mm512_store_ps(buf + d, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(dim - d), row + d)));
}

// How 16 probabilities meet V elements of this type (fp16: each rounded to fp16 first, as ggml
// converts the f32 operand of an f16 mat-mul).
__m512 weights_for(__m512 p, float) { return p; }
__m512 weights_for(__m512 p, uint16_t) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Rows ahead of the one in use to ask the memory for: the rows of one head are strided (the
// other heads lie between them), which the hardware prefetcher follows poorly at long context.
constexpr int64_t kPrefetchAhead = 8;

template <typename Elem>
void prefetch_row(const Elem* row, int64_t dim) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t b = 0; b < dim * static_cast<int64_t>(sizeof(Elem)); b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
}

// The cells some query of the tile sees: [lo, hi).
void span_of(const Queries& qs, int64_t* lo, int64_t* hi) {
  *lo = INT64_MAX;
  *hi = INT64_MIN;
  for (int r = 0; r < qs.n; ++r) {
    if (qs.begin[r] >= qs.end[r]) continue;
    if (qs.begin[r] < *lo) *lo = qs.begin[r];  // no std::min: no inline library code in tier files
    if (qs.end[r] > *hi) *hi = qs.end[r];
  }
}

// Rows [j0, j0 + n) widened into buf (row i at buf + i * padded); rows n..15 zeroed.
template <typename Elem>
void widen_block(Rows<Elem> rows, int64_t j0, int64_t n, int64_t hi, int64_t padded, float* buf) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ahead = j0 + i + kPrefetchAhead;
    if (ahead < hi) prefetch_row(rows.base + ahead * rows.stride, rows.dim);
    widen(rows.base + (j0 + i) * rows.stride, rows.dim, buf + i * padded);
  }
  for (int64_t i = n; i < kBlock; ++i)
    for (int64_t d = 0; d < padded; d += 16) _mm512_store_ps(buf + i * padded + d, _mm512_setzero_ps());
}

// a + b with their lanes taken as 128-bit chunks by two _mm512_shuffle_f32x4 selectors.
template <int kLow, int kHigh>
[[gnu::always_inline]] inline __m512 chunk_add(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, kLow), _mm512_shuffle_f32x4(a, b, kHigh));
}

// Lane i of the result: the sum of v[i]'s 16 lanes, in _mm512_reduce_add_ps's order (lane l with
// l + 8, then + 4, + 2, + 1). The tree leaves key i's sum in lane kLaneOf[i]; feeding slot s the
// vector of key kLaneOf[s] (the map is its own inverse) puts key i in lane i.
[[gnu::always_inline]] inline __m512 reduce16(const __m512* v) {
  constexpr int kSlot[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
  __m512 x[8], y[4], z[2];
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) x[p] = chunk_add<0x44, 0xEE>(v[kSlot[p]], v[kSlot[p + 8]]);  // l + 8
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) y[p] = chunk_add<0x88, 0xDD>(x[p], x[p + 4]);  // l + 4
#pragma GCC unroll 2
  for (int p = 0; p < 2; ++p) {  // l + 2
    const __m512d a = _mm512_castps_pd(y[p]), b = _mm512_castps_pd(y[p + 2]);
    z[p] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));  // l + 1
}

// The scores of every query against the rows `fill` puts in the block, 16 at a time.
template <typename Fill>
void scores_blocks(const Queries& qs, int64_t dim, const Fill& fill, int64_t first, float* out, int64_t out_stride) {
  alignas(64) float block[kBlock * kMaxDim];
  const int64_t padded = round_up16(dim);
  int64_t lo = 0, hi = 0;
  span_of(qs, &lo, &hi);
  for (int64_t j0 = lo; j0 < hi; j0 += kBlock) {
    const int64_t n = hi - j0 < kBlock ? hi - j0 : kBlock;
    fill(j0, n, hi, padded, block);
    for (int r = 0; r < qs.n; ++r) {
      const int64_t b = qs.begin[r] > j0 ? qs.begin[r] : j0, e = qs.end[r] < j0 + n ? qs.end[r] : j0 + n;
      if (b >= e) continue;
      const float* q = qs.q[r];
      __m512 sum[kBlock];
#pragma GCC unroll 16
      for (int i = 0; i < kBlock; ++i) sum[i] = _mm512_setzero_ps();
      for (int64_t d = 0; d < dim; d += 16) {
        const __m512 qv = _mm512_maskz_loadu_ps(tail_mask(dim - d), q + d);
#pragma GCC unroll 16
        for (int i = 0; i < kBlock; ++i) sum[i] = _mm512_fmadd_ps(qv, _mm512_load_ps(block + i * padded + d), sum[i]);
      }
      const auto keep = static_cast<__mmask16>(tail_mask(e - j0) & ~tail_mask(b - j0));
      _mm512_mask_storeu_ps(out + r * out_stride + (j0 - first), keep, reduce16(sum));
    }
  }
}

template <typename Elem>
void scores(const Queries& qs, Rows<Elem> k, int64_t first, float* out, int64_t out_stride) {
  scores_blocks(
      qs, k.dim,
      [&](int64_t j0, int64_t n, int64_t hi, int64_t padded, float* block) { widen_block(k, j0, n, hi, padded, block); },
      first, out, out_stride);
}

// A decoder's rows into the block: lanes past dim and rows past n zero, as widen_block leaves them.
void decode_block(const Decoded& rows, int64_t j0, int64_t n, int64_t padded, float* block) {
  if (padded != rows.dim) {
    for (int64_t i = 0; i < kBlock; ++i) _mm512_store_ps(block + i * padded + padded - 16, _mm512_setzero_ps());
  }
  rows.decode(rows.ctx, j0, n, block, padded);
  for (int64_t i = n; i < kBlock; ++i)
    for (int64_t d = 0; d < padded; d += 16) _mm512_store_ps(block + i * padded + d, _mm512_setzero_ps());
}

void scores_decoded(const Queries& qs, Decoded k, int64_t first, float* out, int64_t out_stride) {
  scores_blocks(
      qs, k.dim, [&](int64_t j0, int64_t n, int64_t, int64_t padded, float* block) { decode_block(k, j0, n, padded, block); },
      first, out, out_stride);
}

// acc[0, 16 * kVecs) += w[i] * row i, for the cells i in [b, e) of the block, in cell order.
template <int kVecs>
void accumulate_rows(const float* block, int64_t padded, const float* w, int64_t b, int64_t e, int64_t dim_left,
                     float* acc) {
  __m512 a[kVecs];
  __mmask16 m[kVecs];
#pragma GCC unroll 8
  for (int c = 0; c < kVecs; ++c) {
    m[c] = tail_mask(dim_left - 16 * c);
    a[c] = _mm512_maskz_loadu_ps(m[c], acc + 16 * c);
  }
  for (int64_t i = b; i < e; ++i) {
    const __m512 p = _mm512_set1_ps(w[i]);
#pragma GCC unroll 8
    for (int c = 0; c < kVecs; ++c) a[c] = _mm512_fmadd_ps(p, _mm512_load_ps(block + i * padded + 16 * c), a[c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < kVecs; ++c) _mm512_mask_storeu_ps(acc + 16 * c, m[c], a[c]);
}

// The value sums of every query over the rows `fill` puts in the block, 16 at a time; Elem picks
// how probabilities are rounded (weights_for).
template <typename Elem, typename Fill>
void accumulate_blocks(const Queries& qs, int64_t dim, const Fill& fill, int64_t first, const float* probs,
                       int64_t p_stride, float* acc) {
  alignas(64) float block[kBlock * kMaxDim];
  alignas(64) float w[kBlock];
  const int64_t padded = round_up16(dim);
  int64_t lo = 0, hi = 0;
  span_of(qs, &lo, &hi);
  for (int64_t j0 = lo; j0 < hi; j0 += kBlock) {
    const int64_t n = hi - j0 < kBlock ? hi - j0 : kBlock;
    fill(j0, n, hi, padded, block);
    for (int r = 0; r < qs.n; ++r) {
      const int64_t b = qs.begin[r] > j0 ? qs.begin[r] : j0, e = qs.end[r] < j0 + n ? qs.end[r] : j0 + n;
      if (b >= e) continue;
      const __mmask16 cells = tail_mask(e - j0);  // probabilities past the row's end are not read
      _mm512_store_ps(w, weights_for(_mm512_maskz_loadu_ps(cells, probs + r * p_stride + (j0 - first)), Elem{}));
      float* out = acc + r * dim;
      for (int64_t d = 0; d < dim; d += 128) {
        const int64_t left = dim - d;
        const float* rows = block + d;
        switch (left >= 128 ? 8 : (left + 15) / 16) {
          case 8: accumulate_rows<8>(rows, padded, w, b - j0, e - j0, left, out + d); break;
          case 7: accumulate_rows<7>(rows, padded, w, b - j0, e - j0, left, out + d); break;
          case 6: accumulate_rows<6>(rows, padded, w, b - j0, e - j0, left, out + d); break;
          case 5: accumulate_rows<5>(rows, padded, w, b - j0, e - j0, left, out + d); break;
          case 4: accumulate_rows<4>(rows, padded, w, b - j0, e - j0, left, out + d); break;
          case 3: accumulate_rows<3>(rows, padded, w, b - j0, e - j0, left, out + d); break;
          case 2: accumulate_rows<2>(rows, padded, w, b - j0, e - j0, left, out + d); break;
          default: accumulate_rows<1>(rows, padded, w, b - j0, e - j0, left, out + d); break;
        }
      }
    }
  }
}

template <typename Elem>
void accumulate(const Queries& qs, Rows<Elem> v, int64_t first, const float* probs, int64_t p_stride, float* acc) {
  accumulate_blocks<Elem>(
      qs, v.dim,
      [&](int64_t j0, int64_t n, int64_t hi, int64_t padded, float* block) { widen_block(v, j0, n, hi, padded, block); },
      first, probs, p_stride, acc);
}

void accumulate_decoded(const Queries& qs, Decoded v, int64_t first, const float* probs, int64_t p_stride,
                        float* acc) {
  accumulate_blocks<float>(
      qs, v.dim, [&](int64_t j0, int64_t n, int64_t, int64_t padded, float* block) { decode_block(v, j0, n, padded, block); },
      first, probs, p_stride, acc);
}

}  // namespace

const Kernels& avx512_kernels() {
  static const Kernels k{scores<float>,         scores<uint16_t>, accumulate<float>, accumulate<uint16_t>,
                         scores_decoded, accumulate_decoded};
  return k;
}

}  // namespace okapi::kv::tile
