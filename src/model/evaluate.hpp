// Logits of every position of a token sequence, prefilled in batches of `batch_size` tokens
// (1 = token by token, the decode path). Used by `okapi logits` and the fidelity tests.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/model.hpp"

namespace okapi::model {

// Appends to `kv` from position `first_position`; returns [tokens.size() x n_vocab] row-major.
std::vector<float> evaluate_all(const Model& model, Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens,
                                int64_t batch_size, int32_t first_position = 0);

}  // namespace okapi::model
