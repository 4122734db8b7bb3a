// Tile scheduling of the float GEMM, its scalar path (double, and float on the scalar tier) and
// the choice of tier (kernels/float_gemm.hpp).
#include "kernels/float_gemm.hpp"

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/thread_pool.hpp"

namespace okapi::kernels {
namespace {

// One tile, scalar: row i of C accumulates A(i, p) * B(p, :) over p in order (an axpy per p, so
// each element's sum runs over p in order), then is added to C.
template <typename T>
void gemm_tile_scalar(int64_t m, int64_t n, int64_t k, StridedMatrix<T> a, StridedMatrix<T> b, T* c, int64_t ldc,
                      bool accumulate) {
  std::vector<T> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), T(0));
    for (int64_t p = 0; p < k; ++p) {
      const T av = a.data[i * a.row_stride + p * a.col_stride];
      const T* bp = b.data + p * b.row_stride;
      for (int64_t j = 0; j < n; ++j) row[j] += av * bp[j * b.col_stride];
    }
    T* out = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) out[j] = accumulate ? out[j] + row[j] : row[j];
  }
}

std::atomic<uint64_t> next_call_id{1};

template <typename T>
void gemm_tiles(detail::FloatGemmTileFn simd_tile, int64_t m, int64_t n, int64_t k, StridedMatrix<T> a,
                StridedMatrix<T> b, T* c, int64_t ldc, bool accumulate, ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  const int64_t tiles_m = (m + kGemmTileM - 1) / kGemmTileM, tiles_n = (n + kGemmTileN - 1) / kGemmTileN;
  const uint64_t call_id = next_call_id.fetch_add(1, std::memory_order_relaxed);
  // Column-major over tiles: consecutive tiles of a chunk share B's columns (packed once).
  const auto run = [&](int64_t first, int64_t last, int) {
    for (int64_t t = first; t < last; ++t) {
      const int64_t i0 = (t % tiles_m) * kGemmTileM, j0 = (t / tiles_m) * kGemmTileN;
      const StridedMatrix<T> a_tile{a.data + i0 * a.row_stride, a.row_stride, a.col_stride};
      const StridedMatrix<T> b_tile{b.data + j0 * b.col_stride, b.row_stride, b.col_stride};
      const int64_t tm = std::min(kGemmTileM, m - i0), tn = std::min(kGemmTileN, n - j0);
      if constexpr (std::is_same_v<T, float>) {
        if (simd_tile != nullptr) {
          simd_tile(tm, tn, k, a_tile.data, a.row_stride, a.col_stride, b_tile.data, b.row_stride, b.col_stride,
                    c + i0 * ldc + j0, ldc, accumulate, call_id);
          continue;
        }
      }
      gemm_tile_scalar(tm, tn, k, a_tile, b_tile, c + i0 * ldc + j0, ldc, accumulate);
    }
  };
  const int64_t tiles = tiles_m * tiles_n;
  if (pool == nullptr || pool->size() == 1 || tiles == 1) {
    run(0, tiles, 0);
  } else {
    pool->parallel_for(tiles, run);
  }
}

detail::FloatGemmTileFn simd_tile(Isa tier) {
  if (tier >= Isa::avx512) return avx512::float_gemm_tile;
  if (tier >= Isa::avx2) return avx2::float_gemm_tile;
  return nullptr;
}

}  // namespace

template <typename T>
void gemm(int64_t m, int64_t n, int64_t k, StridedMatrix<T> a, StridedMatrix<T> b, T* c, int64_t ldc,
          bool accumulate, ThreadPool* pool) {
  gemm_tiles<T>(std::is_same_v<T, float> ? simd_tile(isa()) : nullptr, m, n, k, a, b, c, ldc, accumulate, pool);
}

void gemm(Isa tier, int64_t m, int64_t n, int64_t k, StridedMatrix<float> a, StridedMatrix<float> b, float* c,
          int64_t ldc, bool accumulate, ThreadPool* pool) {
  gemm_tiles<float>(simd_tile(tier), m, n, k, a, b, c, ldc, accumulate, pool);
}

template void gemm<float>(int64_t, int64_t, int64_t, StridedMatrix<float>, StridedMatrix<float>, float*, int64_t,
                          bool, ThreadPool*);
template void gemm<double>(int64_t, int64_t, int64_t, StridedMatrix<double>, StridedMatrix<double>, double*,
                           int64_t, bool, ThreadPool*);

quant::RowGroupKernels float_row_groups(DType type, Isa tier) {
  if (tier >= Isa::avx512) return avx512::float_row_groups(type);
  if (tier >= Isa::avx2) return avx2::float_row_groups(type);
  return {};
}

}  // namespace okapi::kernels
