#include "backend/cpu_ops.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "backend/attention_driver.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "kernels/format_table.hpp"
#include "kernels/gelu_table.hpp"
#include "kv/cache_type.hpp"
#include "kv/kv_store.hpp"

namespace okapi::backend {

CpuOps::CpuOps(ThreadPool* pool, Isa tier) : pool_(pool), tier_(tier), vector_(kernels::vector_kernels(tier)) {
  (void)quant::format(DType::F32, tier);  // refuses a tier that is not available here
}

void CpuOps::prepare(const model::WeightSet& weights) {
  packed_.clear();
  packed_.resize(weights.matmul.size());
  if (weights.file_is_mapped) kernels::avoid_huge_pages(weights.file);
  const auto in_file = [&](const model::Weight& w) {
    const auto* b = static_cast<const uint8_t*>(w.data);
    const auto bytes = tensor_bytes(w.type, std::array<int64_t, 2>{w.n_in, w.n_out});
    return bytes && b >= weights.file.data() && *bytes <= static_cast<size_t>(weights.file.data() + weights.file.size() - b);
  };
  for (size_t i = 0; i < weights.matmul.size(); ++i) {
    const model::Weight& w = weights.matmul[i];
    if (w.matmul_index != static_cast<int32_t>(i)) {
      throw_error("prepare: weight '{}' is at {} of the set but says {}", w.name, i, w.matmul_index);
    }
    if (!w) continue;  // another pipeline stage's weight: never multiplied by here
    packed_[i] = kernels::pack_weight(tier_, w.type, w.data, w.n_in, w.n_out, pool_, weights.file_is_mapped && in_file(w));
  }
}

size_t CpuOps::prepared_bytes() const {
  size_t total = 0;
  for (const kernels::PackedWeight& p : packed_) total += p.bytes();
  return total;
}

std::unique_ptr<kv::KvStore> CpuOps::make_kv(const kv::KvShape& shape, const model::KvTypes& types) {
  return kv::make_store(shape, types.cache, tier_);
}

void CpuOps::matmul(const model::Weight& w, const float* x, int64_t n_tokens, float* y) {
  kernels::matmul(tier_, w.type, w.data, w.n_in, w.n_out, x, n_tokens, y, pool_, packed(w));
}

void CpuOps::matmul_group(std::span<const model::MatmulTarget> targets, const float* x, int64_t n_tokens) {
  constexpr size_t kMaxGroup = 8;  // Q/K/V, gate/up: a group is small
  if (targets.empty()) return;
  if (targets.size() > kMaxGroup) return model::Ops::matmul_group(targets, x, n_tokens);
  kernels::MatmulOutput outputs[kMaxGroup];
  for (size_t i = 0; i < targets.size(); ++i) {
    const model::Weight& w = *targets[i].w;
    if (w.n_in != targets.front().w->n_in) throw_error("matmul_group: '{}' takes {} inputs, '{}' {}", w.name, w.n_in,
                                                       targets.front().w->name, targets.front().w->n_in);
    outputs[i] = output(w, targets[i].y);
  }
  kernels::matmul_group(tier_, std::span<const kernels::MatmulOutput>(outputs, targets.size()), targets.front().w->n_in,
                        x, n_tokens, pool_);
}

namespace {

void gelu_f32_glu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = kernels::detail::gelu_tanh_exact(gate[i]) * up[i];
}

}  // namespace

kernels::GluKernel CpuOps::glu_kernel(model::Activation act) const {
  switch (act) {
    case model::Activation::SiLU: return vector_.swiglu;
    case model::Activation::GELU: return vector_.geglu_tanh;
    case model::Activation::ReLU2: return vector_.relu2_glu;
    case model::Activation::GELUF32: return gelu_f32_glu;
  }
  throw_error("unknown FFN activation");
}

void CpuOps::matmul_glu(model::Activation act, const model::Weight& gate, const model::Weight& up, const float* x, int64_t n_tokens,
                        float* gate_y, float* up_y) {
  if (gate.n_in != up.n_in) throw_error("matmul_glu: '{}' takes {} inputs, '{}' {}", gate.name, gate.n_in, up.name, up.n_in);
  if (kernels::matmul_glu(tier_, output(gate, gate_y), output(up, up_y), gate.n_in, x, n_tokens, glu_kernel(act), gate_y,
                          pool_))
    return;
  model::Ops::matmul_glu(act, gate, up, x, n_tokens, gate_y, up_y);
}

void CpuOps::expert_ffns(model::Activation act, std::span<const model::ExpertRun> runs) {
  if (runs.empty()) return;
  // Every expert's gate and up in one parallel loop, then every down in another.
  expert_jobs_.clear();
  for (const model::ExpertRun& r : runs) expert_jobs_.push_back({output(*r.gate, r.g), output(*r.up, r.u), r.x, r.n_tokens});
  if (!kernels::matmul_experts(tier_, expert_jobs_, runs.front().gate->n_in, glu_kernel(act), pool_)) {
    for (const model::ExpertRun& r : runs) matmul_glu(act, *r.gate, *r.up, r.x, r.n_tokens, r.g, r.u);
  }
  expert_jobs_.clear();
  for (const model::ExpertRun& r : runs) expert_jobs_.push_back({output(*r.down, r.y), {}, r.g, r.n_tokens});
  if (!kernels::matmul_experts(tier_, expert_jobs_, runs.front().down->n_in, nullptr, pool_)) {
    for (const model::ExpertRun& r : runs) matmul(*r.down, r.g, r.n_tokens, r.y);
  }
}

void CpuOps::add_bias(const model::Weight& bias, float* x, int64_t n_tokens) {
  const int64_t n = bias.n_in;
  const float* b = bias.f32();
  parallel(n_tokens, n_tokens * n, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t i = 0; i < n; ++i) x[t * n + i] += b[i];
  });
}

void CpuOps::layernorm(const float* x, const model::Weight& weight, const model::Weight& bias, int64_t n_rows,
                       int64_t n, float eps, float* y) {
  parallel(n_rows, n_rows * n * 8, [&](int64_t begin, int64_t end) {
    model::Ops::layernorm(x + begin * n, weight, bias, end - begin, n, eps, y + begin * n);
  });
}

void CpuOps::activation(model::Activation act, const float* x, int64_t n, float* out) {
  parallel(n, n * 16, [&](int64_t begin, int64_t end) {
    model::Ops::activation(act, x + begin, end - begin, out + begin);
  });
}

void CpuOps::rmsnorm(const float* x, const model::Weight& weight, int64_t n_rows, int64_t n, float eps, float* y) {
  parallel(n_rows, n_rows * n * 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) vector_.rmsnorm(x + r * n, weight ? weight.f32() : nullptr, n, eps, y + r * n);
  });
}

void CpuOps::rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, std::span<const int32_t> positions,
                  const kernels::RopeConfig& config) {
  parallel(n_tokens, n_tokens * n_heads * head_dim * 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      kernels::rope(x + t * n_heads * head_dim, n_heads, head_dim, positions[static_cast<size_t>(t)], config);
  });
}

void CpuOps::store_kv(kv::KvStore& kv, int64_t layer, const float* k, const float* v,
                      std::span<const int32_t> positions) {
  kv.append_tokens(layer, positions, k, v);
}

void CpuOps::attention(const kv::KvStore& kv, const model::AttentionConfig& c, const float* q,
                       std::span<const int32_t> positions, float* out) {
  tiled_attention(kv, c, q, positions, out, tier_, pool_);
}

void CpuOps::attention_runs(std::span<const model::AttentionRun> runs, const model::AttentionConfig& c) {
  tiled_attention(runs, c, tier_, pool_);
}

void CpuOps::glu(model::Activation act, const float* gate, const float* up, int64_t n_rows, int64_t n, float* out) {
  // Split into runs of 8 elements counted from the start, so the SIMD kernels' vector/tail split
  // (and so every element's value) is the same whatever the thread count.
  const kernels::GluKernel kernel = glu_kernel(act);
  const int64_t total = n_rows * n, kLanes = 8;
  parallel((total + kLanes - 1) / kLanes, total * 8, [&](int64_t begin, int64_t end) {
    const int64_t first = begin * kLanes, count = std::min(total, end * kLanes) - first;
    kernel(gate + first, up + first, count, out + first);
  });
}

void CpuOps::add(const float* a, const float* b, int64_t n, float* out) {
  parallel(n, n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
}

void CpuOps::mul(const float* a, const float* b, int64_t n, float* out) {
  parallel(n, n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] * b[i];
  });
}

void CpuOps::scale(const float* a, float s, int64_t n, float* out) {
  parallel(n, n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] * s;
  });
}

void CpuOps::get_rows(const model::Weight& table, std::span<const int32_t> ids, float* out) {
  const quant::Format& format = quant::format(table.type, tier_);
  const auto row = row_bytes(table.type, table.n_in);
  if (!row) throw_error("get_rows: '{}' rows of {} do not fit {} blocks", table.name, table.n_in, dtype_name(table.type));
  const int64_t shape[2] = {table.n_in, table.n_out};
  const auto total = tensor_bytes(table.type, shape);
  const float factor = quant::tensor_scale(
      table.type, std::span<const uint8_t>(static_cast<const uint8_t*>(table.data), static_cast<size_t>(*total)), shape);
  const auto* base = static_cast<const uint8_t*>(table.data);
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] < 0 || ids[t] >= table.n_out)
      throw_error("get_rows: id {} out of range for '{}' ({} rows)", ids[t], table.name, table.n_out);
    float* dst = out + static_cast<int64_t>(t) * table.n_in;
    format.dequantize(base + static_cast<size_t>(ids[t]) * *row, dst, table.n_in);
    if (factor != 1.0f)
      for (int64_t i = 0; i < table.n_in; ++i) dst[i] *= factor;
  }
}

}  // namespace okapi::backend
