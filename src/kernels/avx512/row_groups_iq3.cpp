// IQ3_*: AVX-512 row groups (to be written).
#include <vector>

#include "kernels/format_table.hpp"

namespace okapi::quant::detail {

void use_avx512_iq3_kernels(std::vector<Format>&) {}

}  // namespace okapi::quant::detail
