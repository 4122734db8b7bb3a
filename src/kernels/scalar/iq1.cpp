// IQ1_S, IQ1_M: reference kernels (to be written).
#include <vector>

#include "kernels/format_table.hpp"

namespace okapi::quant::detail {

void add_iq1_formats(std::vector<Format>&) {}

}  // namespace okapi::quant::detail
