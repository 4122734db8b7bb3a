// The orthogonal gauge (SliceGPT's computational invariance): for an orthogonal Q, a pre-norm
// llama model with every RMSNorm weight folded into the matrices that read the norm's output is
// the same function when the residual stream is rotated, h' = Qᵀ h:
//   token_embd' = E Q                      (rows are residual vectors)
//   W' = W diag(g) Q,  g' = 1               (attn_q/k/v after attn_norm, ffn_gate/up after ffn_norm)
//   W_o' = Qᵀ W_o,  W_down' = Qᵀ W_down     (they write to the residual stream)
//   output' = output diag(g_out) Q          (a tied head becomes its own tensor: the fold differs)
// RMSNorm commutes with Q because it preserves norms; a diagonal GL(d) "gauge" (seed 003) does not.
// Q is the PCA basis of the residual stream (eigenvectors of E[h hᵀ], descending), so the first
// directions carry the most energy. Low-rank metrics that whiten with E[x xᵀ] are invariant under
// any such change of basis; the plain Frobenius metric (svd, gp, grc) sees the folded norms.
#pragma once
#include <filesystem>
#include <span>

#include "format/gguf.hpp"

namespace okapi::compress {

struct GaugeReport {
  bool untied_output = false;  // the tied head was written as output.weight
  double top_energy = 0;       // fraction of E‖h‖² in the first 10% of Q's directions
};

// Writes `file` in the gauge of the residual second moment (d x d) to `out`, atomically. Throws
// okapi::Error for an architecture other than llama (or one with biases, per-head or extra norms),
// a moment of the wrong size, or weights okapi cannot dequantize.
GaugeReport write_orthogonal_gauge(const gguf::File& file, std::span<const double> residual_second_moment,
                                   const std::filesystem::path& out);

}  // namespace okapi::compress
