// Singular-value spectra of a model's weight matrices (`okapi analyze --spectra`), and the
// numbers that say how much rank a matrix really uses: effective rank (Roy & Vetterli 2007:
// exp of the entropy of σᵢ / Σσ), stable rank (Σσ² / σ₁²) and the ranks keeping 90% / 99% of
// the energy Σσ². Low-rank compression (okapi compress) allocates ranks from the same spectra.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/gguf.hpp"

namespace okapi::compress {

struct MatrixSpectrum {
  std::string name;   // tensor name, e.g. blk.3.attn_q.weight
  int64_t layer = -1;  // from blk.N., -1 for others (token_embd, output)
  std::string kind;   // attn_q, ffn_down, token_embd, ...
  int64_t rows = 0, cols = 0;  // out x in (ggml ne[1] x ne[0])
  std::string type;   // storage type name
  std::vector<double> sigma;  // descending
  double effective_rank = 0, stable_rank = 0;
  int64_t rank_90 = 0, rank_99 = 0;
};

// The summary numbers of `sigma` (descending, non-negative) for a rows x cols matrix.
MatrixSpectrum summarize_spectrum(std::string name, int64_t rows, int64_t cols, std::vector<double> sigma);
// blk.N.KIND.weight -> (N, KIND); other names -> (-1, name without ".weight").
std::pair<int64_t, std::string> layer_and_kind(const std::string& tensor_name);

// True for a 2-D weight matrix (both sides >= 2, not a .bias table) whose name contains `filter` ("" for all).
bool is_weight_matrix(const gguf::TensorInfo& t, const std::string& filter = "");
// The matrix as floats, row-major (rows = ggml ne[1]); `who` ("analyze", "compress") starts the
// error for a type okapi cannot dequantize.
std::vector<float> dequantized_matrix(const gguf::TensorInfo& t, const char* who);

// The 2-D weight matrices of `file` whose name contains `filter` ("" for all), in file order, each
// dequantized to float and decomposed; `on_matrix` sees each as it is done. Throws okapi::Error
// when no tensor matches or a type cannot be dequantized.
std::vector<MatrixSpectrum> weight_spectra(const gguf::File& file, const std::string& filter,
                                           const std::function<void(const MatrixSpectrum&)>& on_matrix = {});

// One SVG per kind: σᵢ / σ₁ (log scale) against i / min(rows, cols), a line per layer coloured
// from first (blue) to last (red). Returns (kind, svg) pairs.
std::vector<std::pair<std::string, std::string>> spectra_svgs(const std::vector<MatrixSpectrum>& spectra,
                                                              const std::string& model_name);
// Effective rank / full rank per layer, a line per kind.
std::string effective_rank_svg(const std::vector<MatrixSpectrum>& spectra, const std::string& model_name);

}  // namespace okapi::compress
