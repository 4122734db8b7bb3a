// The fp32 islands of exact mode (seed 000) as plain functions: rmsnorm, RoPE, the attention
// softmax and the gated activations, computed in double in a fixed sequential order with
// exact/detmath.hpp's functions and rounded to float once per output. Each result is a function
// of its inputs alone (no threads, no SIMD, no libm), so it is the same bit pattern on every
// x86-64 build. ExactOps calls these; tests call them directly.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/kernels.hpp"
#include "model/ops.hpp"

namespace okapi::backend::exact_islands {

// y = x / sqrt(mean(x^2) + eps) * weight (weight may be null); x and y may alias.
void rmsnorm_row(const float* x, const float* weight, int64_t n, float eps, float* y);

// Rotates x[n_heads][head_dim] in place for one token at `position`, with ggml_rope_ext's
// semantics (normal / NeoX pairs, freq_base, freq_scale, freq_factors, YaRN ext_factor, mscale):
// the angle of pair i is position * base^(-2i/n_rot) (built by repeated multiplication in double,
// as ggml does in float). Throws okapi::Error for a bad n_rot or an angle beyond det::sin's range.
void rope_token(float* x, int64_t n_heads, int64_t head_dim, int64_t position, const kernels::RopeConfig& config);

// In place over scores[0, n): s -> softcap > 0 ? softcap tanh(s scale / softcap) : s scale, then a
// max-subtracted softmax (det::exp, sum in index order). A `sink` logit (gpt-oss; may be null)
// joins the max and the sum but gets no output. `scratch` is reused storage.
void softmax_scores(float* scores, int64_t n, float scale, float softcap, const float* sink,
                    std::vector<double>& scratch, Isa tier);

// out[i] = act(gate[i]) * up[i]. GELU and GELUF32 are both the tanh formula
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) with det::tanh: ggml's fp16 lookup table is a
// float-mode rounding artefact that exact mode does not reproduce.
void glu(model::Activation act, const float* gate, const float* up, int64_t n, float* out, Isa tier);

}  // namespace okapi::backend::exact_islands
