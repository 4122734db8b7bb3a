// The KV cache interface. Attention never touches cache memory directly: it asks the store for
// the scores q·K of one kv head and for the probability-weighted sum of V, so plain, fp16,
// quantized, compressed or NTT-domain stores are interchangeable in the same forward pass.
// One sequence: the cell of a token is its position, 0 <= position < n_ctx.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

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

// --kv-rotate: none, or a seeded randomized Hadamard rotation per layer and kv head
// (kv/rotation.hpp) applied to K and V rows before they are encoded.
enum class KvRotation { None, Hadamard };
// "none" | "hadamard"; throws okapi::Error naming the valid values otherwise.
KvRotation parse_kv_rotation(std::string_view name);
struct StoreOptions {
  KvRotation rotation = KvRotation::None;
  uint64_t seed = 0;  // of the rotations' random signs
};

// Cache types as llama.cpp's --cache-type-k/-v: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,
// iq4_nl, and okapi's tbq2.5 / tbq3 / tbq3.5 / tbq4 (kv/lloyd_max.hpp) and sp / sp-full; K
// and V may differ. f32 and f16 without rotation are the dense stores (plain_store.hpp, ggml's
// numerics); every other combination is a CodecStore (codec_store.hpp). Throws on an unknown name,
// a head width the type's blocks do not divide, a non-positive shape, or a store larger than the
// memory left (check_store_fits).
std::unique_ptr<KvStore> make_store(const KvShape& shape, std::string_view k_type, std::string_view v_type,
                                    const StoreOptions& options = {});
std::unique_ptr<KvStore> make_codec_store(const KvShape& shape, std::string_view k_type, std::string_view v_type,
                                          const StoreOptions& options);

// The cache type names, in the order above.
std::span<const std::string_view> cache_type_names();
// Throws okapi::Error (naming `which`, "K" or "V", and the valid names) for an unknown cache type.
void check_cache_type(std::string_view which, std::string_view type);
// True for "f16", false for "f32"; anything else throws naming `which` ("K" or "V").
bool is_f16_cache_type(std::string_view which, std::string_view type);
// The stored bits per value of cache type `type` for rows of `dim` values, block scales included
// (throws like make_store for a width the type cannot serve). With n_ctx > 0, a type's per-head
// calibration (sp) is added, amortized over n_ctx rows.
double bits_per_value(std::string_view type, int64_t dim, std::string_view which = "K", int64_t n_ctx = 0);
// The bytes make_store(shape, k_type, v_type) allocates, computed without allocating. A double, so
// that no claimed shape or context can overflow it (memory estimates only compare and print it).
double store_bytes(const KvShape& shape, std::string_view k_type, std::string_view v_type);
// Throws okapi::Error ("KV cache ... needs X, this machine has Y available") when `bytes` for
// `shape` exceed what available_memory() reports.
void check_store_fits(double bytes, const KvShape& shape);
std::unique_ptr<KvStore> make_f32_store(const KvShape& shape);
std::unique_ptr<KvStore> make_f16_store(const KvShape& shape, bool k_f16, bool v_f16);

}  // namespace okapi::kv
