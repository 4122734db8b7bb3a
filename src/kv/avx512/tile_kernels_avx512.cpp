// AVX-512 tile kernels: each key / value row is converted to float once per call into a small
// buffer and then met by every query of the tile (a GQA group, several prefill tokens).
#include <climits>

#include "kv/tile_kernels.hpp"
#include "quant/avx512/simd.hpp"  // <immintrin.h> with GCC 12's false warnings silenced

namespace okapi::kv::tile {
namespace {

__mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << remaining) - 1u);
}

// row[0, dim) as floats into buf (dim rounded up to 16 with zeros).
void widen(const float* row, int64_t dim, float* buf) {
  for (int64_t d = 0; d < dim; d += 16) _mm512_store_ps(buf + d, _mm512_maskz_loadu_ps(tail_mask(dim - d), row + d));
}
void widen(const uint16_t* row, int64_t dim, float* buf) {
  for (int64_t d = 0; d < dim; d += 16)
    _mm512_store_ps(buf + d, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(dim - d), row + d)));
}

// How a probability meets a V element of this type (fp16: rounded to fp16 first).
float weight_for(float p, float) { return p; }
float weight_for(float p, uint16_t) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(p), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
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

template <typename Elem>
void scores(const Queries& qs, Rows<Elem> k, int64_t first, float* out, int64_t out_stride) {
  alignas(64) float row[kMaxDim];
  int64_t lo = 0, hi = 0;
  span_of(qs, &lo, &hi);
  for (int64_t j = lo; j < hi; ++j) {
    if (j + kPrefetchAhead < hi) prefetch_row(k.base + (j + kPrefetchAhead) * k.stride, k.dim);
    widen(k.base + j * k.stride, k.dim, row);
    for (int r = 0; r < qs.n; ++r) {
      if (j < qs.begin[r] || j >= qs.end[r]) continue;
      const float* q = qs.q[r];
      __m512 sum = _mm512_setzero_ps();
      for (int64_t d = 0; d < k.dim; d += 16)
        sum = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail_mask(k.dim - d), q + d), _mm512_load_ps(row + d), sum);
      out[r * out_stride + (j - first)] = _mm512_reduce_add_ps(sum);
    }
  }
}

template <typename Elem>
void accumulate(const Queries& qs, Rows<Elem> v, int64_t first, const float* probs, int64_t p_stride, float* acc) {
  alignas(64) float row[kMaxDim];
  int64_t lo = 0, hi = 0;
  span_of(qs, &lo, &hi);
  for (int64_t j = lo; j < hi; ++j) {
    if (j + kPrefetchAhead < hi) prefetch_row(v.base + (j + kPrefetchAhead) * v.stride, v.dim);
    widen(v.base + j * v.stride, v.dim, row);
    for (int r = 0; r < qs.n; ++r) {
      if (j < qs.begin[r] || j >= qs.end[r]) continue;
      const __m512 p = _mm512_set1_ps(weight_for(probs[r * p_stride + (j - first)], Elem{}));
      float* out = acc + r * v.dim;
      for (int64_t d = 0; d < v.dim; d += 16) {
        const __mmask16 m = tail_mask(v.dim - d);
        _mm512_mask_storeu_ps(out + d, m, _mm512_fmadd_ps(p, _mm512_load_ps(row + d), _mm512_maskz_loadu_ps(m, out + d)));
      }
    }
  }
}

}  // namespace

const Kernels& avx512_kernels() {
  static const Kernels k{scores<float>, scores<uint16_t>, accumulate<float>, accumulate<uint16_t>};
  return k;
}

}  // namespace okapi::kv::tile
