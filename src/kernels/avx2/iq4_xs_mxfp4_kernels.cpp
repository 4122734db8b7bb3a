// IQ4_XS, MXFP4: AVX2 kernels (to be written).
#include <vector>

#include "kernels/format_table.hpp"

namespace okapi::quant::detail {

void use_avx2_iq_kernels(std::vector<Format>&) {}

}  // namespace okapi::quant::detail
