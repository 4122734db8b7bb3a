#include "kv/plain_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/format_table.hpp"
#include "kernels/kernels.hpp"

namespace okapi::kv {

namespace {

size_t checked_count(const KvShape& s, int64_t head_dim) {
  if (s.n_layer <= 0 || s.n_head_kv <= 0 || head_dim <= 0 || s.n_ctx <= 0)
    throw_error("KV store: invalid shape (layers {}, kv heads {}, head dim {}, context {})", s.n_layer, s.n_head_kv,
                head_dim, s.n_ctx);
  const double n = s.total_cells() * static_cast<double>(s.n_head_kv) * static_cast<double>(head_dim);
  if (n > static_cast<double>(std::numeric_limits<int64_t>::max() / 4))
    throw_error("KV store: context {} is too large ({} elements)", s.n_ctx, n);
  return static_cast<size_t>(n);
}

template <typename T>
const char* elem_name() {
  return sizeof(T) == 4 ? "f32" : "f16";
}

// n floats into a row of the store's element type (fp16 through the format table's converter,
// which rounds like fp32_to_fp16).
void store_row(const quant::Format&, const float* x, int64_t n, float* out) { std::copy(x, x + n, out); }
void store_row(const quant::Format& f16, const float* x, int64_t n, uint16_t* out) { f16.quantize(x, out, n); }

}  // namespace

int64_t KvShape::cells(int64_t layer) const {
  const int64_t w = window_of(layer);
  if (w <= 0 || w >= n_ctx) return n_ctx;
  const int64_t need = w - 1 + std::max<int64_t>(1, batch);
  if (need >= n_ctx) return n_ctx;
  const int64_t ring = (need + kRingAlign - 1) / kRingAlign * kRingAlign;
  return ring < n_ctx ? ring : n_ctx;
}

double KvShape::total_cells() const {
  double total = 0;
  for (int64_t l = 0; l < n_layer; ++l) total += static_cast<double>(cells(l));
  return total;
}

KvStore::KvStore(const KvShape& shape) : shape_(shape) {
  if (shape.n_layer <= 0 || shape.n_head_kv <= 0 || shape.n_ctx <= 0) return;  // the store's own check throws
  if (shape.total_cells() * static_cast<double>(shape.n_head_kv) > static_cast<double>(int64_t{1} << 53))
    throw_error("KV store: context {} is too large ({} layers x {} kv heads)", shape.n_ctx, shape.n_layer,
                shape.n_head_kv);
  for (const int64_t w : shape.window)
    if (w < 0) throw_error("KV store: a sliding window must not be negative, got {}", w);
  if (static_cast<int64_t>(shape.window.size()) > shape.n_layer)
    throw_error("KV store: {} sliding windows for {} layers", shape.window.size(), shape.n_layer);
  layer_row_.reserve(static_cast<size_t>(shape.n_layer + 1));
  int64_t row = 0;
  for (int64_t l = 0; l < shape.n_layer; ++l) {
    layer_cells_.push_back(shape.cells(l));
    layer_row_.push_back(row);
    row += shape.n_head_kv * layer_cells_.back();
  }
  layer_row_.push_back(row);
  lost_below_.assign(static_cast<size_t>(shape.n_layer), 0);
}

void KvStore::note_written(int64_t layer, int64_t position) {
  const int64_t cap = layer_cells_[static_cast<size_t>(layer)];
  if (cap >= shape_.n_ctx) return;
  int64_t& lost = lost_below_[static_cast<size_t>(layer)];
  if (position == 0) lost = 0;  // a new sequence: nothing before it is read
  lost = std::max(lost, position - cap + 1);
}

int64_t KvStore::kept_prefix(int64_t position) const {
  if (position <= 0) return 0;
  for (int64_t l = 0; l < static_cast<int64_t>(lost_below_.size()); ++l) {
    const int64_t w = shape_.window_of(l);
    if (shape_.cells(l) >= shape_.n_ctx) continue;
    // The next query, at `position`, reads [position - w + 1, position).
    if (std::max<int64_t>(0, position - w + 1) < lost_below_[static_cast<size_t>(l)]) return 0;
  }
  return position;
}

int64_t KvStore::max_batch() const {
  int64_t most = INT64_MAX;
  for (int64_t l = 0; l < shape_.n_layer; ++l)
    if (shape_.cells(l) < shape_.n_ctx) most = std::min(most, shape_.cells(l) - shape_.window_of(l) + 1);
  return most;
}

void KvStore::truncate(int64_t position) {
  if (kept_prefix(position) != position)
    throw_error("KV store: cannot roll back to position {}: a sliding-window layer's ring has overwritten cells "
                "that position reads",
                position);
  for (int64_t& lost : lost_below_) lost = std::min(lost, position);  // truncate(0): nothing is lost
}

void KvStore::ring_pieces_error(int64_t layer, int64_t lo, int64_t hi) const {
  throw_error("KV store: layer {} keeps a ring of {} cells (window {}); attention read positions [{}, {}), which it "
              "no longer holds",
              layer, shape_.cells(layer), shape_.window_of(layer), lo, hi);
}

KvStore::Piece KvStore::ring_piece(const tile::Queries& qs, int64_t p0, int64_t p1, int64_t delta) const {
  thread_local std::vector<int64_t> begin, end;
  begin.resize(static_cast<size_t>(qs.n));
  end.resize(static_cast<size_t>(qs.n));
  for (int r = 0; r < qs.n; ++r) {
    int64_t b = std::max(qs.begin[r], p0), e = std::min(qs.end[r], p1);
    if (b >= e) b = e = p0;
    begin[static_cast<size_t>(r)] = b - delta;
    end[static_cast<size_t>(r)] = e - delta;
  }
  return {begin.data(), end.data()};
}

void KvStore::append_tokens(int64_t layer, std::span<const int32_t> positions, const float* k, const float* v) {
  for (size_t t = 0; t < positions.size(); ++t) {
    const auto ti = static_cast<int64_t>(t);
    append(layer, positions[t], k + ti * shape_.n_head_kv * shape_.head_dim_k,
           v + ti * shape_.n_head_kv * shape_.head_dim_v);
  }
}

void KvStore::tile_scores(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first, float* out,
                          int64_t out_stride) const {
  for (int r = 0; r < qs.n; ++r)
    if (qs.begin[r] < qs.end[r])
      scores(layer, kv_head, qs.q[r], qs.begin[r], qs.end[r], out + r * out_stride + (qs.begin[r] - first));
}

void KvStore::tile_accumulate(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first,
                              const float* probs, int64_t p_stride, float* acc) const {
  const int64_t d = shape_.head_dim_v;
  std::vector<float> sum(static_cast<size_t>(d));
  for (int r = 0; r < qs.n; ++r) {
    if (qs.begin[r] >= qs.end[r]) continue;
    accumulate_values(layer, kv_head, probs + r * p_stride + (qs.begin[r] - first), qs.begin[r], qs.end[r],
                      sum.data());
    for (int64_t i = 0; i < d; ++i) acc[r * d + i] += sum[static_cast<size_t>(i)];
  }
}

void KvStore::check_position(int64_t layer, int64_t position) const {
  if (layer < 0 || layer >= shape_.n_layer) throw_error("KV store: layer {} out of range ({} layers)", layer, shape_.n_layer);
  if (position < 0 || position >= shape_.n_ctx)
    throw_error_for(Setting::ContextLength,
                    "KV store: position {} does not fit the context of {} tokens; use a larger context", position,
                    shape_.n_ctx);
}

template <typename KElem, typename VElem>
PlainStore<KElem, VElem>::PlainStore(const KvShape& shape, Isa tier)
    : KvStore(shape),
      k_(checked_count(shape, shape.head_dim_k)),
      v_(checked_count(shape, shape.head_dim_v)),
      tiles_(tile::kernels(tier)),
      vector_(kernels::vector_kernels(tier)),
      f16_(quant::format(DType::F16, tier)) {
  bytes_ = k_.size() * sizeof(KElem) + v_.size() * sizeof(VElem);
  name_ = fmt::format("k {} / v {}", elem_name<KElem>(), elem_name<VElem>());
}

template <typename KElem, typename VElem>
void PlainStore<KElem, VElem>::append(int64_t layer, int64_t position, const float* k, const float* v) {
  check_position(layer, position);
  note_written(layer, position);
  for (int64_t h = 0; h < shape_.n_head_kv; ++h) {
    store_row(f16_, k + h * shape_.head_dim_k, shape_.head_dim_k, &k_[k_offset(layer, position, h)]);
    store_row(f16_, v + h * shape_.head_dim_v, shape_.head_dim_v, &v_[v_offset(layer, position, h)]);
  }
}

template <typename KElem, typename VElem>
void PlainStore<KElem, VElem>::scores(int64_t layer, int64_t kv_head, const float* q, int64_t first, int64_t last,
                                      float* out) const {
  const int64_t d = shape_.head_dim_k;
  if constexpr (std::is_same_v<KElem, float>) {
    for (int64_t j = first; j < last; ++j) out[j - first] = vector_.dot_f32(q, &k_[k_offset(layer, j, kv_head)], d);
    return;
  }
  // q rounded to fp16 once (ggml converts src1 to the vec_dot type of K), then ggml's F16 dot.
  const quant::Format& f16 = f16_;
  thread_local std::vector<uint16_t> q16;
  q16.resize(static_cast<size_t>(d));
  f16.quantize(q, q16.data(), d);
  for (int64_t j = first; j < last; ++j) out[j - first] = f16.vec_dot(d, &k_[k_offset(layer, j, kv_head)], q16.data());
}

template <typename KElem, typename VElem>
void PlainStore<KElem, VElem>::accumulate_values(int64_t layer, int64_t kv_head, const float* probs, int64_t first,
                                                 int64_t last, float* out) const {
  const int64_t d = shape_.head_dim_v;
  for (int64_t i = 0; i < d; ++i) out[i] = 0.0f;
  for (int64_t j = first; j < last; ++j) {
    if constexpr (std::is_same_v<VElem, float>) {
      vector_.axpy(probs[j - first], &v_[v_offset(layer, j, kv_head)], d, out);
    } else {
      vector_.axpy_f16(round_like(probs[j - first], VElem{}), &v_[v_offset(layer, j, kv_head)], d, out);
    }
  }
}

template <typename KElem, typename VElem>
void PlainStore<KElem, VElem>::tile_scores(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first,
                                           float* out, int64_t out_stride) const {
  const int64_t d = shape_.head_dim_k;
  if (d > tile::kMaxDim) return KvStore::tile_scores(layer, kv_head, qs, first, out, out_stride);
  const tile::Rows<KElem> k{&k_[slot_offset(layer, 0, kv_head, d)], d, d};
  tile::Queries queries = qs;
  if constexpr (!std::is_same_v<KElem, float>) {
    // q rounded to fp16 (as ggml converts src1 to K's vec_dot type), kept as floats.
    const quant::Format& f16 = f16_;
    thread_local std::vector<float> rounded;
    thread_local std::vector<uint16_t> halves;
    thread_local std::vector<const float*> rows;
    rounded.resize(static_cast<size_t>(qs.n * d));
    halves.resize(static_cast<size_t>(d));
    rows.resize(static_cast<size_t>(qs.n));
    for (int r = 0; r < qs.n; ++r) {
      float* dst = rounded.data() + r * d;
      f16.quantize(qs.q[r], halves.data(), d);
      f16.dequantize(halves.data(), dst, d);
      rows[static_cast<size_t>(r)] = dst;
    }
    queries.q = rows.data();
  }
  for_each_ring_piece(layer, queries, first, [&](const tile::Queries& piece, int64_t piece_first) {
    if constexpr (std::is_same_v<KElem, float>) {
      tiles_.scores_f32(piece, k, piece_first, out, out_stride);
    } else {
      tiles_.scores_f16(piece, k, piece_first, out, out_stride);
    }
  });
}

template <typename KElem, typename VElem>
void PlainStore<KElem, VElem>::tile_accumulate(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first,
                                               const float* probs, int64_t p_stride, float* acc) const {
  const int64_t d = shape_.head_dim_v;
  if (d > tile::kMaxDim) return KvStore::tile_accumulate(layer, kv_head, qs, first, probs, p_stride, acc);
  const tile::Rows<VElem> v{&v_[slot_offset(layer, 0, kv_head, d)], d, d};
  for_each_ring_piece(layer, qs, first, [&](const tile::Queries& piece, int64_t piece_first) {
    if constexpr (std::is_same_v<VElem, float>) {
      tiles_.accumulate_f32(piece, v, piece_first, probs, p_stride, acc);
    } else {
      tiles_.accumulate_f16(piece, v, piece_first, probs, p_stride, acc);  // rounds probs to fp16 first
    }
  });
}

template <typename KElem, typename VElem>
void PlainStore<KElem, VElem>::copy_row_out(bool value, int64_t row, char* out) const {
  const size_t n = saved_row_bytes(value);
  const char* from = value ? reinterpret_cast<const char*>(v_.data()) : reinterpret_cast<const char*>(k_.data());
  std::memcpy(out, from + static_cast<size_t>(row) * n, n);
}

template <typename KElem, typename VElem>
void PlainStore<KElem, VElem>::copy_row_in(bool value, int64_t row, const char* in) {
  const size_t n = saved_row_bytes(value);
  char* to = value ? reinterpret_cast<char*>(v_.data()) : reinterpret_cast<char*>(k_.data());
  std::memcpy(to + static_cast<size_t>(row) * n, in, n);
}

template class PlainStore<float, float>;
template class PlainStore<uint16_t, uint16_t>;
template class PlainStore<float, uint16_t>;
template class PlainStore<uint16_t, float>;

}  // namespace okapi::kv
