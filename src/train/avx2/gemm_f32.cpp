// Packed AVX2 GEMM tile (see gemm_f32.hpp). A panels: 6 rows interleaved per k step; B panels:
// 16 columns per k step, zero-padded at the edges so the micro-kernel never branches inside k.
#include "train/avx2/gemm_f32.hpp"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "train/gemm.hpp"

namespace okapi::train::avx2 {
namespace {

constexpr int64_t kMr = 6, kNr = 16;
static_assert(kGemmTileM % kMr == 0 && kGemmTileN % kNr == 0);

// A[m x kc] (rows padded to a multiple of 6) -> panels of pa[(i / 6) * 6 * kc + p * 6 + i % 6].
void pack_a(int64_t m, int64_t kc, const float* a, int64_t a_rs, int64_t a_cs, float* pa) {
  if (a_rs == 1) {  // columns of A contiguous (A = dy^T): read a whole column of the tile per p
    const int64_t full = m / kMr, rest = m % kMr;
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = a + p * a_cs;
      float* dst = pa + p * kMr;
      for (int64_t panel = 0; panel < full; ++panel) {
        for (int64_t r = 0; r < kMr; ++r) dst[panel * kMr * kc + r] = src[panel * kMr + r];
      }
      if (rest > 0) {
        for (int64_t r = 0; r < kMr; ++r) dst[full * kMr * kc + r] = r < rest ? src[full * kMr + r] : 0.0f;
      }
    }
    return;
  }
  for (int64_t i0 = 0; i0 < m; i0 += kMr) {
    float* panel = pa + i0 * kc;
    const int64_t rows = std::min(kMr, m - i0);
    for (int64_t r = 0; r < kMr; ++r) {
      if (r >= rows) {
        for (int64_t p = 0; p < kc; ++p) panel[p * kMr + r] = 0.0f;
        continue;
      }
      const float* src = a + (i0 + r) * a_rs;
      for (int64_t p = 0; p < kc; ++p) panel[p * kMr + r] = src[p * a_cs];
    }
  }
}

// B[kc x n] (columns padded to a multiple of 16) -> panels of pb[(j / 16) * 16 * kc + p * 16 + j % 16].
void pack_b(int64_t n, int64_t kc, const float* b, int64_t b_rs, int64_t b_cs, float* pb) {
  if (b_cs == 1) {  // rows of B contiguous (B = W or x): read each row once, front to back
    const int64_t full = n / kNr, rest = n % kNr;
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = b + p * b_rs;
      float* dst = pb + p * kNr;
      for (int64_t panel = 0; panel < full; ++panel) {
        _mm256_storeu_ps(dst + panel * kNr * kc, _mm256_loadu_ps(src + panel * kNr));
        _mm256_storeu_ps(dst + panel * kNr * kc + 8, _mm256_loadu_ps(src + panel * kNr + 8));
      }
      if (rest > 0) {
        for (int64_t c = 0; c < kNr; ++c) dst[full * kNr * kc + c] = c < rest ? src[full * kNr + c] : 0.0f;
      }
    }
    return;
  }
  for (int64_t j0 = 0; j0 < n; j0 += kNr) {
    float* panel = pb + j0 * kc;
    const int64_t cols = std::min(kNr, n - j0);
    for (int64_t c = 0; c < kNr; ++c) {  // B = W^T: read each W row along k
      if (c >= cols) {
        for (int64_t p = 0; p < kc; ++p) panel[p * kNr + c] = 0.0f;
        continue;
      }
      const float* src = b + (j0 + c) * b_cs;
      for (int64_t p = 0; p < kc; ++p) panel[p * kNr + c] = src[p * b_rs];
    }
  }
}

// C[rows x cols] (<= 6 x 16) = (overwrite ? 0 : C) + sum_p pa[p] (x) pb[p]. The twelve
// accumulators are named variables (an array makes GCC spill them to the stack every step).
void micro_kernel(int64_t kc, const float* pa, const float* pb, float* c, int64_t ldc, int64_t rows, int64_t cols,
                  bool overwrite) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(pb), b1 = _mm256_loadu_ps(pb + 8);
    __m256 a = _mm256_broadcast_ss(pa);
    c00 = _mm256_fmadd_ps(a, b0, c00);
    c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(pa + 1);
    c10 = _mm256_fmadd_ps(a, b0, c10);
    c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(pa + 2);
    c20 = _mm256_fmadd_ps(a, b0, c20);
    c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(pa + 3);
    c30 = _mm256_fmadd_ps(a, b0, c30);
    c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(pa + 4);
    c40 = _mm256_fmadd_ps(a, b0, c40);
    c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(pa + 5);
    c50 = _mm256_fmadd_ps(a, b0, c50);
    c51 = _mm256_fmadd_ps(a, b1, c51);
    pa += kMr;
    pb += kNr;
  }
  alignas(32) float tmp[kMr][kNr];
  const bool full = rows == kMr && cols == kNr;
  const auto put = [&](int64_t r, __m256 lo, __m256 hi) {
    if (!full) {
      _mm256_store_ps(tmp[r], lo);
      _mm256_store_ps(tmp[r] + 8, hi);
      return;
    }
    float* out = c + r * ldc;
    if (!overwrite) {
      lo = _mm256_add_ps(_mm256_loadu_ps(out), lo);
      hi = _mm256_add_ps(_mm256_loadu_ps(out + 8), hi);
    }
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
  };
  put(0, c00, c01);
  put(1, c10, c11);
  put(2, c20, c21);
  put(3, c30, c31);
  put(4, c40, c41);
  put(5, c50, c51);
  if (full) return;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) c[r * ldc + j] = overwrite ? tmp[r][j] : c[r * ldc + j] + tmp[r][j];
  }
}

}  // namespace

void gemm_tile_f32(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                   int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate, uint64_t call_id) {
  // Packed B of the last tile this thread ran (all its k blocks when k <= kCachedK): the next
  // tile of the same GEMM call and column range reuses it. Keyed by the call, never stale.
  constexpr int64_t kCachedK = 2048;
  constexpr int64_t kBlockFloats = kGemmTileN * kGemmBlockK;
  struct PackedB {
    std::vector<float> data;
    uint64_t call_id = 0;
    const float* b = nullptr;
  };
  thread_local std::vector<float> pa;
  thread_local PackedB pb;
  pa.resize(static_cast<size_t>(kGemmTileM * kGemmBlockK));
  const bool cacheable = k <= kCachedK;
  pb.data.resize(static_cast<size_t>(kBlockFloats * (kCachedK / kGemmBlockK)));
  const bool reuse = cacheable && call_id != 0 && pb.call_id == call_id && pb.b == b;
  pb.call_id = 0;  // invalid while being (re)packed
  if (k == 0 && !accumulate) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
  }
  for (int64_t p0 = 0; p0 < k; p0 += kGemmBlockK) {
    const int64_t kc = std::min(kGemmBlockK, k - p0);
    float* packed_b = pb.data.data() + (cacheable ? (p0 / kGemmBlockK) * kBlockFloats : 0);
    pack_a(m, kc, a + p0 * a_cs, a_rs, a_cs, pa.data());
    if (!reuse) pack_b(n, kc, b + p0 * b_rs, b_rs, b_cs, packed_b);
    const bool overwrite = p0 == 0 && !accumulate;
    for (int64_t j0 = 0; j0 < n; j0 += kNr) {
      for (int64_t i0 = 0; i0 < m; i0 += kMr) {
        micro_kernel(kc, pa.data() + i0 * kc, packed_b + j0 * kc, c + i0 * ldc + j0, ldc, std::min(kMr, m - i0),
                     std::min(kNr, n - j0), overwrite);
      }
    }
  }
  if (cacheable) {
    pb.call_id = call_id;
    pb.b = b;
  }
}

}  // namespace okapi::train::avx2
