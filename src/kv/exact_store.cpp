// The exact KV stores (contract in kv/exact_store.hpp). Layout per layer: n_ctx cells of
// n_head_kv rows; K as int16 rows padded to a multiple of 16 (Direct) or as N uint64 NTT residues
// (Ntt), V as int16 rows padded to a multiple of 16, and one float scale per (cell, head) for each.
//
// Why the floats are reproducible: every integer sum is exact, and the conversions to double are
// exact because |dot| <= head_dim * 32767^2 < 2^53 (head_dim <= 2^23) and |value sum| <=
// n_ctx * 32767^2 < 2^53 (n_ctx <= 2^23), both checked at construction; (double)s_a * (double)s_b
// is exact (24 + 24 bits); what remains is one double multiply and one double -> float rounding.
#include "kv/exact_store.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kv/avx2/exact_kernels_avx2.hpp"
#include "kv/exact_kernels.hpp"
#include "kv/exact_ntt_keys.hpp"

namespace okapi::kv {

namespace {

// Largest head_dim / n_ctx with n * 32767^2 < 2^23 * 2^30 = 2^53.
constexpr std::int64_t kMaxExactTerms = std::int64_t{1} << 23;
constexpr std::int64_t kRowAlign = 16;  // int16 rows padded for the 256-bit kernels

std::int64_t padded(std::int64_t n) { return (n + kRowAlign - 1) / kRowAlign * kRowAlign; }

void check_shape(const KvShape& s) {
  if (s.n_layer <= 0 || s.n_head_kv <= 0 || s.head_dim_k <= 0 || s.head_dim_v <= 0 || s.n_ctx <= 0)
    throw_error("exact KV store: invalid shape (layers {}, kv heads {}, head dims {}/{}, context {})", s.n_layer,
                s.n_head_kv, s.head_dim_k, s.head_dim_v, s.n_ctx);
  if (s.head_dim_k > kMaxExactTerms || s.head_dim_v > kMaxExactTerms || s.n_ctx > kMaxExactTerms)
    throw_error(
        "exact KV store: head dims {}/{} and context {} must be <= 2^23 so the int64 sums convert to "
        "double exactly",
        s.head_dim_k, s.head_dim_v, s.n_ctx);
}

size_t checked_size(const KvShape& s, std::int64_t row) {
  const double n = static_cast<double>(s.n_layer) * static_cast<double>(s.n_ctx) * static_cast<double>(s.n_head_kv) *
                   static_cast<double>(row);
  if (n > static_cast<double>(std::numeric_limits<std::int64_t>::max() / 16))
    throw_error("exact KV store: context {} is too large ({} elements)", s.n_ctx, n);
  return static_cast<size_t>(n);
}

class ExactStore final : public KvStore {
 public:
  ExactStore(const KvShape& shape, ExactScores mode, ExactKernel kernel);
  std::string_view type_name() const override {
    return mode_ == ExactScores::Ntt ? "exact-ntt" : mode_ == ExactScores::NttCrt ? "exact-ntt-crt" : "exact-direct";
  }
  void append(int64_t layer, int64_t position, const float* k, const float* v) override;
  void scores(int64_t layer, int64_t kv_head, const float* q, int64_t first, int64_t last, float* out) const override;
  void accumulate_values(int64_t layer, int64_t kv_head, const float* probs, int64_t first, int64_t last,
                         float* out) const override;
  void truncate(int64_t position) override;

 private:
  size_t row_index(int64_t layer, int64_t cell, int64_t head) const {
    return static_cast<size_t>((layer * shape_.n_ctx + cell) * shape_.n_head_kv + head);
  }
  void check_read(int64_t layer, int64_t kv_head, int64_t first, int64_t last, const char* what) const;
  void clear_cells(int64_t layer, int64_t first, int64_t last);

  ExactScores mode_;
  bool avx2_;
  ExactKernel kernel_;  // resolved: scalar or avx2
  int64_t k_stride_;    // int16 per Direct key row, or N residues per NTT key row
  int64_t v_stride_;
  std::unique_ptr<TransformedKeys> ntt_;  // Ntt, NttCrt
  std::vector<std::int16_t> k_int_;   // Direct
  std::vector<std::uint64_t> k_hat_;  // Ntt
  std::vector<float> k_scale_;
  std::vector<std::int16_t> v_int_;
  std::vector<float> v_scale_;
  std::vector<int64_t> written_end_;  // per layer: one past the highest cell appended
};

ExactStore::ExactStore(const KvShape& shape, ExactScores mode, ExactKernel kernel)
    : KvStore(shape),
      mode_(mode),
      avx2_(use_avx2_kernel(kernel)),
      kernel_(avx2_ ? ExactKernel::avx2 : ExactKernel::scalar) {
  check_shape(shape);
  if (mode_ != ExactScores::Direct) {
    if (mode_ == ExactScores::Ntt) {
      ntt_ = std::make_unique<NttKeys>(shape.head_dim_k);
    } else {
      ntt_ = std::make_unique<NttCrtKeys>(shape.head_dim_k);
    }
    k_stride_ = static_cast<int64_t>(ntt_->size());
    k_hat_.resize(checked_size(shape, k_stride_));
  } else {
    k_stride_ = padded(shape.head_dim_k);
    k_int_.resize(checked_size(shape, k_stride_));
  }
  v_stride_ = padded(shape.head_dim_v);
  v_int_.resize(checked_size(shape, v_stride_));
  k_scale_.resize(checked_size(shape, 1));
  v_scale_.resize(k_scale_.size());
  written_end_.assign(static_cast<size_t>(shape.n_layer), 0);
  bytes_ = k_int_.size() * sizeof(std::int16_t) + k_hat_.size() * sizeof(std::uint64_t) +
           v_int_.size() * sizeof(std::int16_t) + (k_scale_.size() + v_scale_.size()) * sizeof(float);
}

void ExactStore::append(int64_t layer, int64_t position, const float* k, const float* v) {
  check_position(layer, position);
  thread_local std::vector<std::int16_t> k_row;
  k_row.assign(static_cast<size_t>(padded(shape_.head_dim_k)), 0);
  for (int64_t h = 0; h < shape_.n_head_kv; ++h) {
    const size_t row = row_index(layer, position, h);
    k_scale_[row] = encode_int16(k + h * shape_.head_dim_k, shape_.head_dim_k, k_row.data(), "key", kernel_);
    if (ntt_ != nullptr) {
      ntt_->transform_key(k_row.data(), &k_hat_[row * static_cast<size_t>(k_stride_)]);
    } else {
      std::copy(k_row.begin(), k_row.end(), &k_int_[row * static_cast<size_t>(k_stride_)]);
    }
    // The padding after head_dim_v stays zero from construction.
    v_scale_[row] = encode_int16(v + h * shape_.head_dim_v, shape_.head_dim_v,
                                 &v_int_[row * static_cast<size_t>(v_stride_)], "value", kernel_);
  }
  int64_t& end = written_end_[static_cast<size_t>(layer)];
  end = std::max(end, position + 1);
}

void ExactStore::check_read(int64_t layer, int64_t kv_head, int64_t first, int64_t last, const char* what) const {
  if (layer < 0 || layer >= shape_.n_layer)
    throw_error("exact KV store {}: layer {} out of range ({} layers)", what, layer, shape_.n_layer);
  if (kv_head < 0 || kv_head >= shape_.n_head_kv)
    throw_error("exact KV store {}: kv head {} out of range ({} kv heads)", what, kv_head, shape_.n_head_kv);
  const int64_t end = written_end_[static_cast<size_t>(layer)];
  if (first < 0 || first > last || last > end)
    throw_error("exact KV store {}: cells [{}, {}) of layer {} are not all stored (cells [0, {}) are)", what, first,
                last, layer, end);
}

void ExactStore::scores(int64_t layer, int64_t kv_head, const float* q, int64_t first, int64_t last, float* out) const {
  check_read(layer, kv_head, first, last, "scores");
  thread_local std::vector<std::int16_t> q_int;
  q_int.assign(static_cast<size_t>(padded(shape_.head_dim_k)), 0);
  const double s_q = encode_int16(q, shape_.head_dim_k, q_int.data(), "query", kernel_);
  auto score = [&](std::int64_t dot, int64_t cell) {
    return static_cast<float>(static_cast<double>(dot) *
                              (s_q * static_cast<double>(k_scale_[row_index(layer, cell, kv_head)])));
  };
  if (ntt_ != nullptr) {
    thread_local std::vector<std::uint64_t> prepared;
    prepared.resize(ntt_->size());
    ntt_->prepare_query(q_int.data(), prepared.data());
    for (int64_t j = first; j < last; ++j)
      out[j - first] =
          score(ntt_->dot(prepared.data(), &k_hat_[row_index(layer, j, kv_head) * static_cast<size_t>(k_stride_)]), j);
    return;
  }
  constexpr int64_t kChunk = 64;
  std::int64_t dots[kChunk];
  const int64_t row_stride = shape_.n_head_kv * k_stride_;
  for (int64_t start = first; start < last; start += kChunk) {
    const int64_t count = std::min(kChunk, last - start);
    const std::int16_t* rows = &k_int_[row_index(layer, start, kv_head) * static_cast<size_t>(k_stride_)];
    if (avx2_) {
      avx2::dots_int16(q_int.data(), rows, row_stride, count, k_stride_, dots);
    } else {
      dots_int16_scalar(q_int.data(), rows, row_stride, count, k_stride_, dots);
    }
    for (int64_t j = 0; j < count; ++j) out[start - first + j] = score(dots[j], start + j);
  }
}

void ExactStore::accumulate_values(int64_t layer, int64_t kv_head, const float* probs, int64_t first, int64_t last,
                                   float* out) const {
  check_read(layer, kv_head, first, last, "values");
  const int64_t count = last - first;
  thread_local std::vector<float> weighted;
  thread_local std::vector<std::int16_t> p_int;
  thread_local std::vector<std::int64_t> acc;
  weighted.resize(static_cast<size_t>(count));
  p_int.resize(static_cast<size_t>(count));
  acc.assign(static_cast<size_t>(v_stride_), 0);
  for (int64_t j = 0; j < count; ++j)
    weighted[static_cast<size_t>(j)] = probs[j] * v_scale_[row_index(layer, first + j, kv_head)];
  const double s_p = encode_int16(weighted.data(), count, p_int.data(), "probability", kernel_);
  if (count > 0) {
    const std::int16_t* rows = &v_int_[row_index(layer, first, kv_head) * static_cast<size_t>(v_stride_)];
    const int64_t row_stride = shape_.n_head_kv * v_stride_;
    if (avx2_) {
      avx2::weighted_sum_int16(p_int.data(), rows, row_stride, count, v_stride_, acc.data());
    } else {
      weighted_sum_int16_scalar(p_int.data(), rows, row_stride, count, v_stride_, acc.data());
    }
  }
  for (int64_t d = 0; d < shape_.head_dim_v; ++d)
    out[d] = static_cast<float>(static_cast<double>(acc[static_cast<size_t>(d)]) * s_p);
}

void ExactStore::clear_cells(int64_t layer, int64_t first, int64_t last) {
  const size_t row_begin = row_index(layer, first, 0), row_end = row_index(layer, last, 0);
  if (ntt_ != nullptr) {
    std::fill(k_hat_.begin() + static_cast<std::ptrdiff_t>(row_begin * static_cast<size_t>(k_stride_)),
              k_hat_.begin() + static_cast<std::ptrdiff_t>(row_end * static_cast<size_t>(k_stride_)), 0);
  } else {
    std::fill(k_int_.begin() + static_cast<std::ptrdiff_t>(row_begin * static_cast<size_t>(k_stride_)),
              k_int_.begin() + static_cast<std::ptrdiff_t>(row_end * static_cast<size_t>(k_stride_)), 0);
  }
  std::fill(v_int_.begin() + static_cast<std::ptrdiff_t>(row_begin * static_cast<size_t>(v_stride_)),
            v_int_.begin() + static_cast<std::ptrdiff_t>(row_end * static_cast<size_t>(v_stride_)), 0);
  std::fill(k_scale_.begin() + static_cast<std::ptrdiff_t>(row_begin),
            k_scale_.begin() + static_cast<std::ptrdiff_t>(row_end), 0.0f);
  std::fill(v_scale_.begin() + static_cast<std::ptrdiff_t>(row_begin),
            v_scale_.begin() + static_cast<std::ptrdiff_t>(row_end), 0.0f);
}

// Cells from `position` on are zeroed (as in a fresh store) and no longer readable.
void ExactStore::truncate(int64_t position) {
  if (position < 0 || position > shape_.n_ctx)
    throw_error("exact KV store: cannot truncate to position {} (context holds {} tokens)", position, shape_.n_ctx);
  for (int64_t layer = 0; layer < shape_.n_layer; ++layer) {
    int64_t& end = written_end_[static_cast<size_t>(layer)];
    if (end > position) clear_cells(layer, position, end);
    end = std::min(end, position);
  }
}

}  // namespace

std::unique_ptr<KvStore> make_exact_store(const KvShape& shape, ExactScores scores, ExactKernel kernel) {
  // The exact stores keep every cell: no ring for sliding-window layers (attention still reads
  // only the window).
  KvShape full = shape;
  full.window.clear();
  check_store_fits(exact_store_bytes(full, scores), full);
  return std::make_unique<ExactStore>(full, scores, kernel);
}

std::unique_ptr<KvStore> make_exact_store(const KvShape& shape, ExactScores scores, Isa tier) {
  return make_exact_store(shape, scores, tier >= Isa::avx2 ? ExactKernel::avx2 : ExactKernel::scalar);
}

bool is_exact_store(const KvStore& store) { return dynamic_cast<const ExactStore*>(&store) != nullptr; }

}  // namespace okapi::kv
