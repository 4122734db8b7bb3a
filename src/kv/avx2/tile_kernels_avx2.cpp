// AVX2 tile kernels (FMA, F16C): as the AVX-512 ones, 8 lanes wide; the last dim % 8 elements of
// a row are summed in scalar after the vector part, in a fixed order.
#include <immintrin.h>

#include <climits>

#include "kv/tile_kernels.hpp"

namespace okapi::kv::tile {
namespace {

// row[0, dim) as floats into buf.
void widen(const float* row, int64_t dim, float* buf) {
  int64_t d = 0;
  for (; d + 8 <= dim; d += 8) _mm256_store_ps(buf + d, _mm256_loadu_ps(row + d));
  for (; d < dim; ++d) buf[d] = row[d];
}
void widen(const uint16_t* row, int64_t dim, float* buf) {
  int64_t d = 0;
  for (; d + 8 <= dim; d += 8)
    _mm256_store_ps(buf + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d))));
  for (; d < dim; ++d) buf[d] = _cvtsh_ss(row[d]);
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
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
  alignas(32) float row[kMaxDim];
  int64_t lo = 0, hi = 0;
  span_of(qs, &lo, &hi);
  const int64_t vec = k.dim / 8 * 8;
  for (int64_t j = lo; j < hi; ++j) {
    if (j + kPrefetchAhead < hi) prefetch_row(k.base + (j + kPrefetchAhead) * k.stride, k.dim);
    widen(k.base + j * k.stride, k.dim, row);
    for (int r = 0; r < qs.n; ++r) {
      if (j < qs.begin[r] || j >= qs.end[r]) continue;
      const float* q = qs.q[r];
      __m256 sum = _mm256_setzero_ps();
      for (int64_t d = 0; d < vec; d += 8) sum = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_load_ps(row + d), sum);
      float total = hsum(sum);
      for (int64_t d = vec; d < k.dim; ++d) total += q[d] * row[d];
      out[r * out_stride + (j - first)] = total;
    }
  }
}

template <typename Elem>
void accumulate(const Queries& qs, Rows<Elem> v, int64_t first, const float* probs, int64_t p_stride, float* acc) {
  alignas(32) float row[kMaxDim];
  int64_t lo = 0, hi = 0;
  span_of(qs, &lo, &hi);
  const int64_t vec = v.dim / 8 * 8;
  for (int64_t j = lo; j < hi; ++j) {
    if (j + kPrefetchAhead < hi) prefetch_row(v.base + (j + kPrefetchAhead) * v.stride, v.dim);
    widen(v.base + j * v.stride, v.dim, row);
    for (int r = 0; r < qs.n; ++r) {
      if (j < qs.begin[r] || j >= qs.end[r]) continue;
      const float p = weight_for(probs[r * p_stride + (j - first)], Elem{});
      const __m256 pv = _mm256_set1_ps(p);
      float* out = acc + r * v.dim;
      for (int64_t d = 0; d < vec; d += 8)
        _mm256_storeu_ps(out + d, _mm256_fmadd_ps(pv, _mm256_load_ps(row + d), _mm256_loadu_ps(out + d)));
      for (int64_t d = vec; d < v.dim; ++d) out[d] += p * row[d];
    }
  }
}

void scores_decoded(const Queries& qs, Decoded k, int64_t first, float* out, int64_t out_stride) {
  decoded_in_chunks::scores(scores<float>, qs, k, first, out, out_stride);
}
void accumulate_decoded(const Queries& qs, Decoded v, int64_t first, const float* probs, int64_t p_stride,
                        float* acc) {
  decoded_in_chunks::accumulate(accumulate<float>, qs, v, first, probs, p_stride, acc);
}

}  // namespace

const Kernels& avx2_kernels() {
  static const Kernels k{scores<float>,         scores<uint16_t>, accumulate<float>, accumulate<uint16_t>,
                         scores_decoded, accumulate_decoded};
  return k;
}

}  // namespace okapi::kv::tile
