// One chunk of a text through the model as llama-perplexity and llama-imatrix run it: the chunk's
// tokens at positions 0.. with the first replaced by BOS when the vocabulary adds one, in passes
// of up to n_batch tokens over an emptied cache, every row's logits kept.
#pragma once
#include <cstdint>
#include <functional>
#include <span>

#include "runtime/engine.hpp"

namespace okapi::eval {

// Runs tokens[0, n_ctx) through `ops` (engine.ops() or a wrapper of it) into logits
// [n_ctx x n_vocab]; before_pass(begin, size) runs before each forward pass when given.
void run_chunk_all_logits(runtime::Engine& engine, model::Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens,
                          int64_t n_batch, float* logits,
                          const std::function<void(int64_t begin, int64_t size)>& before_pass = {});

}  // namespace okapi::eval
