#include "train/avx2/adamw.hpp"

#include <immintrin.h>

namespace okapi::train::avx2 {

void adamw_update(const AdamWUpdate& u, size_t n, float* params, const float* grads, float* m, float* v,
                  const float* mask) {
  const __m256 b1 = _mm256_set1_ps(u.b1), omb1 = _mm256_set1_ps(u.one_minus_b1);
  const __m256 b2 = _mm256_set1_ps(u.b2), omb2 = _mm256_set1_ps(u.one_minus_b2);
  const __m256 c1 = _mm256_set1_ps(u.c1), c2 = _mm256_set1_ps(u.c2), eps = _mm256_set1_ps(u.eps);
  const __m256 lr = _mm256_set1_ps(u.lr), decay = _mm256_set1_ps(u.decay);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(grads + i);
    const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(omb1, g));
    const __m256 vi =
        _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)), _mm256_mul_ps(omb2, _mm256_mul_ps(g, g)));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 update =
        _mm256_div_ps(_mm256_mul_ps(mi, c1), _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, c2)), eps));
    const __m256 p = _mm256_loadu_ps(params + i);
    const __m256 decayed = _mm256_sub_ps(p, _mm256_mul_ps(_mm256_mul_ps(decay, _mm256_loadu_ps(mask + i)), p));
    _mm256_storeu_ps(params + i, _mm256_sub_ps(decayed, _mm256_mul_ps(lr, update)));
  }
  adamw_update_scalar(u, n - i, params + i, grads + i, m + i, v + i, mask + i);
}

}  // namespace okapi::train::avx2
