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
  // Read from a legacy .dat: n_mat is unknown there (1, n_per_row = all values), `sums` hold
  // (sum / count) * ncall and `counts` is {ncall}, as save_imatrix_legacy writes them.
  bool legacy = false;
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by weight tensor name ("blk.0.attn_q.weight")
  std::vector<std::string> datasets;            // calibration file names (imatrix.datasets)
  int64_t chunk_count = 0;                      // chunks processed (imatrix.chunk_count)
  int64_t chunk_size = 0;                       // tokens per chunk (imatrix.chunk_size)
  bool legacy = false;        // read from a legacy .dat (every entry legacy, chunk_size 0)
  // A GGUF file has imatrix.datasets, .chunk_count and .chunk_size (llama-quantize refuses one
  // without them); always true for .dat files and for what okapi collects.
  bool has_metadata = true;
};

// Reads either format (detected by its first bytes). Throws okapi::Error on a malformed file
// (bad sizes, counts, names, truncation) naming the file and what is wrong.
Imatrix read_imatrix(const std::filesystem::path& path);
// Writes atomically (nothing is left at `path` on failure; an existing file is replaced only on
// success). The GGUF form is llama-imatrix's default; the .dat form its --output-format dat.
void write_imatrix_gguf(const Imatrix& imatrix, const std::filesystem::path& path);
// The GGUF form refuses legacy entries (convert them with to_raw first); the .dat form writes
// legacy entries back as read and needs chunk_size > 0 for the others.
void write_imatrix_dat(const Imatrix& imatrix, const std::filesystem::path& path);

// Legacy entries turned into raw sums and counts as llama-imatrix's load_imatrix does when it
// merges a .dat file: sums * chunk_size, counts {ncall * chunk_size}. Raw entries are unchanged.
Imatrix to_raw(Imatrix imatrix, int64_t chunk_size);

// Adds `from` into `into` as llama-imatrix merges --in-file files (legacy ones first converted
// with to_raw(chunk_size)): sums and counts added per entry, a one-count entry broadcast to the
// other's matrices, datasets appended. Throws okapi::Error on mismatched sizes. chunk_count is
// left to the caller (llama-imatrix recomputes it from the largest count).
void merge_imatrix(Imatrix& into, const Imatrix& from, int64_t chunk_size);

// llama-quantize's importance weights for one weight tensor: per matrix, sums / counts (the mean
// squared activation per column), [n_mat][n_per_row], as its load_imatrix computes them.
std::vector<float> importance_weights(const ImatrixEntry& entry);

}  // namespace okapi::quantize
