// IQ2_XXS, IQ2_XS, IQ2_S: reference kernels (to be written).
#include <vector>

#include "kernels/format_table.hpp"

namespace okapi::quant::detail {

void add_iq2_formats(std::vector<Format>&) {}

}  // namespace okapi::quant::detail
