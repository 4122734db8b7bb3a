// AVX2+FMA tile of the training GEMM (train/gemm.hpp): one C tile of at most kGemmTileM x
// kGemmTileN over the whole k, A and B packed per kGemmBlockK block into thread-local panels,
// a 6x16 register micro-kernel. Per element: an FMA chain over each k block, added to C block
// by block. call_id (unique per GEMM call, 0 = none) lets consecutive tiles of one call on one
// thread share the packed B. Only after cpu_features().use_avx2().
#pragma once
#include <cstdint>

namespace okapi::train::avx2 {

void gemm_tile_f32(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                   int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate, uint64_t call_id);

}  // namespace okapi::train::avx2
