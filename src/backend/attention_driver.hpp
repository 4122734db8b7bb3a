// The one attention driver of the CPU backends. Both split the work the same way (query rows of
// a batch, one kv head at a time) and differ in how a row's softmax is computed:
//  - tiled_attention (CpuOps): flash-style. Keys are cut into tiles fixed in absolute cells
//    ([256 i, 256 (i + 1))); the queries of a GQA group (and of a few prefill tokens) meet a tile
//    together through KvStore::tile_scores / tile_accumulate, each (query, tile) gives a partial
//    (max, sum, rescaled accumulator) and a query's partials are merged in tile order. No score
//    vector longer than a tile, no n x n matrix. At long context with few queries (decode) the
//    tiles are also spread over threads (split-K) and merged afterwards in the same order, so a
//    token's output is bit-identical alone or in any batch, with any thread count.
//  - exact_attention (ExactOps): one task per (token, head) over an exact store, the whole score
//    row at once through exact_islands::softmax_scores (exact mode's digest depends on that
//    sequence, and its deterministic softmax has no online form).
#pragma once
#include <cstdint>
#include <span>

#include "core/cpu.hpp"
#include "model/ops.hpp"

namespace okapi {
class ThreadPool;
}

namespace okapi::backend {

// Key cells per attention tile.
constexpr int64_t kAttentionTile = 256;

// out[t][h] = softmax(scale * q[t][h] · K) V over the cells position t sees (causal, sliding
// window, soft-cap as in AttentionConfig), the softmax with the kernels of `tier`. pool may be null.
void tiled_attention(const kv::KvStore& kv, const model::AttentionConfig& c, const float* q, std::span<const int32_t> positions,
                     float* out, Isa tier, ThreadPool* pool);

// The same through an exact store (throws okapi::Error for any other store); `tier` picks the
// softmax's batch exp (every tier gives the same bits).
void exact_attention(const kv::KvStore& kv, const model::AttentionConfig& c, const float* q, std::span<const int32_t> positions,
                     float* out, Isa tier, ThreadPool* pool);

// Several runs (each: tokens over their own store) in one call: the units of every run share one
// parallel loop (and the split-K decision), so one-token runs of several sequences keep the
// threads busy together. Each run's out is the same bits as the single-store call above gives it.
void tiled_attention(std::span<const model::AttentionRun> runs, const model::AttentionConfig& c, Isa tier,
                     ThreadPool* pool);
void exact_attention(std::span<const model::AttentionRun> runs, const model::AttentionConfig& c, Isa tier,
                     ThreadPool* pool);

}  // namespace okapi::backend
