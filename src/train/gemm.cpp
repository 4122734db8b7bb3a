// Tile scheduling for the training GEMM and its scalar path (double, and float without AVX2).
#include "train/gemm.hpp"

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/cpu.hpp"
#include "core/thread_pool.hpp"
#include "train/avx2/gemm_f32.hpp"

namespace okapi::train {
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
void gemm_tile(int64_t m, int64_t n, int64_t k, StridedMatrix<T> a, StridedMatrix<T> b, T* c, int64_t ldc,
               bool accumulate, uint64_t call_id) {
  if constexpr (std::is_same_v<T, float>) {
    if (cpu_features().use_avx2()) {
      avx2::gemm_tile_f32(m, n, k, a.data, a.row_stride, a.col_stride, b.data, b.row_stride, b.col_stride, c, ldc,
                          accumulate, call_id);
      return;
    }
  }
  gemm_tile_scalar(m, n, k, a, b, c, ldc, accumulate);
}

}  // namespace

template <typename T>
void gemm(int64_t m, int64_t n, int64_t k, StridedMatrix<T> a, StridedMatrix<T> b, T* c, int64_t ldc,
          bool accumulate, ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  const int64_t tiles_m = (m + kGemmTileM - 1) / kGemmTileM, tiles_n = (n + kGemmTileN - 1) / kGemmTileN;
  const uint64_t call_id = next_call_id.fetch_add(1, std::memory_order_relaxed);
  // Column-major over tiles: consecutive tiles of a chunk share B's columns (packed once).
  const auto run = [&](int64_t first, int64_t last, int) {
    for (int64_t t = first; t < last; ++t) {
      const int64_t i0 = (t % tiles_m) * kGemmTileM, j0 = (t / tiles_m) * kGemmTileN;
      const StridedMatrix<T> a_tile{a.data + i0 * a.row_stride, a.row_stride, a.col_stride};
      const StridedMatrix<T> b_tile{b.data + j0 * b.col_stride, b.row_stride, b.col_stride};
      gemm_tile(std::min(kGemmTileM, m - i0), std::min(kGemmTileN, n - j0), k, a_tile, b_tile, c + i0 * ldc + j0,
                ldc, accumulate, call_id);
    }
  };
  const int64_t tiles = tiles_m * tiles_n;
  if (pool == nullptr || pool->size() == 1 || tiles == 1) {
    run(0, tiles, 0);
  } else {
    pool->parallel_for(tiles, run);
  }
}

template void gemm<float>(int64_t, int64_t, int64_t, StridedMatrix<float>, StridedMatrix<float>, float*, int64_t,
                          bool, ThreadPool*);
template void gemm<double>(int64_t, int64_t, int64_t, StridedMatrix<double>, StridedMatrix<double>, double*,
                           int64_t, bool, ThreadPool*);

}  // namespace okapi::train
