// IQ1_S / IQ1_M quantizers (ggml-quants.c quantize_row_iq1_s_impl / quantize_row_iq1_m_impl), one
// row of n values (a multiple of 256) with its n importance weights. add_iq1_quantizers installs
// them on the IQ1 rows of the format table; the declarations are here for tests that check them
// before those rows exist. Throw okapi::Error on non-finite input.
#pragma once
#include <cstdint>

namespace okapi::quant::detail {

void quantize_iq1_s_row(const float* x, void* dst, int64_t n, const float* importance);
void quantize_iq1_m_row(const float* x, void* dst, int64_t n, const float* importance);

}  // namespace okapi::quant::detail
