// Rank allocation for okapi compress: how many singular directions each unit (one matrix, or
// several sharing a basis) keeps so that a fraction R of the model's weight bytes goes.
//   energy   one threshold e on the fraction of each unit's Σσ² kept (its fewest ranks holding e)
//   uniform  one fraction ρ of each unit's break-even rank (where the factors cost what W costs):
//            SVD-LLM's and Basis Sharing's "same compression ratio for every matrix"
//   mcr      seed 003's phase-aware ranks: ρ times a per-layer scale — 1.5 (mix), 0.35 (compress),
//            1.2 (refine) — from the residual-variance profile of the calibration run, normalized
//            to mean 1; uniform when the profile has no compress phase to find
//   FILE     "NAME RANK" lines (NAME a projection, with or without .weight; # comments)
// A unit is factored only at a rank below its break-even rank; the others stay dense.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "compress/calibration.hpp"
#include "compress/unit.hpp"
#include "core/dtype.hpp"
#include "format/gguf.hpp"

namespace okapi::compress {

struct RankRequest {
  std::string allocation;  // energy | uniform | mcr | a file path
  double ratio = 0;        // fraction of bytes_before to remove (not used with a file)
  double target_saving = 0;  // bytes the factors must save: ratio x bytes_before, or more when the
                             // reference model is smaller than this one (a gauged, untied copy)
  DType factor_type = DType::F32;
  double bytes_before = 0;
  const Calibration* calibration = nullptr;  // mcr's residual-variance profile
};

struct Allocation {
  std::string name;        // energy, uniform, mcr, or "file NAME"
  double parameter = 0;    // e, or ρ
  std::vector<std::string> notes;
};

// Sets every unit's rank. Throws okapi::Error when the ratio cannot be reached (naming the most
// that can), mcr lacks calibration, or the ranks file is unreadable or names unknown projections
// or impossible ranks.
Allocation allocate_ranks(std::vector<Unit>& units, const RankRequest& request);

// Seed 003's per-layer MCR scales from a residual-variance profile (empty when the phases are not
// valid: no layer outside the compress phase).
std::vector<double> mcr_layer_scales(const std::vector<LayerActivity>& layers, std::vector<std::string>* phases);

}  // namespace okapi::compress
