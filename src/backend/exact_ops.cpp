// ExactOps: int16 weights and activations with exact int64 sums (exact/int_matmul.hpp), the fp32
// islands of backend/exact_islands.hpp, attention through an exact KV store. Every output element
// is computed by exactly one task from exact integers or a fixed sequential double computation, so
// the thread count and the kernel choice cannot change a bit.
#include "backend/exact_ops.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/attention_driver.hpp"
#include "backend/exact_islands.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "exact/detmath.hpp"
#include "exact/frobenius.hpp"
#include "exact/int_matmul.hpp"
#include "kernels/format_table.hpp"
#include "kv/exact_store.hpp"

namespace okapi::backend {

namespace {

// A weight as int16 rows (zero-padded to `stride`) with one double scale per row.
struct EncodedWeight {
  int64_t n_in = 0, n_out = 0, stride = 0;
  std::string input_name;  // "the input of 'name'", for errors about the activations
  std::vector<int16_t> values;
  std::vector<double> scales;
  std::vector<exact::ShimmedMatrix> z_blocks;  // --exact-ring zomega: rows [64 b, 64 b + 64) shimmed
};

constexpr int64_t kZRowsPerBlock = 64;

// Row r of a weight dequantized with the scalar reference dequantizer (never the SIMD one).
class RowReader {
 public:
  explicit RowReader(const model::Weight& w) : w_(w), format_(quant::format(w.type)) {
    const auto row = row_bytes(w.type, w.n_in);
    if (!row) throw_error("exact mode: '{}' rows of {} do not fit {} blocks", w.name, w.n_in, dtype_name(w.type));
    row_bytes_ = *row;
    const int64_t shape[2] = {w.n_in, w.n_out};
    const auto total = tensor_bytes(w.type, shape);
    factor_ = quant::tensor_scale(
        w.type, std::span<const uint8_t>(static_cast<const uint8_t*>(w.data), static_cast<size_t>(*total)), shape);
  }
  void read(int64_t r, float* out) const {
    format_.dequantize_ref(static_cast<const uint8_t*>(w_.data) + static_cast<size_t>(r) * row_bytes_, out, w_.n_in);
    if (factor_ != 1.0f)
      for (int64_t i = 0; i < w_.n_in; ++i) out[i] *= factor_;
  }

 private:
  const model::Weight& w_;
  const quant::Format& format_;
  size_t row_bytes_ = 0;
  float factor_ = 1.0f;
};

}  // namespace

struct ExactOps::State {
  ThreadPool* pool = nullptr;
  ExactRing ring;
  std::vector<int64_t> x_wide;  // zomega: the current matmul's activations as Z[w] parts
  Isa tier = Isa::scalar;
  exact::IntKernel kernel = exact::IntKernel::scalar;  // tier's: scalar or avx2
  exact::Int16MatmulRowsFn matmul_rows = nullptr;
  std::mutex mutex;  // guards `weights` (one forward at a time; encoding may be concurrent-safe)
  std::unordered_map<const void*, EncodedWeight> weights;
  std::vector<int16_t> x_values;  // the current matmul's encoded activations
  std::vector<double> x_scales;

  template <typename Fn>
  void parallel(int64_t n, int64_t work, Fn&& fn) {
    parallel_for(pool, n, work, std::forward<Fn>(fn));
  }

  const EncodedWeight& encoded(const model::Weight& w) {
    std::lock_guard lock(mutex);
    auto it = weights.find(w.data);
    if (it != weights.end()) {
      if (it->second.n_in != w.n_in || it->second.n_out != w.n_out)
        throw_error("exact mode: tensor '{}' seen with two shapes", w.name);
      return it->second;
    }
    EncodedWeight e;
    e.n_in = w.n_in;
    e.n_out = w.n_out;
    e.stride = exact::padded_row_length(w.n_in);
    e.values.resize(static_cast<size_t>(e.stride * e.n_out));
    e.scales.resize(static_cast<size_t>(e.n_out));
    e.input_name = "the input of '" + std::string(w.name) + "'";
    const RowReader reader(w);
    const std::string what = "weight '" + std::string(w.name) + "'";
    parallel(e.n_out, e.n_out * e.n_in * 4, [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(e.n_in));
      for (int64_t r = begin; r < end; ++r) {
        reader.read(r, row.data());
        e.scales[static_cast<size_t>(r)] =
            exact::encode_row_int16(row.data(), e.n_in, e.values.data() + r * e.stride, what, kernel);
      }
    });
    if (ring.zomega) shim_blocks(e, w.name);
    return weights.emplace(w.data, std::move(e)).first->second;
  }

  // The encoded rows as Z[w] blocks (w parts zero), each shimmed by pi^K.
  void shim_blocks(EncodedWeight& e, std::string_view name) {
    const int64_t n_blocks = (e.n_out + kZRowsPerBlock - 1) / kZRowsPerBlock;
    e.z_blocks.resize(static_cast<size_t>(n_blocks));
    parallel(n_blocks, e.n_out * e.n_in * 8, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t r0 = b * kZRowsPerBlock, rows = std::min(kZRowsPerBlock, e.n_out - r0);
        exact::ZMatrix m{static_cast<size_t>(rows), static_cast<size_t>(e.n_in), {}};
        m.parts.assign(static_cast<size_t>(2 * rows * e.n_in), 0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t i = 0; i < e.n_in; ++i) m.parts[static_cast<size_t>(2 * (r * e.n_in + i))] = e.values[static_cast<size_t>((r0 + r) * e.stride + i)];
        try {
          e.z_blocks[static_cast<size_t>(b)] = exact::frobenius_shim(m, exact::FrobeniusPrime::split41, ring.frobenius);
        } catch (const Error& err) {
          throw_error_for(Setting::Frobenius, "the Frobenius shim pi^{} on weight '{}': {}", ring.frobenius, name,
                          err.what());
        }
      }
    });
  }
};

ExactOps::ExactOps(ThreadPool* pool, Isa tier, ExactRing ring) : state_(std::make_unique<State>()) {
  if (ring.frobenius != 0 && !ring.zomega)
    throw_error_for(Setting::ExactRing, "the Frobenius shim pi^{} needs the Z[w] ring", ring.frobenius);
  const exact::IntKernel kernel = tier >= Isa::avx2 ? exact::IntKernel::avx2 : exact::IntKernel::scalar;
  state_->pool = pool;
  state_->ring = ring;
  state_->tier = tier;
  state_->matmul_rows = exact::int16_matmul_rows_kernel(kernel);  // an impossible choice fails here
  state_->kernel = exact::int_kernel_uses_avx2(kernel) ? exact::IntKernel::avx2 : exact::IntKernel::scalar;
}

ExactOps::~ExactOps() = default;

void ExactOps::prepare(const model::WeightSet& weights) {
  for (const model::Weight& w : weights.matmul)
    if (w) (void)state_->encoded(w);  // an empty one is another pipeline stage's
}

std::unique_ptr<kv::KvStore> ExactOps::make_kv(const kv::KvShape& shape, const model::KvTypes& types) {
  return kv::make_exact_store(shape, types.exact_scores, state_->tier);
}

void ExactOps::matmul(const model::Weight& w, const float* x, int64_t n_tokens, float* y) {
  State& s = *state_;
  const EncodedWeight& e = s.encoded(w);
  const int64_t stride = e.stride;
  s.x_values.resize(static_cast<size_t>(n_tokens * stride));
  s.x_scales.resize(static_cast<size_t>(n_tokens));
  s.parallel(n_tokens, n_tokens * e.n_in * 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      s.x_scales[static_cast<size_t>(t)] =
          exact::encode_row_int16(x + t * e.n_in, e.n_in, s.x_values.data() + t * stride, e.input_name, s.kernel);
  });
  if (s.ring.zomega) return matmul_zomega(&e, n_tokens, y);
  s.parallel(e.n_out, e.n_out * e.n_in * n_tokens, [&](int64_t begin, int64_t end) {
    // Blocks of rows per kernel call; each y element comes from one exact int64 sum.
    constexpr int64_t kSums = 512;
    const int64_t rows_per_block = std::max<int64_t>(1, kSums / n_tokens);
    int64_t small[kSums];
    std::vector<int64_t> large(n_tokens > kSums ? static_cast<size_t>(n_tokens) : 0);
    int64_t* sums = n_tokens > kSums ? large.data() : small;
    for (int64_t r0 = begin; r0 < end; r0 += rows_per_block) {
      const int64_t rows = std::min(rows_per_block, end - r0);
      s.matmul_rows(e.values.data() + r0 * stride, rows, s.x_values.data(), n_tokens, stride, sums);
      for (int64_t i = 0; i < rows; ++i) {
        const double s_w = e.scales[static_cast<size_t>(r0 + i)];
        for (int64_t t = 0; t < n_tokens; ++t)
          y[t * e.n_out + r0 + i] =
              static_cast<float>(static_cast<double>(sums[i * n_tokens + t]) * (s_w * s.x_scales[static_cast<size_t>(t)]));
      }
    }
  });
}

void ExactOps::matmul_zomega(const void* encoded_weight, int64_t n_tokens, float* y) {
  State& s = *state_;
  const auto& e = *static_cast<const EncodedWeight*>(encoded_weight);
  // The activations as Z[w] elements (a, 0), interleaved like the weights.
  s.x_wide.assign(static_cast<size_t>(2 * n_tokens * e.n_in), 0);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t i = 0; i < e.n_in; ++i)
      s.x_wide[static_cast<size_t>(2 * (t * e.n_in + i))] = s.x_values[static_cast<size_t>(t * e.stride + i)];
  const auto n_blocks = static_cast<int64_t>(e.z_blocks.size());
  s.parallel(n_blocks, e.n_out * e.n_in * n_tokens * 4, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const exact::ShimmedMatrix& block = e.z_blocks[static_cast<size_t>(b)];
      for (int64_t t = 0; t < n_tokens; ++t) {
        const std::vector<exact::ZOmega> sums = exact::matvec_unshim(
            block, std::span<const int64_t>(s.x_wide.data() + 2 * t * e.n_in, static_cast<size_t>(2 * e.n_in)),
            // the avx2 tier: AVX2 where the magnitudes allow it (automatic), else the scalar kernel
            s.kernel == exact::IntKernel::avx2 ? exact::MatVecKernel::automatic : exact::MatVecKernel::scalar);
        for (size_t i = 0; i < sums.size(); ++i) {
          const int64_t r = b * kZRowsPerBlock + static_cast<int64_t>(i);
          if (sums[i].b != 0) {
            throw_error("exact mode: the Z[w] product of row {} of {} kept a w part ({}) after dividing by pi^{}", r,
                        e.input_name, exact::to_string(sums[i]), s.ring.frobenius);
          }
          const double s_w = e.scales[static_cast<size_t>(r)];
          y[t * e.n_out + r] =
              static_cast<float>(static_cast<double>(sums[i].a) * (s_w * s.x_scales[static_cast<size_t>(t)]));
        }
      }
    }
  });
}

void ExactOps::add_bias(const model::Weight& bias, float* x, int64_t n_tokens) {
  const int64_t n = bias.n_in;
  const float* b = bias.f32();
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t i = 0; i < n; ++i) x[t * n + i] += b[i];  // one IEEE add per element
}

void ExactOps::rmsnorm(const float* x, const model::Weight& weight, int64_t n_rows, int64_t n, float eps, float* y) {
  state_->parallel(n_rows, n_rows * n * 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      exact_islands::rmsnorm_row(x + r * n, weight ? weight.f32() : nullptr, n, eps, y + r * n);
  });
}

void ExactOps::rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, std::span<const int32_t> positions,
                    const kernels::RopeConfig& config) {
  state_->parallel(n_tokens, n_tokens * n_heads * head_dim * 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      exact_islands::rope_token(x + t * n_heads * head_dim, n_heads, head_dim, positions[static_cast<size_t>(t)],
                                config);
  });
}

void ExactOps::store_kv(kv::KvStore& kv, int64_t layer, const float* k, const float* v,
                        std::span<const int32_t> positions) {
  if (!kv::is_exact_store(kv))
    throw_error("exact mode: the KV cache must be an exact store (exact-ntt or exact-direct), got '{}'",
                kv.type_name());
  kv.append_tokens(layer, positions, k, v);
}

void ExactOps::attention(const kv::KvStore& kv, const model::AttentionConfig& c, const float* q,
                         std::span<const int32_t> positions, float* out) {
  exact_attention(kv, c, q, positions, out, state_->tier, state_->pool);
}

void ExactOps::attention_runs(std::span<const model::AttentionRun> runs, const model::AttentionConfig& c) {
  exact_attention(runs, c, state_->tier, state_->pool);
}

void ExactOps::glu(model::Activation act, const float* gate, const float* up, int64_t n_rows, int64_t n, float* out) {
  const int64_t total = n_rows * n;
  state_->parallel(total, total * 16, [&](int64_t begin, int64_t end) {
    exact_islands::glu(act, gate + begin, up + begin, end - begin, out + begin, state_->tier);
  });
}

void ExactOps::add(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void ExactOps::mul(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

void ExactOps::scale(const float* a, float s, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * s;
}

void ExactOps::softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(cap * exact::det::tanh(static_cast<double>(x[i]) / cap));
}

void ExactOps::get_rows(const model::Weight& table, std::span<const int32_t> ids, float* out) {
  const RowReader reader(table);
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] < 0 || ids[t] >= table.n_out)
      throw_error("get_rows: id {} out of range for '{}' ({} rows)", ids[t], table.name, table.n_out);
    reader.read(ids[t], out + static_cast<int64_t>(t) * table.n_in);
  }
}

}  // namespace okapi::backend
