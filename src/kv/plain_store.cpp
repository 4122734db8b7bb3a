#include "kv/plain_store.hpp"

#include <fmt/format.h>

#include <algorithm>
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
  const double n = static_cast<double>(s.n_layer) * static_cast<double>(s.n_ctx) * static_cast<double>(s.n_head_kv) *
                   static_cast<double>(head_dim);
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
  const tile::Rows<KElem> k{&k_[k_offset(layer, 0, kv_head)], d, d};
  if constexpr (std::is_same_v<KElem, float>) {
    tiles_.scores_f32(qs, k, first, out, out_stride);
  } else {
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
    tile::Queries rounded_qs = qs;
    rounded_qs.q = rows.data();
    tiles_.scores_f16(rounded_qs, k, first, out, out_stride);
  }
}

template <typename KElem, typename VElem>
void PlainStore<KElem, VElem>::tile_accumulate(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first,
                                               const float* probs, int64_t p_stride, float* acc) const {
  const int64_t d = shape_.head_dim_v;
  if (d > tile::kMaxDim) return KvStore::tile_accumulate(layer, kv_head, qs, first, probs, p_stride, acc);
  const tile::Rows<VElem> v{&v_[v_offset(layer, 0, kv_head)], d, d};
  if constexpr (std::is_same_v<VElem, float>) {
    tiles_.accumulate_f32(qs, v, first, probs, p_stride, acc);
  } else {
    tiles_.accumulate_f16(qs, v, first, probs, p_stride, acc);  // rounds probs to fp16 first
  }
}

template class PlainStore<float, float>;
template class PlainStore<uint16_t, uint16_t>;
template class PlainStore<float, uint16_t>;
template class PlainStore<uint16_t, float>;

}  // namespace okapi::kv
