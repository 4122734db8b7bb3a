// Network: the backward pass. The data path (dx) runs on the pool; every weight gradient
// dW += dy^T x is a job of the WeightGradientQueue, inline or on its worker thread. The jobs read
// per-layer buffers that nothing overwrites before the final wait, and write disjoint slices of
// grads (except a shared low-rank in-factor's, whose jobs add into it one after the other on the
// queue); the norm gradients and the embedding scatter (after the wait: a tied embedding also
// receives the classifier's dW) are written by the data path.
#include <algorithm>

#include "train/network.hpp"

namespace okapi::train {

template <typename T>
void Network<T>::weight_gradient(const T* dy, const T* x, int64_t in, int64_t out, T* dw) {
  const int64_t n = rows_;
  ThreadPool* pool = pool_;
  dw_queue_.submit([=](bool on_worker) {
    ops::linear_backward_weight(dy, x, n, in, out, dw, on_worker ? nullptr : pool);
  });
}

template <typename T>
void Network<T>::project_backward(const T* params, size_t l, Proj j, const T* dy, const T* x, int64_t in, int64_t out,
                                  T* dx, bool accumulate, T* grads) {
  const ProjectionSlots& p = slots_[l].proj[j];
  if (p.rank == 0) {
    ops::linear_backward_data(dy, rows_, in, out, matrix(params, p.weight), dx, accumulate, pool_);
    weight_gradient(dy, x, in, out, grads + p.weight);
    return;
  }
  // y = out · mid, mid = in · x: d mid = dy · out, dx = d mid · in; dOut = dy^T mid, dIn = d mid^T x
  // (a shared in-factor's jobs add into one gradient, in order, on the one queue).
  LayerState& s = layers_[l];
  T* d_mid = s.d_mid[j].data();
  ops::linear_backward_data(dy, rows_, p.rank, out, params + p.weight, d_mid, false, pool_);
  weight_gradient(dy, s.mid[j].data(), p.rank, out, grads + p.weight);
  ops::linear_backward_data(d_mid, rows_, in, p.rank, params + p.in, dx, accumulate, pool_);
  weight_gradient(d_mid, x, in, p.rank, grads + p.in);
}

template <typename T>
void Network<T>::backward(const T* params, const int32_t* tokens, T* grads) {
  const int64_t n = rows_, d = config_.dim, f = config_.hidden_dim, kv = config_.kv_dim();
  const int64_t vocab = config_.vocab_size;
  const bool ternary = config_.ternary;
  ThreadPool* pool = pool_;
  T* dx = grad_d_.data();  // gradient of the residual stream
  T* dh = grad_h_.data();
  try {
    // classifier and final norm (logits_ holds d loss / d logits)
    ops::linear_backward_data(logits_.data(), n, d, vocab, params + output_, dh, false, pool);
    weight_gradient(logits_.data(), xf_.data(), d, vocab, grads + output_);
    ops::rmsnorm_backward(final_x_.data(), params + output_norm_, rstd_out_.data(), dh, n, d, dx, false,
                          grads + output_norm_, pool);
    for (size_t l = layers_.size(); l-- > 0;) {
      LayerState& s = layers_[l];
      const LayerSlots& w = slots_[l];
      // feed-forward: x_out = x_mid + W2 f_in
      std::copy(dx, dx + n * d, s.d_out.begin());
      project_backward(params, l, Down, s.d_out.data(), ternary ? s.f_in.data() : s.f.data(), f, d, grad_f_.data(),
                       false, grads);
      const T* df = grad_f_.data();
      if (ternary) {  // straight-through the activation quantizer, then the sub-norm
        ops::rmsnorm_backward(s.f.data(), params + w.ffn_sub_norm, s.rstd_sub_ffn.data(), grad_f_.data(), n, f,
                              grad_f2_.data(), false, grads + w.ffn_sub_norm, pool);
        df = grad_f2_.data();
      }
      ops::swiglu_backward(s.gate.data(), s.up.data(), df, n * f, s.d_gate.data(), s.d_up.data(), pool);
      project_backward(params, l, Gate, s.d_gate.data(), s.h_ffn.data(), d, f, dh, false, grads);
      project_backward(params, l, Up, s.d_up.data(), s.h_ffn.data(), d, f, dh, true, grads);
      ops::rmsnorm_backward(s.x_mid.data(), params + w.ffn_norm, s.rstd_ffn.data(), dh, n, d, dx, true,
                            grads + w.ffn_norm, pool);
      // attention: x_mid = x_in + Wo att_in
      std::copy(dx, dx + n * d, s.d_attn_out.begin());
      project_backward(params, l, O, s.d_attn_out.data(), ternary ? s.att_in.data() : s.att.data(), d, d, dh, false,
                       grads);
      const T* datt = dh;
      if (ternary) {
        ops::rmsnorm_backward(s.att.data(), params + w.attn_sub_norm, s.rstd_sub_attn.data(), dh, n, d,
                              scratch_d_.data(), false, grads + w.attn_sub_norm, pool);
        datt = scratch_d_.data();
      }
      ops::attention_backward(attention_shape(), s.q.data(), s.k.data(), s.v.data(), s.probs.data(), datt,
                              s.dq.data(), s.dk.data(), s.dv.data(), pool);
      ops::rope(s.dq.data(), n, seq_, config_.n_heads, config_.head_dim(), rope_, ternary, true, pool);
      ops::rope(s.dk.data(), n, seq_, config_.n_kv_heads, config_.head_dim(), rope_, ternary, true, pool);
      project_backward(params, l, Q, s.dq.data(), s.h_attn.data(), d, d, dh, false, grads);
      project_backward(params, l, K, s.dk.data(), s.h_attn.data(), d, kv, dh, true, grads);
      project_backward(params, l, V, s.dv.data(), s.h_attn.data(), d, kv, dh, true, grads);
      ops::rmsnorm_backward(s.x_in.data(), params + w.attn_norm, s.rstd_attn.data(), dh, n, d, dx, true,
                            grads + w.attn_norm, pool);
    }
  } catch (...) {
    dw_queue_.wait();  // never leave jobs running on buffers that may go away
    throw;
  }
  dw_queue_.wait();
  ops::embedding_backward(tokens, dx, n, d, grads + embd_);
}

template void Network<float>::backward(const float*, const int32_t*, float*);
template void Network<double>::backward(const double*, const int32_t*, double*);
// network.hpp declares the class templates extern, so members defined here are instantiated here.
template void Network<float>::project_backward(const float*, size_t, Proj, const float*, const float*, int64_t,
                                              int64_t, float*, bool, float*);
template void Network<double>::project_backward(const double*, size_t, Proj, const double*, const double*, int64_t,
                                               int64_t, double*, bool, double*);
template void Network<float>::weight_gradient(const float*, const float*, int64_t, int64_t, float*);
template void Network<double>::weight_gradient(const double*, const double*, int64_t, int64_t, double*);

}  // namespace okapi::train
