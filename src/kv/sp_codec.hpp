// Seed 000's hierarchical-spinor KV rows (cache types sp and sp-full), implemented as the seed
// describes its 63-byte K block at head width 128 and scaled to other power-of-two widths:
//   1. VHT2: the normalized Walsh–Hadamard transform of the row (no random signs; the store
//      rotates queries the same way, so scores are unchanged by it);
//   2. Möbius reorder: lanes with a squarefree 1-based index first, the others after;
//   3. skeleton: the 14 squarefree lanes of highest variance (dim * 14 / 128 in general), fp16;
//   4. residual: 60 more lanes (dim * 60 / 128), each predicted from the skeleton by a calibrated
//      linear map W (60 x 14), the prediction error stored as 3-bit magnitude + 1-bit sign
//      ("spinor" phase) against one fp32 amax per row;
//   5. every other lane is dropped (decodes as 0). sp-full is the corrected variant: the residual
//      covers every non-skeleton lane.
// The lanes and W are calibrated per (layer, kv head) at warm-up, on the first rows the store
// receives (the first batch appended to that layer). The seed leaves open which 60 lanes carry the
// residual; here they are the 60 highest-variance lanes outside the skeleton, its best case.
//
// Row bytes: 2·skeleton + ⌈4·residual / 8⌉ + 4 (62 at width 128: 3.875 bits per value). Per head
// the calibration adds W in fp32 and the lane indices (16 bits each), amortized over the context.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace okapi::kv {

struct SpSpec {
  std::string_view name;
  bool every_lane = false;  // sp-full: the residual covers every non-skeleton lane
};

std::span<const SpSpec> sp_specs();
const SpSpec* find_sp(std::string_view name);  // nullptr for another name

struct SpLayout {
  int64_t dim = 0, skeleton = 0, residual = 0;
  size_t row_bytes = 0;
};
// Throws okapi::Error naming `which` ("K" / "V") for a width that is not a power of two >= 8.
SpLayout sp_layout(const SpSpec& spec, int64_t dim, std::string_view which = "K");
// The calibration one (layer, kv head) keeps beside its rows: W and the lane indices, in bits.
double sp_metadata_bits(const SpSpec& spec, int64_t dim);

// The lanes of a `dim`-wide row in Möbius order: squarefree 1-based indices first, ascending.
std::vector<int32_t> squarefree_first_order(int64_t dim);

// One (layer, kv head)'s calibration and row codec. Rows are already VHT2-transformed.
class SpHead {
 public:
  SpHead(const SpSpec& spec, int64_t dim);
  const SpLayout& layout() const { return layout_; }
  bool calibrated() const { return fitted_; }
  // Chooses the lanes and fits W (least squares, lightly ridged) on n rows of dim values.
  void calibrate(const float* rows, int64_t n);
  void encode(const float* x, uint8_t* out) const;
  void decode(const uint8_t* in, float* out) const;  // dim values, dropped lanes 0
  std::span<const int32_t> skeleton_lanes() const { return skeleton_; }
  std::span<const int32_t> residual_lanes() const { return residual_; }

 private:
  // The prediction W · skeleton for the residual lanes.
  void predict(const float* skeleton, float* out) const;
  SpLayout layout_;
  std::vector<int32_t> skeleton_, residual_;
  std::vector<float> w_;  // residual x skeleton, row-major
  bool fitted_ = false;
};

}  // namespace okapi::kv
