#include "kv/codec_store.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"
#include "kernels/format_table.hpp"
#include "kernels/kernels.hpp"

namespace okapi::kv {

RowCodec row_codec(std::string_view which, CacheType type, int64_t dim) {
  if (const TbqSpec* tbq = type.tbq()) {
    if (dim <= 0 || dim > tile::kMaxDim)
      throw_error("KV cache type '{}': {} heads of {} are not supported", type.name(), which, dim);
    return {DType::F32, tbq, nullptr, dim, tbq_row_bytes(*tbq, dim)};
  }
  if (const SpSpec* sp = type.sp()) return {DType::F32, nullptr, sp, dim, sp_layout(*sp, dim, which).row_bytes};
  const int64_t block = layout(type.dtype()).block_size;
  if (dim <= 0 || dim % block != 0) {
    throw_error("KV cache type '{}' for {} stores blocks of {} values; this model's {} heads are {} wide", type.name(),
                which, block, which, dim);
  }
  if (dim > tile::kMaxDim)
    throw_error("KV cache type '{}': heads wider than {} are not supported", type.name(), tile::kMaxDim);
  return {type.dtype(), nullptr, nullptr, dim, *row_bytes(type.dtype(), dim)};
}

CodecStore::Side CodecStore::make_side(const KvShape& shape, std::string_view which, CacheType type, int64_t dim,
                                       KvRotation rotation, uint64_t seed, uint64_t salt) {
  Side side;
  side.codec = row_codec(which, type, dim);
  side.rows.resize(static_cast<size_t>(shape.total_cells() * static_cast<double>(shape.n_head_kv)) *
                   side.codec.row_bytes);
  if (side.codec.sp != nullptr) {
    // The seed's VHT2 (no random signs), and a calibration per head made by the first batch.
    for (int64_t i = 0; i < shape.n_layer * shape.n_head_kv; ++i) {
      side.rotations.push_back(HadamardRotation::plain(dim));
      side.sp_heads.emplace_back(*side.codec.sp, dim);
    }
  } else if (rotation == KvRotation::Hadamard || side.codec.tbq != nullptr) {
    for (int64_t i = 0; i < shape.n_layer * shape.n_head_kv; ++i) {
      side.rotations.emplace_back(dim, seed * 0x100000001B3ull + salt * 0x9E3779B97F4A7C15ull +
                                           static_cast<uint64_t>(i));
    }
  }
  return side;
}

CodecStore::CodecStore(const KvShape& shape, const CacheTypes& types, uint64_t seed, Isa tier)
    : KvStore(shape),
      k_(make_side(shape, "K", types.k, shape.head_dim_k, types.rotation, seed, 1)),
      v_(make_side(shape, "V", types.v, shape.head_dim_v, types.rotation, seed, 2)),
      tier_(tier),
      tiles_(tile::kernels(tier)),
      vector_(kernels::vector_kernels(tier)) {
  const bool rotated = types.rotation == KvRotation::Hadamard || k_.codec.tbq != nullptr || v_.codec.tbq != nullptr;
  const bool sp = k_.codec.sp != nullptr || v_.codec.sp != nullptr;
  name_ = fmt::format("k {} / v {}{}{}", types.k.name(), types.v.name(), rotated ? " (hadamard)" : "",
                      sp ? " (vht2)" : "");
  bytes_ = k_.rows.size() + v_.rows.size();
  // sp keeps a calibration (W and lane indices) per (layer, kv head) beside its rows.
  for (const Side* side : {&k_, &v_}) {
    if (side->codec.sp == nullptr) continue;
    bytes_ += static_cast<size_t>(sp_metadata_bits(*side->codec.sp, side->codec.dim) / 8.0) *
              static_cast<size_t>(shape.n_layer * shape.n_head_kv);
  }
}

void CodecStore::encode(Side& side, int64_t layer, int64_t head, int64_t position, const float* x) {
  const int64_t dim = side.codec.dim;
  uint8_t* out = side.rows.data() + static_cast<size_t>(row(layer, head, position)) * side.codec.row_bytes;
  const float* row = x;
  thread_local std::vector<float> rotated;
  if (const HadamardRotation* r = side.rotation(shape_, layer, head)) {
    rotated.assign(x, x + dim);
    r->apply(rotated.data());
    row = rotated.data();
  }
  if (side.codec.tbq != nullptr) {
    tbq_encode(*side.codec.tbq, row, dim, out);
  } else if (side.codec.sp != nullptr) {
    SpHead& sp = side.sp_heads[static_cast<size_t>(layer * shape_.n_head_kv + head)];
    if (!sp.calibrated()) sp.calibrate(row, 1);  // a batch of one token: its own warm-up
    sp.encode(row, out);
  } else {
    quant::format(side.codec.type, tier_).quantize(row, out, dim);
  }
}

void CodecStore::append(int64_t layer, int64_t position, const float* k, const float* v) {
  check_position(layer, position);
  note_written(layer, position);
  for (int64_t h = 0; h < shape_.n_head_kv; ++h) {
    encode(k_, layer, h, position, k + h * shape_.head_dim_k);
    encode(v_, layer, h, position, v + h * shape_.head_dim_v);
  }
}

void CodecStore::calibrate(Side& side, int64_t layer, const float* x, int64_t n) {
  if (side.codec.sp == nullptr) return;
  const int64_t dim = side.codec.dim, stride = shape_.n_head_kv * dim;
  std::vector<float> rows;
  for (int64_t h = 0; h < shape_.n_head_kv; ++h) {
    SpHead& sp = side.sp_heads[static_cast<size_t>(layer * shape_.n_head_kv + h)];
    if (sp.calibrated()) continue;
    rows.resize(static_cast<size_t>(n * dim));
    for (int64_t t = 0; t < n; ++t) {
      float* row = rows.data() + t * dim;
      std::copy(x + t * stride + h * dim, x + t * stride + (h + 1) * dim, row);
      side.rotation(shape_, layer, h)->apply(row);
    }
    sp.calibrate(rows.data(), n);
  }
}

void CodecStore::append_tokens(int64_t layer, std::span<const int32_t> positions, const float* k, const float* v) {
  if (layer < 0 || layer >= shape_.n_layer) check_position(layer, 0);
  const auto n = static_cast<int64_t>(positions.size());
  if (n > 0) {
    calibrate(k_, layer, k, n);
    calibrate(v_, layer, v, n);
  }
  KvStore::append_tokens(layer, positions, k, v);
}

void CodecStore::decode_slots(const Side& side, int64_t layer, int64_t head, int64_t s0, int64_t s1, float* out) const {
  const int64_t dim = side.codec.dim;
  if (side.codec.tbq != nullptr) {
    tbq_decode_rows(*side.codec.tbq, side.row(row_of_slot(layer, head, s0)), side.codec.row_bytes, s1 - s0, dim, out,
                    tier_);
    return;
  }
  if (side.codec.sp != nullptr) {
    const SpHead& sp = side.sp_heads[static_cast<size_t>(layer * shape_.n_head_kv + head)];
    for (int64_t c = s0; c < s1; ++c) sp.decode(side.row(row_of_slot(layer, head, c)), out + (c - s0) * dim);
    return;
  }
  const quant::Format& f = quant::format(side.codec.type, tier_);
  for (int64_t c = s0; c < s1; ++c) f.dequantize(side.row(row_of_slot(layer, head, c)), out + (c - s0) * dim, dim);
}

void CodecStore::scores(int64_t layer, int64_t kv_head, const float* q, int64_t first, int64_t last, float* out) const {
  const int64_t dim = k_.codec.dim;
  std::vector<float> rq(q, q + dim), row(static_cast<size_t>(dim));
  if (const HadamardRotation* r = k_.rotation(shape_, layer, kv_head)) r->apply(rq.data());
  for (int64_t j = first; j < last; ++j) {
    const int64_t at = slot(layer, j);
    decode_slots(k_, layer, kv_head, at, at + 1, row.data());
    out[j - first] = vector_.dot_f32(rq.data(), row.data(), dim);
  }
}

void CodecStore::accumulate_values(int64_t layer, int64_t kv_head, const float* probs, int64_t first, int64_t last,
                                   float* out) const {
  const int64_t dim = v_.codec.dim;
  std::vector<float> row(static_cast<size_t>(dim));
  std::fill(out, out + dim, 0.0f);
  for (int64_t j = first; j < last; ++j) {
    const int64_t at = slot(layer, j);
    decode_slots(v_, layer, kv_head, at, at + 1, row.data());
    vector_.axpy(probs[j - first], row.data(), dim, out);
  }
  if (const HadamardRotation* r = v_.rotation(shape_, layer, kv_head)) r->inverse(out);
}

void CodecStore::prepare_queries(int64_t layer, int64_t kv_head, float* q, int n) const {
  if (const HadamardRotation* r = k_.rotation(shape_, layer, kv_head)) {
    for (int i = 0; i < n; ++i) r->apply(q + i * k_.codec.dim);
  }
}

void CodecStore::finish_values(int64_t layer, int64_t kv_head, float* acc, int n) const {
  if (const HadamardRotation* r = v_.rotation(shape_, layer, kv_head)) {
    for (int i = 0; i < n; ++i) r->inverse(acc + i * v_.codec.dim);
  }
}

void CodecStore::decode_for_tiles(const void* ctx, int64_t j0, int64_t n, float* out, int64_t stride) {
  const auto& h = *static_cast<const TileRows*>(ctx);
  const Side& side = h.values ? h.store->v_ : h.store->k_;
  // The tile kernels run on ring slots (for_each_ring_piece), so j0 is a slot.
  if (stride == side.codec.dim) return h.store->decode_slots(side, h.layer, h.head, j0, j0 + n, out);
  for (int64_t c = j0; c < j0 + n; ++c) h.store->decode_slots(side, h.layer, h.head, c, c + 1, out + (c - j0) * stride);
}

void CodecStore::tile_scores(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first, float* out,
                             int64_t out_stride) const {
  const TileRows rows{this, layer, kv_head, false};
  for_each_ring_piece(layer, qs, first, [&](const tile::Queries& piece, int64_t piece_first) {
    tiles_.scores_decoded(piece, {decode_for_tiles, &rows, k_.codec.dim}, piece_first, out, out_stride);
  });
}

void CodecStore::tile_accumulate(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first,
                                 const float* probs, int64_t p_stride, float* acc) const {
  const TileRows rows{this, layer, kv_head, true};
  for_each_ring_piece(layer, qs, first, [&](const tile::Queries& piece, int64_t piece_first) {
    tiles_.accumulate_decoded(piece, {decode_for_tiles, &rows, v_.codec.dim}, piece_first, probs, p_stride, acc);
  });
}

}  // namespace okapi::kv
