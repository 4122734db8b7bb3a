// AVX2 batch of det::exp: four lanes performing exactly the scalar code's IEEE operations (no FMA),
// so every element gets the same bits as det::exp. Call only when cpu_features().use_avx2().
#pragma once
#include <cstdint>

namespace okapi::exact::avx2 {

// x[i] = det::exp(x[i]) for i < the returned count (a multiple of 4 <= n); the caller finishes the
// tail. Groups holding a lane outside [-708, 708] or NaN are computed by the scalar det::exp.
std::int64_t exp_in_place(double* x, std::int64_t n);

}  // namespace okapi::exact::avx2
