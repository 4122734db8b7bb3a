// PLACEHOLDER: being written; replaces no kernels yet.
#include "quant/quant.hpp"

namespace okapi::quant::detail {
void use_avx2_kernels(std::vector<Format>& /*table*/) {}
}  // namespace okapi::quant::detail
