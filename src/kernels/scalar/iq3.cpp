// IQ3_XXS, IQ3_S: reference kernels (to be written).
#include <vector>

#include "kernels/format_table.hpp"

namespace okapi::quant::detail {

void add_iq3_formats(std::vector<Format>&) {}

}  // namespace okapi::quant::detail
