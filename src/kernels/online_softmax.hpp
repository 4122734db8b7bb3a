// The pieces of a softmax computed a tile at a time (flash-style attention): the exponentials of
// one tile against the tile's own maximum, and the merge of tile partials in tile order.
#pragma once
#include <cstdint>

namespace okapi::kernels {

// x[i] = exp(x[i] - max(x)) for i < n (n > 0); returns that max and writes the sum of the
// exponentials to *sum. AVX2 when the tier in use has it, the scalar reference otherwise; for a
// given tier the result depends only on x and n.
float exp_minus_tile_max(float* x, int64_t n, float* sum);

// A running softmax state of one query: max m, sum l, and acc = sum_j e^(s_j - m) V_j (dim values).
// Merging a tile partial (m_t, l_t, acc_t) rescales both to the larger max. A query's tiles must
// be merged in tile order, from an empty state (l < 0 marks empty), for bit-identical results.
void merge_softmax_partial(float* m, float* l, float* acc, float m_t, float l_t, const float* acc_t, int64_t dim);

}  // namespace okapi::kernels
