// IQ1_S, IQ1_M: quantizers (to be written).
#include <vector>

#include "kernels/format_table.hpp"

namespace okapi::quant::detail {

void add_iq1_quantizers(std::vector<Format>&) {}

}  // namespace okapi::quant::detail
