// Installs the AVX-512 kernels into the avx512 tier's format table (which starts as a copy of the
// avx2 tier's). table.cpp calls this only when okapi::isa() is Isa::avx512.
#include <vector>

#include "quant/quant.hpp"

namespace okapi::quant::detail {

void use_avx512_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    switch (f.type) {
      default:
        break;
    }
  }
}

}  // namespace okapi::quant::detail
