// Error-compensating factors ("best"): SVD-LLM whitens with the dense model's own inputs X, but
// once earlier projections are compressed a matrix sees X̂ ≠ X. Going through the model input site
// by input site (a layer's Q/K/V input, then its attention output, gate/up, down), each unit is
// fitted to what it must reproduce given what it will see:
//   min ‖W X − W' X̂‖  ⇒  W* = W E[x x̂ᵀ] E[x̂ x̂ᵀ]⁻¹, and the rank-r W' best in the metric of
//   E[x̂ x̂ᵀ] = L̂ L̂ᵀ is the truncated SVD of W* L̂ = W E[x x̂ᵀ] L̂⁻ᵀ (in = √Σ Vᵀ L̂⁻¹, out = U √Σ).
// Where nothing before a site is compressed, X̂ = X and this is SVD-LLM exactly. Each site costs
// two forward passes over the calibration chunks (dense and partly compressed, in memory).
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "compress/calibration.hpp"
#include "compress/unit.hpp"

namespace okapi::compress {

struct CalibrationSource {
  std::filesystem::path model;
  std::string text;
  CalibrationOptions options;
};

// Factors for every unit with rank > 0 (empty Factors for the others), in the order of `units`.
// Units must not span layers. `on_site` reports progress (site index, number of sites).
std::vector<Factors> sequential_factors(const CalibrationSource& source, const std::vector<Unit>& units,
                                        const std::function<void(size_t, size_t)>& on_site = {});

}  // namespace okapi::compress
