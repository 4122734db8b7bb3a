// AVX-512 VNNI kernels over weights repacked into groups of 16 interleaved rows (quant.hpp
// RowGroupKernels): Q8_0, Q4_0, Q5_0 (Q8_0 activations), Q4_1, Q5_1 (Q8_1) (row_groups.cpp),
// Q6_K, Q5_K, Q4_K, Q3_K and Q2_K against Q8_K (row_groups_kquant.cpp, which describes their
// layouts); IQ4_NL, MXFP4 and IQ4_XS are installed by row_groups_iq4_xs_mxfp4.cpp. Call only
// on the avx512 tier. Declarations only: no inline code shared with files of other tiers.
//
// Layout of one group of 16 rows (Q8_0, Q4_0), nb = n_in / 32 blocks back to back, padded to a
// multiple of 64 bytes (rows past the tensor's end are zeros). Per block:
//   levels  L bytes: the 32 levels of each row in 4-byte runs, the run k of row r at byte
//           64 * (k % R) + 4 * r (+ the high nibble for Q4_0, see below), unsigned:
//             Q8_0: L = 512, R = 8, byte = q + 128 (q the stored int8 level, -128..127);
//             Q4_0: L = 256, R = 4, byte = low nibble: level 4k + i, high nibble: level
//                   16 + 4k + i (the stored 0..15 levels, as ggml's qs[4k + i]);
//             Q5_0: L = 320: Q4_0's 256 bytes, then 64 bytes whose byte 4r + i holds in bit k
//                   the fifth bit of level 4k + i (levels 0..31);
//             Q4_1, Q5_1: as Q4_0, Q5_0 (their levels are unsigned already);
//   scales  16 fp16: the rows' block scales d, row r at index r;
//   mins    (Q4_1, Q5_1 only) 16 fp16: the rows' block minimums m.
// Activation row (prepare_activation), nb blocks: the Q8_0 levels of ggml's quantizer (int8,
// 32 per block), then nb float scales (the fp16 d as float), then nb int32 offsets
// -bias * sum(levels) with bias = 128 (Q8_0 weights), 8 (Q4_0) or 16 (Q5_0), so that
//   sum_i w_i a_i = offset + sum_i (unsigned byte_i) * a_i
// is what `vpdpbusd` (unsigned x signed bytes) computes, starting from the offset. For Q4_1 and
// Q5_1 (value = q * d + m) the activation is the reference Q8_1 quantization: the offset words
// hold instead the float s = fp16(d_a * sum(levels)), and the dot starts from 0.
//
// Per (row, token) the result is one float lane: for each block in order,
//   acc = fma(d_w * d_a, float(exact int32 block dot), acc)  (then Q4_1/Q5_1: acc = fma(m_w, s_a, acc)),
// the same operations whatever the batch, so decode and prefill give the same bits.
#pragma once
#include "kernels/format_table.hpp"

namespace okapi::quant::avx512 {

RowGroupKernels q8_0_row_groups();
RowGroupKernels q4_0_row_groups();
RowGroupKernels q5_0_row_groups();
RowGroupKernels q4_1_row_groups();
RowGroupKernels q5_1_row_groups();
RowGroupKernels q6_K_row_groups();
RowGroupKernels q4_K_row_groups();
RowGroupKernels q5_K_row_groups();
RowGroupKernels q3_K_row_groups();  // row_groups_kquant.cpp
RowGroupKernels q2_K_row_groups();
RowGroupKernels tq2_0_row_groups();  // row_groups_ternary.cpp, which describes the layout
RowGroupKernels tq1_0_row_groups();
RowGroupKernels i2_s_row_groups();  // row_groups.cpp, which describes the layout

}  // namespace okapi::quant::avx512
