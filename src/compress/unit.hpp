// A unit of low-rank compression: one projection matrix, or several with the same input that
// share one in-factor (a basis), and the factors a method makes for it.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "format/gguf.hpp"

namespace okapi::compress {

struct Unit {
  std::vector<const gguf::TensorInfo*> members;  // file order; members[0] stores the shared in-factor
  int64_t layer = -1;
  int64_t cols = 0;          // the shared input width
  int64_t stacked_rows = 0;  // Σ rows of the members
  std::vector<double> energy;  // cumulative fraction of Σσ² kept by the first i + 1 directions
  int64_t rank = 0;            // the allocation's result (0: dense)
};

// Bytes of a unit's factors at `rank` stored as `type` (its in-factor once, an out per member);
// the dense bytes it replaces.
double unit_bytes(const Unit& u, int64_t rank, DType type);
double unit_dense_bytes(const Unit& u);

// A unit's factors: W_i ≈ outs[i] · in.
struct Factors {
  std::vector<float> in;                 // rank x cols, row-major
  std::vector<std::vector<float>> outs;  // per member: rows x rank, row-major
  bool sink_vector = false;              // gp: the sink direction replaced the last basis vector
};

}  // namespace okapi::compress
