// PLACEHOLDER: being written; registers no formats yet.
#include "quant/quant.hpp"

namespace okapi::quant::detail {
void add_ternary_formats(std::vector<Format>& /*table*/) {}
}  // namespace okapi::quant::detail
