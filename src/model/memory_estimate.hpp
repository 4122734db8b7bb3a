// What running a model will need in memory, estimated from the hyper-parameters and the tensor
// table before anything is allocated, so that a run that cannot fit is refused with a clear
// message (runtime/engine.cpp) instead of ending in std::bad_alloc or the OOM killer. Byte counts
// are doubles: the inputs come from files and flags, and no claimed size may overflow them.
#pragma once
#include <cstdint>
#include <vector>

#include "format/gguf.hpp"
#include "kv/cache_type.hpp"
#include "kv/exact_store.hpp"
#include "model/hparams.hpp"

namespace okapi::model {

// How the model will be run.
struct RunShape {
  int64_t n_ctx = 0;       // KV cache cells
  int64_t batch = 512;     // tokens per forward pass (at most n_ctx are ever passed)
  int64_t logit_rows = 1;  // rows of n_vocab logits kept at once (perplexity: a whole chunk)
  int threads = 1;
  kv::CacheTypes cache;
  bool exact = false;  // ExactOps and an exact KV store (the cache types are then not used)
  kv::ExactScores exact_scores = kv::ExactScores::Direct;
  std::vector<int64_t> layer_windows;  // Model::layer_windows(): their layers keep rings of cells
};

struct MemoryEstimate {
  double mapped = 0;   // the model file, mapped: page cache, not counted in total()
  double weights = 0;  // weight copies made in memory (exact mode's int16 rows and row scales)
  double kv = 0;       // the KV cache
  double scratch = 0;  // activations of one batch, logits, per-thread kernel buffers
  double total() const { return weights + kv + scratch; }
};

// Throws okapi::Error for a head width a cache type cannot serve. `hp` must come from HParams::from_gguf(file).
MemoryEstimate estimate_memory(const gguf::File& file, const HParams& hp, const RunShape& run);

}  // namespace okapi::model
