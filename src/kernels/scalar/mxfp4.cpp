// MXFP4: reference kernels (to be written).
#include <vector>

#include "kernels/format_table.hpp"

namespace okapi::quant::detail {

void add_mxfp4_format(std::vector<Format>&) {}

}  // namespace okapi::quant::detail
