// Deterministic elementary functions for exact mode's fp32 islands. Written with IEEE-754
// basic operations only (+ - * / and sqrt, which IEEE rounds correctly), in a fixed order, in
// double precision, then rounded to float once: no libm, no FMA contraction (the library is
// built with -ffp-contract=off), so the result is the same bit pattern on every x86-64 build
// (gcc or clang, -O0 or -O2, scalar or AVX2 callers).
#pragma once
#include <cstdint>

#include "core/cpu.hpp"

namespace okapi::exact::det {

double exp(double x);         // |rel err| < 1e-15 on [-745, 709]; 0 / +inf outside
// x[i] = exp(x[i]) for i < n, bit for bit the same as exp() per element (AVX2 lanes, from the
// avx2 tier up, perform the same IEEE operations): the batch the softmax and SiLU use. `tier` is
// one of available_isas() (the caller's backend's).
void exp_in_place(double* x, std::int64_t n, Isa tier);
double log(double x);         // x > 0
double sin(double x);         // |x| <= 2^20 (RoPE angles); Cody-Waite reduction by pi/2
double cos(double x);
double tanh(double x);
double pow(double base, double e);  // base > 0: exp(e * log(base))
float rsqrt(float x);         // (float)(1.0 / sqrt((double)x))

}  // namespace okapi::exact::det
