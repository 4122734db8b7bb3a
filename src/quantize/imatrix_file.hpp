// Importance matrices as llama-imatrix writes them and llama-quantize reads them: per weight
// tensor, the sums of squared activations of every input column (one row per expert matrix for
// MoE tensors) and how many activations each matrix saw. Two file formats: llama-imatrix's GGUF
// (general.type "imatrix", tensors "<name>.in_sum2" and "<name>.counts", imatrix.* keys) and its
// legacy binary .dat. Each is read and written, so okapi's and llama.cpp's tools read each
// other's files.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace okapi::quantize {

struct ImatrixEntry {
  int64_t n_per_row = 0;     // input columns of the weight (its ne[0])
  int64_t n_mat = 1;         // matrices: experts of a 3-D MoE weight, else 1
  std::vector<float> sums;   // [n_mat][n_per_row]: sum over activations of x_j^2
  std::vector<int64_t> counts;  // [n_mat]: activations summed per matrix
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by weight tensor name ("blk.0.attn_q.weight")
  std::vector<std::string> datasets;            // calibration file names (imatrix.datasets)
  int64_t chunk_count = 0;                      // chunks processed (imatrix.chunk_count)
  int64_t chunk_size = 0;                       // tokens per chunk (imatrix.chunk_size)
};

// Reads either format (detected by its first bytes). Throws okapi::Error on a malformed file
// (bad sizes, counts, names, truncation) naming the file and what is wrong.
Imatrix read_imatrix(const std::filesystem::path& path);
// Writes atomically (nothing is left at `path` on failure; an existing file is replaced only on
// success). The GGUF form is llama-imatrix's default; the .dat form its --output-format dat.
void write_imatrix_gguf(const Imatrix& imatrix, const std::filesystem::path& path);
void write_imatrix_dat(const Imatrix& imatrix, const std::filesystem::path& path);

// llama-quantize's importance weights for one weight tensor: per matrix, sums / counts (the mean
// squared activation per column), [n_mat][n_per_row], as its load_imatrix computes them.
std::vector<float> importance_weights(const ImatrixEntry& entry);

}  // namespace okapi::quantize
