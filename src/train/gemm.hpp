// The training GEMM: C = (accumulate ? C : 0) + A * B, with A and B read through (row, column)
// strides, so one routine covers y = x W^T (forward), dx = dy W and dW += dy^T x (backward) and
// the attention products without transposing copies.
//
// Determinism: C is cut into fixed tiles (kGemmTileM x kGemmTileN, independent of the pool);
// each tile is computed by one task over k in fixed blocks of kGemmBlockK, so every element's
// summation order is fixed and results are bit-identical for any pool size or calling thread.
// float uses a packed 6x16 AVX2+FMA micro-kernel when the CPU has it; double (the gradient checks)
// and float without AVX2 use a scalar loop with the same contract.
#pragma once
#include <cstdint>

namespace okapi {
class ThreadPool;
}

namespace okapi::train {

inline constexpr int64_t kGemmTileM = 96;    // rows of C per task (a multiple of 6)
inline constexpr int64_t kGemmTileN = 192;   // columns of C per task (a multiple of 16)
inline constexpr int64_t kGemmBlockK = 256;  // k per packed block

// Strided read-only matrix: element (i, j) is data[i * row_stride + j * col_stride].
template <typename T>
struct StridedMatrix {
  const T* data;
  int64_t row_stride;
  int64_t col_stride;
};

// C[m x n] (row-major, rows ldc apart) = (accumulate ? C : 0) + A[m x k] B[k x n]. pool may be
// null (runs on the calling thread).
template <typename T>
void gemm(int64_t m, int64_t n, int64_t k, StridedMatrix<T> a, StridedMatrix<T> b, T* c, int64_t ldc,
          bool accumulate, ThreadPool* pool);

}  // namespace okapi::train
