// The scale searches shared by ggml's k-quant reference quantizers (ggml-quants.c), reproduced
// operation by operation in float so that the chosen integers, and hence the bytes, are identical.
// Every product/sum below is a separate float rounding, as ggml's reference build computes it: do
// not rewrite `a * b + c` into anything that could fuse or reorder.
#pragma once
#include <bit>
#include <cstdint>

namespace okapi::quant::kquant {

// Round to nearest, ties to even: adding 1.5 * 2^23 leaves the rounded integer in the low mantissa
// bits (ggml's nearest_int). Only meaningful for |v| <= 2^22 - 1; larger inputs give some value in
// [-2^22, 2^22) instead of undefined behaviour.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  return (std::bit_cast<int32_t>(shifted) & 0x007fffff) - 0x00400000;
}

// Largest-magnitude element of x[0..n), keeping its sign (the first one wins ties); its magnitude
// goes to amax.
float signed_absmax(int n, const float* x, float& amax);

// Symmetric levels with a sign-selected scale (make_qx_quants, rmse_type 1): weights are qw[i], or
// x^2 when qw is null; 19 scale candidates around nmax / max. L[i] = level + nmax in [0, 2 * nmax).
// Returns the scale.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* qw = nullptr);

// Non-negative levels L[i] in [0, nmax] for non-negative x (sub-block scales or mins) with an
// importance-weighted scale search and one-element refinement (make_qp_quants). Returns the scale.
float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* weights);

// Symmetric 3-bit levels refined one element at a time (make_q3_quants with do_rmse = true).
// L[i] = level + nmax in [0, 2 * nmax). Returns the scale.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L);

struct ScaleSearch {
  float rmin;    // first candidate: iscale = (nmax + rmin) / (max - min)
  float rdelta;  // step between candidates
  int nstep;     // candidates rmin, rmin + rdelta, ..., rmin + nstep * rdelta
  bool use_mad;  // weighted absolute error instead of weighted squared error
};

struct ScaleMin {
  float scale;
  float min;  // subtracted offset, >= 0: x ~= scale * L - min
};

// Asymmetric levels L[i] in [0, nmax] with a weighted least-squares scale and min
// (make_qkx2_quants). `aux` holds n scratch bytes.
ScaleMin make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                          uint8_t* aux, const ScaleSearch& search);

// 6-bit scale and min of sub-block j from Q4_K/Q5_K's 12 packed scale bytes (get_scale_min_k4).
struct ScaleMin6 {
  uint8_t scale;
  uint8_t min;
};
inline ScaleMin6 unpack_scale_min_k4(int j, const uint8_t* q) {
  if (j < 4) return {static_cast<uint8_t>(q[j] & 63), static_cast<uint8_t>(q[j + 4] & 63)};
  return {static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4)),
          static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4))};
}

// Inverse of unpack_scale_min_k4 for all 8 sub-blocks (values must be < 64).
void pack_scale_min_k4(const uint8_t* scales, const uint8_t* mins, uint8_t* q);

}  // namespace okapi::quant::kquant
