// The pieces of a softmax computed a tile at a time (flash-style attention): the exponentials of
// one tile against the tile's own maximum, and the merge of tile partials in tile order.
#pragma once
#include <cstdint>

#include "core/cpu.hpp"

namespace okapi::kernels {

// The softmax of one tile, as kernels::softmax (and ggml_soft_max): x[i] = exp(x[i] - max) / sum
// for i < n (n > 0); returns the max and writes the sum of exp(x[i] - max) to *sum. AVX2 from
// the avx2 tier up, the scalar reference below it; for a tier the result depends only on x, n.
float softmax_tile(Isa tier, float* x, int64_t n, float* sum);

// A running softmax state of one query: max m, sum l = sum_j e^(s_j - m), and the normalized
// acc = sum_j (e^(s_j - m) / l) V_j (dim values). A tile partial has the same form over its own
// cells, so a query seeing a single tile gets exactly the plain softmax of ggml's non-flash path
// (probabilities normalized before they meet V). Merging weights both by their sums rescaled to
// the larger max. A query's tiles must be merged in tile order, from an empty state (l < 0 marks
// empty), for bit-identical results.
void merge_softmax_partial(float* m, float* l, float* acc, float m_t, float l_t, const float* acc_t, int64_t dim);

}  // namespace okapi::kernels
