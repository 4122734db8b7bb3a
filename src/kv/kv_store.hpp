// The KV cache interface. Attention never touches cache memory directly: it asks the store for
// the scores q·K of one kv head and for the probability-weighted sum of V, so plain, fp16,
// quantized, compressed or NTT-domain stores are interchangeable in the same forward pass.
// One sequence: the cell of a token is its position, 0 <= position < n_ctx.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "core/cpu.hpp"
#include "kv/tile_kernels.hpp"

namespace okapi::kv {

struct KvShape {
  int64_t n_layer = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;
  int64_t head_dim_v = 0;
  int64_t n_ctx = 0;  // cells per layer: the context length the user asked for
};

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual std::string_view type_name() const = 0;  // "f32", "f16", ...
  const KvShape& shape() const { return shape_; }
  int64_t n_ctx() const { return shape_.n_ctx; }
  size_t bytes() const { return bytes_; }

  // Stores one token's keys k[n_head_kv][head_dim_k] and values v[n_head_kv][head_dim_v] at
  // `position`. Throws okapi::Error when the position does not fit the context.
  virtual void append(int64_t layer, int64_t position, const float* k, const float* v) = 0;
  // append() for each token t of a batch: k[t] (n_head_kv * head_dim_k values) and v[t] at
  // positions[t]. Stores that calibrate on their first rows (sp) see the whole batch at once.
  virtual void append_tokens(int64_t layer, std::span<const int32_t> positions, const float* k, const float* v);
  // out[j - first] = q · K[j] for cells first <= j < last of one kv head (q has head_dim_k values).
  virtual void scores(int64_t layer, int64_t kv_head, const float* q, int64_t first, int64_t last,
                      float* out) const = 0;
  // out[d] = sum_{j in [first, last)} probs[j - first] * V[j][d] of one kv head (overwrites out).
  virtual void accumulate_values(int64_t layer, int64_t kv_head, const float* probs, int64_t first, int64_t last,
                                 float* out) const = 0;
  // Attention tiles: several queries of one kv head (a GQA group, several prefill tokens), query r
  // over cells [qs.begin[r], qs.end[r]) of a tile starting at cell `first`. A store reads each K
  // and V row once for all of them; the defaults below call the per-head methods per query.
  // out[r * out_stride + (j - first)] = q[r] · K[j].
  virtual void tile_scores(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first, float* out,
                           int64_t out_stride) const;
  // acc[r * head_dim_v + d] += sum_j probs[r * p_stride + (j - first)] * V[j][d] (adds, in cell order).
  virtual void tile_accumulate(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first,
                               const float* probs, int64_t p_stride, float* acc) const;
  // The domain of the tile methods. A store that keeps its rows transformed (rotated) maps the
  // queries into that domain once per query (prepare_queries, n rows of head_dim_k in place) and
  // the value sums back once all tiles are merged (finish_values, n rows of head_dim_v), instead
  // of once per tile: tile_scores takes prepared queries and tile_accumulate adds in the store's
  // domain. Merging tiles (rescale and add) is linear, so it commutes with the map back. Callers of
  // the tile methods call both; the defaults do nothing.
  virtual void prepare_queries(int64_t layer, int64_t kv_head, float* q, int n) const {
    (void)layer, (void)kv_head, (void)q, (void)n;
  }
  virtual void finish_values(int64_t layer, int64_t kv_head, float* acc, int n) const {
    (void)layer, (void)kv_head, (void)acc, (void)n;
  }
  // Forgets everything from `position` on (a new prompt, or rejected drafts). Attention reads only
  // cells below each query's position and appending overwrites a cell whole, so a store whose
  // cells are independent (the default) has nothing to do; one that keeps state past its cells
  // (the exact store's written extent) resets it.
  virtual void truncate(int64_t position) { (void)position; }

 protected:
  explicit KvStore(const KvShape& shape) : shape_(shape) {}
  void check_position(int64_t layer, int64_t position) const;  // throws a clear okapi::Error
  KvShape shape_;
  size_t bytes_ = 0;
};

// Throws okapi::Error ("KV cache ... needs X, this machine has Y available") when `bytes` for
// `shape` exceed what available_memory() reports.
void check_store_fits(double bytes, const KvShape& shape);
// The dense stores; their kernels are those of `tier` (one of available_isas(), the backend's).
std::unique_ptr<KvStore> make_f32_store(const KvShape& shape, Isa tier);
std::unique_ptr<KvStore> make_f16_store(const KvShape& shape, bool k_f16, bool v_f16, Isa tier);

}  // namespace okapi::kv
