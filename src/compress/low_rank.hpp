// okapi compress: a model's projection matrices replaced by low-rank factors W ≈ out · in, stored
// as NAME.lr_out.weight ([rank, n_out]) and NAME.lr_in.weight ([n_in, rank]), which the engine
// runs as two matmuls (model/blocks.hpp). A basis shared by several projections (GRC's Q/K/V
// basis, Basis Sharing's cross-layer basis) is stored once, under its first user's name, and the
// others carry the metadata key okapi.lr_in.NAME naming it.
//
// Every method factors "units": one matrix, or several with the same input stacked vertically,
// [W_1; …; W_n] · T = U Σ Vᵀ, truncated to rank r: in = √Σ_r V_rᵀ T⁻¹ (shared), out_i = U_i √Σ_r.
// T is the metric the truncation is optimal in:
//   svd, gp, grc   T = I                        (‖W − W'‖_F; GRC stacks a layer's Q, K, V)
//   asvd           T = diag(E|x_j|)^½           (activation-aware scaling, ASVD)
//   svd-llm        T = chol(E[x xᵀ])            (‖(W − W')x‖ on calibration data, SVD-LLM)
//   best           SVD-LLM's metric, fitted site by site to the inputs the compressed model sees
//                  (compress/sequential.hpp), with energy-threshold ranks
//   basis-sharing  T = chol(Σ_layers E[x xᵀ])   (Q, K, V, gate, up stacked over groups of layers)
// Ranks (--ranks): `energy`, one threshold on the fraction of each unit's Σσ² kept (in its
// metric); `uniform`, one fraction of each unit's break-even rank (SVD-LLM's per-matrix ratio);
// `mcr`, seed 003's phase-aware scales of that fraction per layer; or a file of ranks. For a
// ratio, the allocation's parameter is searched so that R of the weight bytes are removed.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compress/calibration.hpp"
#include "compress/sequential.hpp"
#include "core/dtype.hpp"
#include "format/gguf.hpp"

namespace okapi::compress {

// The methods okapi compress has; the first is the default.
std::vector<std::string> compress_methods();
// Whether a method needs calibration data (--calib).
bool method_needs_calibration(const std::string& method);
// The rank allocation a method uses for --ranks auto.
std::string default_rank_allocation(const std::string& method);

struct CompressOptions {
  std::string method = "best";
  std::optional<double> ratio;  // fraction of the weight bytes to remove, 0 < ratio < 1 (not with a ranks file)
  // Storage of the factors: F32, F16 or a block type okapi quantizes to (ranks are then multiples
  // of its block); F32 by default when every projection is F32, else F16.
  std::optional<DType> factor_type;
  std::string ranks = "auto";  // auto | energy | uniform | mcr | a file of "NAME RANK" lines
  const Calibration* calibration = nullptr;  // required by method_needs_calibration() and mcr
  const CalibrationSource* source = nullptr;  // the model and text behind it (best's site-by-site fit)
  std::function<void(size_t, size_t)> on_site;  // best: progress of the fit (site, sites)
  int64_t share_layers = 2;                  // basis-sharing: layers per shared basis
  // The bytes R is a fraction of, when not this file's (the original of a gauged copy).
  std::optional<double> reference_bytes;
  bool sink_bypass = true;                   // gp: seed 003's attention-sink direction in the basis
};

struct FactoredMatrix {
  std::string name;
  int64_t rows = 0, cols = 0, rank = 0;  // rank 0: kept dense
  double energy_kept = 1.0;              // of its unit, in the method's metric
  std::string basis;                     // the in-factor's tensor when shared with others (else empty)
  bool sink_vector = false;              // gp: the sink direction replaced the last basis vector
};

struct CompressReport {
  std::string method, ranks;  // ranks: the allocation used
  double bytes_before = 0, bytes_after = 0;  // tensor data
  double allocation_parameter = 0;  // energy threshold, or fraction of the break-even rank
  DType factor_type = DType::F32;
  std::vector<std::string> notes;          // e.g. "mcr: phases flat, uniform ranks"
  std::vector<FactoredMatrix> matrices;    // every projection the method considers, factored or not
};

// Plans the ranks (no output). Throws okapi::Error for a ratio outside (0, 1), a ratio the
// projections cannot give, a model without projections or already compressed, an unknown method,
// missing calibration, or a bad ranks file.
CompressReport plan_compression(const gguf::File& file, const CompressOptions& options);
// Plans, then writes the compressed model to `out` (atomically). `on_matrix` sees each factored
// matrix as it is written.
CompressReport compress_model(const gguf::File& file, const std::filesystem::path& out, const CompressOptions& options,
                              const std::function<void(const FactoredMatrix&)>& on_matrix = {});

}  // namespace okapi::compress
