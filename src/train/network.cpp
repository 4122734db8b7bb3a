// Network: construction, input checks, buffers, the quantizers and the forward pass.
#include "train/network.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace okapi::train {

template <typename T>
Network<T>::Network(const ModelConfig& config, ThreadPool* pool)
    : config_(config), layout_(config), pool_(pool), rope_(config.seq_len, config.head_dim(), config.rope_theta) {
  embd_ = layout_.find("token_embd.weight").offset;
  output_norm_ = layout_.find("output_norm.weight").offset;
  output_ = config_.tied_embeddings ? embd_ : layout_.find("output.weight").offset;
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const auto at = [&](const char* name) { return layout_.find(b + name).offset; };
    LayerSlots s{};
    s.attn_norm = at("attn_norm.weight");
    s.ffn_norm = at("ffn_norm.weight");
    const auto kinds = projection_kinds();
    for (int j = 0; j < kProjections; ++j) s.proj[j] = layout_.projection(b + std::string(kinds[static_cast<size_t>(j)]));
    if (config_.ternary) {
      s.attn_sub_norm = at("attn_sub_norm.weight");
      s.ffn_sub_norm = at("ffn_sub_norm.weight");
    }
    slots_.push_back(s);
  }
}

template <typename T>
void Network<T>::set_quant_offsets(QuantOffsets mode) {
  quant_mode_ = mode;
  if (mode != QuantOffsets::Replay) quant_offsets_.clear();
}

template <typename T>
void Network<T>::check_inputs(const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq) const {
  if (batch < 1) throw_error("training batch {}: must be at least 1", batch);
  if (seq < 1 || seq > config_.seq_len) {
    throw_error("training sequence length {}: must be in [1, {}] (the model's seq_len)", seq, config_.seq_len);
  }
  for (int64_t i = 0; i < batch * seq; ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      throw_error("token id {} at index {} is outside the vocabulary [0, {})", tokens[i], i, config_.vocab_size);
    }
    if (targets != nullptr && targets[i] >= config_.vocab_size) {
      throw_error("target id {} at index {} is outside the vocabulary [0, {}) (negative ids are ignored)",
                  targets[i], i, config_.vocab_size);
    }
  }
}

template <typename T>
void Network<T>::resize(int64_t batch, int64_t seq) {
  if (batch == batch_ && seq == seq_) return;
  batch_ = batch;
  seq_ = seq;
  rows_ = batch * seq;
  const auto sz = [&](int64_t cols) { return static_cast<size_t>(rows_ * cols); };
  const int64_t d = config_.dim, f = config_.hidden_dim, kv = config_.kv_dim();
  const bool t = config_.ternary;
  layers_.resize(static_cast<size_t>(config_.n_layers));
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerState& s = layers_[l];
    s.x_in.resize(sz(d));
    s.rstd_attn.resize(sz(1));
    s.h_attn.resize(sz(d));
    s.q.resize(sz(d));
    s.k.resize(sz(kv));
    s.v.resize(sz(kv));
    s.probs.resize(static_cast<size_t>(batch * config_.n_heads * seq * seq));
    s.att.resize(sz(d));
    s.rstd_sub_attn.resize(t ? sz(1) : 0);
    s.att_in.resize(t ? sz(d) : 0);
    s.x_mid.resize(sz(d));
    s.rstd_ffn.resize(sz(1));
    s.h_ffn.resize(sz(d));
    s.gate.resize(sz(f));
    s.up.resize(sz(f));
    s.f.resize(sz(f));
    s.rstd_sub_ffn.resize(t ? sz(1) : 0);
    s.f_in.resize(t ? sz(f) : 0);
    s.d_out.resize(sz(d));
    s.d_gate.resize(sz(f));
    s.d_up.resize(sz(f));
    s.d_attn_out.resize(sz(d));
    s.dq.resize(sz(d));
    s.dk.resize(sz(kv));
    s.dv.resize(sz(kv));
    for (int j = 0; j < kProjections; ++j) {
      const int64_t rank = slots_[l].proj[j].rank;
      s.mid[j].resize(sz(rank));
      s.d_mid[j].resize(sz(rank));
    }
  }
  final_x_.resize(sz(d));
  rstd_out_.resize(sz(1));
  xf_.resize(sz(d));
  logits_.resize(sz(config_.vocab_size));
  scratch_d_.resize(sz(d));
  scratch_f_.resize(t ? sz(f) : 0);
  grad_d_.resize(sz(d));
  grad_h_.resize(sz(d));
  grad_f_.resize(sz(f));
  grad_f2_.resize(t ? sz(f) : 0);
}

template <typename T>
const T* Network<T>::matrix(const T* params, size_t offset) const {
  return config_.ternary ? qweights_.data() + offset : params + offset;
}

template <typename T>
void Network<T>::quantize_weights(const T* params) {
  qweights_.resize(layout_.total());
  for (const TensorSlot& slot : layout_.slots()) {
    if (slot.role != TensorRole::Matrix) continue;
    const auto count = static_cast<int64_t>(slot.size());
    const T* w = params + slot.offset;
    T* wq = qweights_.data() + slot.offset;
    if (quant_mode_ == QuantOffsets::Replay) {
      const std::vector<T>& off = quant_offsets_.at(quant_cursor_++);
      for (int64_t i = 0; i < count; ++i) wq[i] = w[i] + off[i];
      continue;
    }
    ops::ternarize_weights(w, count, wq, pool_);
    if (quant_mode_ == QuantOffsets::Record) {
      std::vector<T>& off = quant_offsets_.emplace_back(slot.size());
      for (int64_t i = 0; i < count; ++i) off[i] = wq[i] - w[i];
    }
  }
}

template <typename T>
void Network<T>::quantize_rows(const T* x, int64_t rows, int64_t d, T* xq) {
  const int64_t count = rows * d;
  if (quant_mode_ == QuantOffsets::Replay) {
    const std::vector<T>& off = quant_offsets_.at(quant_cursor_++);
    for (int64_t i = 0; i < count; ++i) xq[i] = x[i] + off[i];
    return;
  }
  ops::quantize_activations(x, rows, d, xq, pool_);
  if (quant_mode_ == QuantOffsets::Record) {
    std::vector<T>& off = quant_offsets_.emplace_back(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) off[i] = xq[i] - x[i];
  }
}

template <typename T>
void Network<T>::project(const T* params, size_t l, Proj j, const T* x, int64_t in, int64_t out, T* y,
                         bool accumulate) {
  const ProjectionSlots& p = slots_[l].proj[j];
  if (p.rank == 0) {
    ops::linear_forward(x, rows_, in, matrix(params, p.weight), out, y, accumulate, pool_);
    return;
  }
  T* mid = layers_[l].mid[j].data();
  ops::linear_forward(x, rows_, in, params + p.in, p.rank, mid, false, pool_);
  ops::linear_forward(mid, rows_, p.rank, params + p.weight, out, y, accumulate, pool_);
}

template <typename T>
ops::AttentionShape Network<T>::attention_shape() const {
  return {batch_, seq_, config_.n_heads, config_.n_kv_heads, config_.head_dim()};
}

template <typename T>
void Network<T>::forward(const T* params, const int32_t* tokens) {
  const int64_t n = rows_, d = config_.dim, f = config_.hidden_dim, kv = config_.kv_dim();
  const bool ternary = config_.ternary;
  const T eps = static_cast<T>(config_.norm_eps);
  if (quant_mode_ == QuantOffsets::Record) quant_offsets_.clear();
  quant_cursor_ = 0;
  if (ternary) quantize_weights(params);
  ops::embedding_forward(params + embd_, tokens, n, d, layers_[0].x_in.data());
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerState& s = layers_[l];
    const LayerSlots& w = slots_[l];
    T* x_out = l + 1 < layers_.size() ? layers_[l + 1].x_in.data() : final_x_.data();
    // attention
    T* normed = ternary ? scratch_d_.data() : s.h_attn.data();
    ops::rmsnorm_forward(s.x_in.data(), params + w.attn_norm, n, d, eps, normed, s.rstd_attn.data(), pool_);
    if (ternary) quantize_rows(normed, n, d, s.h_attn.data());
    project(params, l, Q, s.h_attn.data(), d, d, s.q.data(), false);
    project(params, l, K, s.h_attn.data(), d, kv, s.k.data(), false);
    project(params, l, V, s.h_attn.data(), d, kv, s.v.data(), false);
    ops::rope(s.q.data(), n, seq_, config_.n_heads, config_.head_dim(), rope_, ternary, false, pool_);
    ops::rope(s.k.data(), n, seq_, config_.n_kv_heads, config_.head_dim(), rope_, ternary, false, pool_);
    ops::attention_forward(attention_shape(), s.q.data(), s.k.data(), s.v.data(), s.probs.data(), s.att.data(), pool_);
    const T* att_in = s.att.data();
    if (ternary) {
      ops::rmsnorm_forward(s.att.data(), params + w.attn_sub_norm, n, d, eps, scratch_d_.data(),
                           s.rstd_sub_attn.data(), pool_);
      quantize_rows(scratch_d_.data(), n, d, s.att_in.data());
      att_in = s.att_in.data();
    }
    std::copy(s.x_in.begin(), s.x_in.end(), s.x_mid.begin());
    project(params, l, O, att_in, d, d, s.x_mid.data(), true);
    // feed-forward
    normed = ternary ? scratch_d_.data() : s.h_ffn.data();
    ops::rmsnorm_forward(s.x_mid.data(), params + w.ffn_norm, n, d, eps, normed, s.rstd_ffn.data(), pool_);
    if (ternary) quantize_rows(normed, n, d, s.h_ffn.data());
    project(params, l, Gate, s.h_ffn.data(), d, f, s.gate.data(), false);
    project(params, l, Up, s.h_ffn.data(), d, f, s.up.data(), false);
    ops::swiglu_forward(s.gate.data(), s.up.data(), n * f, s.f.data(), pool_);
    const T* f_in = s.f.data();
    if (ternary) {
      ops::rmsnorm_forward(s.f.data(), params + w.ffn_sub_norm, n, f, eps, scratch_f_.data(), s.rstd_sub_ffn.data(),
                           pool_);
      quantize_rows(scratch_f_.data(), n, f, s.f_in.data());
      f_in = s.f_in.data();
    }
    std::copy(s.x_mid.begin(), s.x_mid.end(), x_out);
    project(params, l, Down, f_in, f, d, x_out, true);
  }
  ops::rmsnorm_forward(final_x_.data(), params + output_norm_, n, d, eps, xf_.data(), rstd_out_.data(), pool_);
  ops::linear_forward(xf_.data(), n, d, params + output_, config_.vocab_size, logits_.data(), false, pool_);
}

namespace {
int64_t counted_targets(const int32_t* targets, int64_t n) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += targets[i] >= 0 ? 1 : 0;
  return count;
}
}  // namespace

template <typename T>
double Network<T>::forward_loss(const T* params, const int32_t* tokens, const int32_t* targets, int64_t batch,
                                int64_t seq) {
  check_inputs(tokens, targets, batch, seq);
  resize(batch, seq);
  forward(params, tokens);
  const int64_t count = counted_targets(targets, rows_);
  const double sum = ops::cross_entropy(logits_.data(), targets, rows_, config_.vocab_size, T(0), pool_);
  return count > 0 ? sum / static_cast<double>(count) : 0.0;
}

template <typename T>
double Network<T>::forward_backward(const T* params, const int32_t* tokens, const int32_t* targets, int64_t batch,
                                    int64_t seq, T loss_scale, T* grads) {
  check_inputs(tokens, targets, batch, seq);
  resize(batch, seq);
  forward(params, tokens);
  const int64_t count = counted_targets(targets, rows_);
  if (count == 0) return 0.0;  // nothing to learn from: no gradient
  if (loss_scale == T(0)) {
    return ops::cross_entropy(logits_.data(), targets, rows_, config_.vocab_size, T(0), pool_) /
           static_cast<double>(count);
  }
  const T grad_scale = static_cast<T>(static_cast<double>(loss_scale) / static_cast<double>(count));
  const double sum = ops::cross_entropy(logits_.data(), targets, rows_, config_.vocab_size, grad_scale, pool_);
  backward(params, tokens, grads);
  return sum / static_cast<double>(count);
}

template <typename T>
void Network<T>::forward_logits(const T* params, const int32_t* tokens, int64_t seq, T* logits) {
  check_inputs(tokens, nullptr, 1, seq);
  resize(1, seq);
  forward(params, tokens);
  std::copy(logits_.begin(), logits_.end(), logits);
}

template class Network<float>;
template class Network<double>;

}  // namespace okapi::train
