#include "model/ops.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "exact/detmath.hpp"
#include "kernels/gelu_table.hpp"

namespace okapi::model {

float* Workspace::floats(size_t slot, size_t count) {
  if (slots_.size() <= slot) slots_.resize(slot + 1);
  std::vector<float>& buffer = slots_[slot];
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

size_t Workspace::bytes() const {
  size_t total = 0;
  for (const std::vector<float>& buffer : slots_) total += buffer.capacity() * sizeof(float);
  return total;
}

void Ops::matmul_group(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens) {
  for (const MatmulTarget& target : targets) matmul(*target.w, x, n_tokens, target.y);
}

void Ops::attention_runs(std::span<const AttentionRun> runs, const AttentionConfig& config) {
  for (const AttentionRun& run : runs) attention(*run.kv, config, run.q, run.positions, run.out);
}

void Ops::softcap(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] * inv) * cap;
}

void Ops::matmul_glu(Activation act, const Weight& gate, const Weight& up, const float* x, int64_t n_tokens,
                     float* gate_y, float* up_y) {
  const MatmulTarget targets[] = {{&gate, gate_y}, {&up, up_y}};
  matmul_group(targets, x, n_tokens);
  glu(act, gate_y, up_y, n_tokens, gate.n_out, gate_y);
}

void Ops::layernorm(const float* x, const Weight& weight, const Weight& bias, int64_t n_rows, int64_t n, float eps,
                    float* y) {
  constexpr int64_t kLanes = 16;  // ggml_vec_cvar_f32's AVX-512 loop: 16 floats per partial
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double sum = 0.0;  // ggml_vec_sum_f32: in double, element by element
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i]);
    const float mean = static_cast<float>(sum) / static_cast<float>(n);
    double var_sum = 0.0;
    int64_t i = 0;
    for (; i + kLanes - 1 < n; i += kLanes) {
      // _mm512_reduce_add_ps's tree: halves of 8, then 4, then pairs (0+2, 1+3), then the two.
      float sq[kLanes];
      for (int64_t j = 0; j < kLanes; ++j) {
        const float v = xr[i + j] - mean;
        yr[i + j] = v;
        sq[j] = v * v;
      }
      float h8[8], h4[4];
      for (int j = 0; j < 8; ++j) h8[j] = sq[8 + j] + sq[j];
      for (int j = 0; j < 4; ++j) h4[j] = h8[4 + j] + h8[j];
      const float a = h4[0] + h4[2], b = h4[1] + h4[3];
      var_sum += static_cast<double>(a + b);
    }
    for (; i < n; ++i) {
      const float v = xr[i] - mean;
      yr[i] = v;
      var_sum += static_cast<double>(v * v);
    }
    const auto variance = static_cast<float>(var_sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(variance + eps);
    for (int64_t k = 0; k < n; ++k) yr[k] *= scale;
    if (weight)
      for (int64_t k = 0; k < n; ++k) yr[k] *= weight.f32()[k];
    if (bias)
      for (int64_t k = 0; k < n; ++k) yr[k] += bias.f32()[k];
  }
}

void Ops::activation(Activation act, const float* x, int64_t n, float* out) {
  switch (act) {
    case Activation::GELU:
      for (int64_t i = 0; i < n; ++i) out[i] = kernels::detail::gelu_tanh_table(x[i]);
      return;
    case Activation::GELUF32:
      for (int64_t i = 0; i < n; ++i) out[i] = kernels::detail::gelu_tanh_exact(x[i]);
      return;
    case Activation::SiLU:
      for (int64_t i = 0; i < n; ++i) out[i] = x[i] / (1.0f + std::exp(-x[i]));
      return;
    case Activation::ReLU2:
      for (int64_t i = 0; i < n; ++i) {
        const float r = std::max(x[i], 0.0f);
        out[i] = r * r;
      }
      return;
  }
}

// ---- mixture of experts ----

namespace {

// ggml's soft_max: exp(x - max), summed, times 1 / sum; in double with detmath's exp, so the
// routing is the same bits on every build (exact mode relies on it).
void softmax_in_place(float* x, int64_t n) {
  const double max = *std::max_element(x, x + n);
  std::vector<double> e(static_cast<size_t>(n));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += e[static_cast<size_t>(i)] = exact::det::exp(x[i] - max);
  const double inv = 1.0 / sum;
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(e[static_cast<size_t>(i)] * inv);
}

float sigmoid(float x) { return static_cast<float>(1.0 / (1.0 + exact::det::exp(-static_cast<double>(x)))); }

}  // namespace

void Ops::route_experts(const float* logits, int64_t n_tokens, const MoeRouting& r, int32_t* selected,
                        float* weights) {
  const int64_t n = r.n_expert, k = r.n_used;
  std::vector<float> probs(static_cast<size_t>(n)), score(static_cast<size_t>(n));
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* l = logits + t * n;
    std::copy(l, l + n, probs.begin());
    if (r.gating == MoeGating::Softmax) softmax_in_place(probs.data(), n);
    if (r.gating == MoeGating::Sigmoid)
      for (float& p : probs) p = sigmoid(p);
    for (int64_t e = 0; e < n; ++e) score[e] = probs[e] + (r.selection_bias ? r.selection_bias[e] : 0.0f);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return score[a] > score[b] || (score[a] == score[b] && a < b);
    });
    int32_t* sel = selected + t * k;
    float* w = weights + t * k;
    for (int64_t j = 0; j < k; ++j) {
      sel[j] = order[j];
      w[j] = probs[order[j]];
    }
    if (r.gating == MoeGating::SoftmaxOfSelected) softmax_in_place(w, k);
    if (r.normalize_weights) {
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += w[j];
      sum = std::max(sum, 6.103515625e-5f);  // llama.cpp's clamp: the smallest normal f16
      for (int64_t j = 0; j < k; ++j) w[j] /= sum;
    }
    if (r.weights_scale != 0.0f && r.weights_scale != 1.0f)
      for (int64_t j = 0; j < k; ++j) w[j] *= r.weights_scale;
  }
}

void Ops::expert_ffns(Activation act, std::span<const ExpertRun> runs) {
  for (const ExpertRun& r : runs) {
    matmul_glu(act, *r.gate, *r.up, r.x, r.n_tokens, r.g, r.u);
    matmul(*r.down, r.g, r.n_tokens, r.y);
  }
}

void Ops::gather_rows(const float* x, int64_t n, std::span<const int32_t> rows, float* out) {
  for (size_t i = 0; i < rows.size(); ++i) std::copy_n(x + rows[i] * n, n, out + static_cast<int64_t>(i) * n);
}

void Ops::combine_experts(const float* y, int64_t n, std::span<const int32_t> rows, const float* weights,
                          int64_t n_used, int64_t n_tokens, float* out) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* o = out + t * n;
    for (int64_t j = 0; j < n_used; ++j) {
      const float* src = y + static_cast<int64_t>(rows[static_cast<size_t>(t * n_used + j)]) * n;
      const float w = weights[t * n_used + j];
      if (j == 0) {
        for (int64_t i = 0; i < n; ++i) o[i] = src[i] * w;
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] += src[i] * w;
      }
    }
  }
}

void Ops::add_sigmoid_gated(const float* y, const float* gate, int64_t n_tokens, int64_t n, float* out) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float g = gate[t];
    const float s = g * sigmoid(g) / g;
    for (int64_t i = 0; i < n; ++i) out[t * n + i] += y[t * n + i] * s;
  }
}

void Ops::swiglu_oai(const float* gate, const float* up, int64_t n_rows, int64_t n, float alpha, float limit,
                     float* out) {
  for (int64_t i = 0; i < n_rows * n; ++i) {
    const float x = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = x * sigmoid(alpha * x) * (u + 1.0f);
  }
}

}  // namespace okapi::model
