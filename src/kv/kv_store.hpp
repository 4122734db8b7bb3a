// The KV cache interface. Attention never touches cache memory directly: it asks the store for
// the scores q·K of one kv head and for the probability-weighted sum of V, so plain, fp16,
// quantized, compressed or NTT-domain stores are interchangeable in the same forward pass.
// One sequence: the cell of a token is its position, 0 <= position < n_ctx.
//
// Sliding-window layers keep a ring. A layer with window W (its queries see positions
// [p - W + 1, p]) keeps cells(layer) = W - 1 + batch cells rounded up to kRingAlign (when that is
// below n_ctx), and position p lives in slot p % cells(layer). Why W - 1 + batch: a forward pass
// appends its whole batch (up to `batch` positions p0 .. p0 + batch - 1) before its first query p0
// reads back to p0 - W + 1, so all of them must coexist; and after a rollback (truncate) to any
// position inside the last batch, that position's window is still there. The rounding keeps every
// attention tile (kRingAlign is a multiple of the driver's tile) inside one contiguous stretch of
// slots, so a ring store gives the bits of the full store. A rollback further back than that (a
// reused prompt prefix) is possible only while the cells it needs were not overwritten:
// kept_prefix() says how far back a store can go. The exact stores keep every cell.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cpu.hpp"
#include "kv/tile_kernels.hpp"

namespace okapi::kv {

struct KvShape {
  int64_t n_layer = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;
  int64_t head_dim_v = 0;
  int64_t n_ctx = 0;  // cells per layer: the context length the user asked for
  // Sliding-window layers (model::Model::kv_shape fills these): window[layer] > 0 for a layer whose
  // queries see only the last window[layer] positions, which then keeps a ring of cells(layer);
  // 0, or an empty vector, keeps all n_ctx cells.
  std::vector<int64_t> window = {};
  int64_t batch = 0;  // the most positions one forward pass appends (ring capacity; 0 counts as 1)

  int64_t window_of(int64_t layer) const {
    return layer >= 0 && static_cast<size_t>(layer) < window.size() ? window[static_cast<size_t>(layer)] : 0;
  }
  // The cells layer `layer` keeps: n_ctx, or a window's ring (see above).
  int64_t cells(int64_t layer) const;
  // cells() summed over the layers, as a double (memory estimates; no shape can overflow it).
  double total_cells() const;
};

// Ring sizes are multiples of this (a multiple of the attention driver's tile).
constexpr int64_t kRingAlign = 256;

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
  // A store with ring layers (see above) throws okapi::Error when a cell the next query at
  // `position` reads was overwritten: call kept_prefix() first.
  virtual void truncate(int64_t position);
  // The longest prefix of `position` positions this store can keep and continue from: `position`
  // when every cell the next query reads is still there, else 0 (a ring layer has overwritten
  // them since). Full stores: always `position`.
  int64_t kept_prefix(int64_t position) const;
  // The most consecutive positions one forward pass may append and read back (its ring layers'
  // cells - window + 1; INT64_MAX without ring layers).
  int64_t max_batch() const;

  // Saving a slot (runtime/slot_file.hpp): the K/V of positions [0, n) appended to `out` as the
  // store's own rows (ring layers: the positions they still hold), and back. Only a store of the
  // same type_name() and shape reads them. Throws okapi::Error for a store that cannot (the exact
  // and codec stores keep state beyond their rows) and, loading, for bytes that are not what
  // save_cells wrote for n positions (checked before anything is copied).
  bool can_save_cells() const { return saved_row_bytes(false) > 0; }
  void save_cells(int64_t n, std::string& out) const;
  void load_cells(int64_t n, std::string_view in);

 protected:
  explicit KvStore(const KvShape& shape);
  void check_position(int64_t layer, int64_t position) const;  // throws a clear okapi::Error
  // Where the store keeps (layer, kv head, position): a row index over all layers, heads and
  // cells (layer by layer, head by head, cells(layer) rows each). row_of_slot takes the ring slot.
  int64_t row_of_slot(int64_t layer, int64_t head, int64_t slot) const {
    return layer_row_[static_cast<size_t>(layer)] + head * layer_cells_[static_cast<size_t>(layer)] + slot;
  }
  int64_t slot(int64_t layer, int64_t position) const {
    const int64_t c = layer_cells_[static_cast<size_t>(layer)];
    return c < shape_.n_ctx ? position % c : position;
  }
  int64_t row(int64_t layer, int64_t head, int64_t position) const {
    return row_of_slot(layer, head, slot(layer, position));
  }
  // Records that `position` of `layer` was written (ring layers: what it overwrote is gone).
  void note_written(int64_t layer, int64_t position);
  // save_cells / load_cells: the bytes of one K (value false) or V row (0: the store cannot save
  // its cells), copied out of and into row `row` (row_of_slot's numbering).
  virtual size_t saved_row_bytes(bool value) const {
    (void)value;
    return 0;
  }
  virtual void copy_row_out(bool value, int64_t row, char* out) const;
  virtual void copy_row_in(bool value, int64_t row, const char* in);
  // The tile methods on a ring: fn(queries, first) once per stretch of the queries' cells that is
  // contiguous in slots, with their ranges and `first` moved into slot numbers (so a row is
  // base + slot * stride); a full layer's tile is one call with the queries as given. Throws when
  // the queries read cells the ring no longer holds.
  template <typename Fn>
  void for_each_ring_piece(int64_t layer, const tile::Queries& qs, int64_t first, Fn&& fn) const;
  KvShape shape_;
  size_t bytes_ = 0;

 private:
  std::vector<int64_t> layer_row_;    // the first row of each layer, and the total
  std::vector<int64_t> layer_cells_;  // shape_.cells(layer)
  std::vector<int64_t> lost_below_;  // ring layers: positions below this were overwritten
  void ring_pieces_error(int64_t layer, int64_t lo, int64_t hi) const;
  struct Piece {
    const int64_t* begin;
    const int64_t* end;
  };
  Piece ring_piece(const tile::Queries& qs, int64_t p0, int64_t p1, int64_t delta) const;
};

template <typename Fn>
void KvStore::for_each_ring_piece(int64_t layer, const tile::Queries& qs, int64_t first, Fn&& fn) const {
  const int64_t cap = layer_cells_[static_cast<size_t>(layer)];
  if (cap >= shape_.n_ctx) return fn(qs, first);
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (int r = 0; r < qs.n; ++r)
    if (qs.begin[r] < qs.end[r]) lo = std::min(lo, qs.begin[r]), hi = std::max(hi, qs.end[r]);
  if (lo >= hi) return fn(qs, first);
  if (hi - lo > cap || lo < lost_below_[static_cast<size_t>(layer)]) ring_pieces_error(layer, lo, hi);
  const int64_t base = lo - lo % cap, wrap = base + cap;
  const int64_t ends[2] = {std::min(hi, wrap), hi};
  const int64_t starts[2] = {lo, wrap}, deltas[2] = {base, wrap};
  for (int i = 0; i < 2 && starts[i] < ends[i]; ++i) {
    const Piece p = ring_piece(qs, starts[i], ends[i], deltas[i]);
    tile::Queries moved = qs;
    moved.begin = p.begin;
    moved.end = p.end;
    fn(static_cast<const tile::Queries&>(moved), first - deltas[i]);
  }
}

// Throws okapi::Error ("KV cache ... needs X, this machine has Y available") when `bytes` for
// `shape` exceed what available_memory() reports.
void check_store_fits(double bytes, const KvShape& shape);
// The dense stores; their kernels are those of `tier` (one of available_isas(), the backend's).
std::unique_ptr<KvStore> make_f32_store(const KvShape& shape, Isa tier);
std::unique_ptr<KvStore> make_f16_store(const KvShape& shape, bool k_f16, bool v_f16, Isa tier);

}  // namespace okapi::kv
