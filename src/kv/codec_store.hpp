// KV cache types beyond the dense f32 / f16 stores (-ctk / -ctv bf16, q8_0, q4_0, q4_1, q5_0,
// q5_1, iq4_nl, optionally rotated with --kv-rotate hadamard; tbq2.5, tbq3, tbq3.5, tbq4, always
// rotated; seed 000's sp and sp-full, kv/sp_codec.hpp, calibrated on the first batch). Each row (one token's keys or values of one kv
// head) is encoded with a format of the quant table on append, head-major like the dense stores.
// Attention never expands the cache: the tile kernels decode 16 rows at a time into the buffer
// their dense f32 loops read (tile::Decoded), which stays in L1. The tile methods work in the rotated domain:
// queries are rotated once (prepare_queries) and value sums rotated back once (finish_values).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/kernels.hpp"
#include "kv/cache_type.hpp"
#include "kv/kv_store.hpp"
#include "kv/lloyd_max.hpp"
#include "kv/rotation.hpp"
#include "kv/sp_codec.hpp"

namespace okapi::kv {

// One side's encoding: the format of its rows (a quant table format, a tbq type of
// kv/lloyd_max.hpp, which is always rotated, or an sp type) and the bytes a row of `dim` values takes.
struct RowCodec {
  DType type = DType::F32;
  const TbqSpec* tbq = nullptr;
  const SpSpec* sp = nullptr;
  int64_t dim = 0;
  size_t row_bytes = 0;
};
// The codec of cache type `type` for rows of `dim` of side `which` ("K" or "V"). Throws
// okapi::Error for a head width the type's blocks do not divide.
RowCodec row_codec(std::string_view which, CacheType type, int64_t dim);

class CodecStore final : public KvStore {
 public:
  // `seed` seeds the rotations' random signs; the kernels are those of `tier` (one of
  // available_isas()).
  CodecStore(const KvShape& shape, const CacheTypes& types, uint64_t seed, Isa tier);
  std::string_view type_name() const override { return name_; }
  void append(int64_t layer, int64_t position, const float* k, const float* v) override;
  void append_tokens(int64_t layer, std::span<const int32_t> positions, const float* k, const float* v) override;
  void scores(int64_t layer, int64_t kv_head, const float* q, int64_t first, int64_t last, float* out) const override;
  void accumulate_values(int64_t layer, int64_t kv_head, const float* probs, int64_t first, int64_t last,
                         float* out) const override;
  void tile_scores(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first, float* out,
                   int64_t out_stride) const override;
  void tile_accumulate(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first, const float* probs,
                       int64_t p_stride, float* acc) const override;
  void prepare_queries(int64_t layer, int64_t kv_head, float* q, int n) const override;
  void finish_values(int64_t layer, int64_t kv_head, float* acc, int n) const override;

 private:
  struct Side {
    RowCodec codec;
    std::vector<uint8_t> rows;
    std::vector<HadamardRotation> rotations;  // one per (layer, kv head), or none
    std::vector<SpHead> sp_heads;             // sp types: one calibration per (layer, kv head)
    // The row of store row index `index` (KvStore::row, row_of_slot).
    const uint8_t* row(int64_t index) const { return rows.data() + static_cast<size_t>(index) * codec.row_bytes; }
    const HadamardRotation* rotation(const KvShape& s, int64_t layer, int64_t head) const {
      return rotations.empty() ? nullptr : &rotations[static_cast<size_t>(layer * s.n_head_kv + head)];
    }
  };
  static Side make_side(const KvShape& shape, std::string_view which, CacheType type, int64_t dim,
                        KvRotation rotation, uint64_t seed, uint64_t salt);
  // Ring slots [s0, s1) of one head (positions, for a full layer) decoded into `out` (row-major,
  // codec.dim floats each).
  void decode_slots(const Side& side, int64_t layer, int64_t head, int64_t s0, int64_t s1, float* out) const;
  // The tile kernels' decoder (tile::Decoded) of one head's K or V rows; ctx is a TileRows.
  struct TileRows {
    const CodecStore* store;
    int64_t layer, head;
    bool values;
  };
  static void decode_for_tiles(const void* ctx, int64_t j0, int64_t n, float* out, int64_t stride);
  void encode(Side& side, int64_t layer, int64_t head, int64_t position, const float* x);
  // sp: calibrates the heads of `layer` not yet calibrated on the n rows of x (token-major).
  void calibrate(Side& side, int64_t layer, const float* x, int64_t n);

  Side k_, v_;
  std::string name_;
  Isa tier_;
  const tile::Kernels& tiles_;
  const kernels::VectorKernels& vector_;
};

}  // namespace okapi::kv
