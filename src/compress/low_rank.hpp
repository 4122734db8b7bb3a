// okapi compress: a model's projection matrices replaced by low-rank factors W ≈ out · in, stored
// as NAME.lr_out.weight ([rank, n_out]) and NAME.lr_in.weight ([n_in, rank]), which the engine
// runs as two matmuls (model/blocks.hpp). Ranks come from the spectra: one energy threshold e for
// the whole model, each matrix keeping the fewest singular values that hold e of its Σσ², and
// factored only where the factors are smaller than the matrix; e is the largest threshold that
// removes the requested fraction of the weight bytes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "format/gguf.hpp"

namespace okapi::compress {

// The methods okapi compress has; the first is the default.
std::vector<std::string> compress_methods();

struct CompressOptions {
  std::string method = "svd";
  double ratio = 0.2;  // fraction of the weight bytes to remove, 0 < ratio < 1
  // Storage of the factors: F32 or F16; F32 by default when every projection is F32, else F16.
  std::optional<DType> factor_type;
};

struct FactoredMatrix {
  std::string name;
  int64_t rows = 0, cols = 0, rank = 0;  // rank 0: kept dense
  double energy_kept = 1.0;
};

struct CompressReport {
  double bytes_before = 0, bytes_after = 0;  // tensor data
  double energy_threshold = 1.0;
  DType factor_type = DType::F32;
  std::vector<FactoredMatrix> matrices;  // every projection, factored or not
};

// Plans the ranks (no output). Throws okapi::Error for a ratio outside (0, 1), a ratio the
// projections cannot give, a model without projections, or an unknown method.
CompressReport plan_compression(const gguf::File& file, const CompressOptions& options);
// Plans, then writes the compressed model to `out` (atomically). `on_matrix` sees each factored
// matrix as it is written.
CompressReport compress_model(const gguf::File& file, const std::filesystem::path& out, const CompressOptions& options,
                              const std::function<void(const FactoredMatrix&)>& on_matrix = {});

}  // namespace okapi::compress
