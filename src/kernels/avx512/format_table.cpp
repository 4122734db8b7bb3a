// Installs the AVX-512 kernels into the avx512 tier's format table (which starts as the avx2
// tier's). table.cpp calls this only when okapi::isa() is Isa::avx512.
#include <vector>

#include "kernels/avx512/row_groups.hpp"
#include "kernels/format_table.hpp"

namespace okapi::quant::detail {

void use_avx512_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    if (f.type == DType::Q8_0) f.row_groups = avx512::q8_0_row_groups();
    if (f.type == DType::Q4_0) f.row_groups = avx512::q4_0_row_groups();
    if (f.type == DType::Q5_0) f.row_groups = avx512::q5_0_row_groups();
    if (f.type == DType::Q4_1) f.row_groups = avx512::q4_1_row_groups();
    if (f.type == DType::Q5_1) f.row_groups = avx512::q5_1_row_groups();
    if (f.type == DType::Q6_K) f.row_groups = avx512::q6_K_row_groups();
    if (f.type == DType::Q4_K) f.row_groups = avx512::q4_K_row_groups();
    if (f.type == DType::Q5_K) f.row_groups = avx512::q5_K_row_groups();
    if (f.type == DType::Q3_K) f.row_groups = avx512::q3_K_row_groups();
    if (f.type == DType::Q2_K) f.row_groups = avx512::q2_K_row_groups();
    if (f.type == DType::TQ2_0) f.row_groups = avx512::tq2_0_row_groups();
    if (f.type == DType::TQ1_0) f.row_groups = avx512::tq1_0_row_groups();
    if (f.type == DType::I2_S) f.row_groups = avx512::i2_s_row_groups();
  }
  use_avx512_iq_kernels(table);
  use_avx512_iq2_kernels(table);
  use_avx512_iq3_kernels(table);
  use_avx512_iq1_kernels(table);
}

}  // namespace okapi::quant::detail
