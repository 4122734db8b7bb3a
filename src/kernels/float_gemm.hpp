// The float GEMM, one for training and inference: a packed register micro-kernel (per ISA tier:
// 6 x 16 on AVX2+FMA, 6 x 64 on AVX-512) that multiplies rows of A by panels of B stored as
// NR columns per k step. Training calls it through gemm() with strided A and B (packed per
// tile); inference calls it through the F32 / F16 / BF16 rows of the format table, whose
// row-group kernels (float_row_groups) pack the weights at load into those same panels (in
// their own element type: F16 stays fp16 in memory and is widened in the kernel).
//
// gemm() determinism: C is cut into fixed tiles (kGemmTileM x kGemmTileN, independent of the
// pool); each tile is computed by one task over k in fixed blocks of kGemmBlockK, so every
// element's summation order is fixed and results are bit-identical for any pool size or calling
// thread. double (the gradient checks) and the scalar tier use a scalar loop with that contract.
//
// Row-group determinism: each (token, row) output is one SIMD lane's FMA chain over k in order,
// started from zero, whatever the number of tokens, rows or threads, so a token's output is
// bit-identical alone or inside a batch. F16 and BF16 activations are rounded to the weight's
// type first, as ggml does before its F16 / BF16 dot products.
#pragma once
#include <cstdint>

#include "core/cpu.hpp"
#include "core/dtype.hpp"
#include "kernels/format_table.hpp"

namespace okapi {
class ThreadPool;
}

namespace okapi::kernels {

inline constexpr int64_t kGemmTileM = 96;    // rows of C per task (a multiple of every tier's MR)
inline constexpr int64_t kGemmTileN = 192;   // columns of C per task (a multiple of every tier's NR)
inline constexpr int64_t kGemmBlockK = 256;  // k per packed block

// Strided read-only matrix: element (i, j) is data[i * row_stride + j * col_stride].
template <typename T>
struct StridedMatrix {
  const T* data;
  int64_t row_stride;
  int64_t col_stride;
};

// C[m x n] (row-major, rows ldc apart) = (accumulate ? C : 0) + A[m x k] B[k x n]. pool may be
// null (runs on the calling thread). float runs on the tier in use (isa()), or on `tier`.
template <typename T>
void gemm(int64_t m, int64_t n, int64_t k, StridedMatrix<T> a, StridedMatrix<T> b, T* c, int64_t ldc,
          bool accumulate, ThreadPool* pool);
void gemm(Isa tier, int64_t m, int64_t n, int64_t k, StridedMatrix<float> a, StridedMatrix<float> b, float* c,
          int64_t ldc, bool accumulate, ThreadPool* pool);

// The row-group kernels of F32, F16 or BF16 weights on `tier` (rows == 0: none, e.g. scalar).
quant::RowGroupKernels float_row_groups(DType type, Isa tier);

// What each tier provides (defined in kernels/avx2/float_gemm.cpp, kernels/avx512/float_gemm.cpp).
namespace detail {
using FloatGemmTileFn = void (*)(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
                                 const float* b, int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate,
                                 uint64_t call_id);
}  // namespace detail
namespace avx2 {
void float_gemm_tile(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                     int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate, uint64_t call_id);
quant::RowGroupKernels float_row_groups(DType type);
}  // namespace avx2
namespace avx512 {
void float_gemm_tile(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                     int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate, uint64_t call_id);
quant::RowGroupKernels float_row_groups(DType type);
}  // namespace avx512

}  // namespace okapi::kernels
