// IQ4_XS: reference kernels (to be written).
#include <vector>

#include "kernels/format_table.hpp"

namespace okapi::quant::detail {

void add_iq4_xs_format(std::vector<Format>&) {}

}  // namespace okapi::quant::detail
