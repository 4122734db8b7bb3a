// The model's forward and backward over the flat parameter buffer, templated over the scalar:
// Transformer (model.hpp) is Network<float>; the gradient checks run Network<double>, the same
// code. See model.hpp for the block structure.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "train/buffer.hpp"
#include "train/dw_queue.hpp"
#include "train/model.hpp"
#include "train/ops.hpp"

namespace okapi::train {

template <typename T>
class Network {
 public:
  Network(const ModelConfig& config, ThreadPool* pool);
  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  void set_overlap_weight_gradients(bool on) { dw_queue_.set_overlap(on); }

  // Ternary models, for the gradient checks: Record keeps every quantizer's offset q(x) - x of
  // the following forwards; Replay then adds the recorded offsets instead of quantizing, which is
  // the straight-through surrogate x + stopgrad(q(x) - x): its finite differences are the STE
  // gradient. Live (default) quantizes.
  enum class QuantOffsets { Live, Record, Replay };
  void set_quant_offsets(QuantOffsets mode);

  // Mean cross-entropy over the targets >= 0 (0 when there are none); forward_backward adds
  // loss_scale * its gradient into grads.
  double forward_backward(const T* params, const int32_t* tokens, const int32_t* targets, int64_t batch,
                          int64_t seq, T loss_scale, T* grads);
  double forward_loss(const T* params, const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq);
  // logits [seq x vocab] of one sequence.
  void forward_logits(const T* params, const int32_t* tokens, int64_t seq, T* logits);

 private:
  // A block's projections, in ParameterLayout's order (projection_kinds()).
  enum Proj { Q, K, V, O, Gate, Down, Up, kProjections };
  struct LayerSlots {
    size_t attn_norm, attn_sub_norm, ffn_norm, ffn_sub_norm;
    ProjectionSlots proj[kProjections];
  };
  // Everything one layer keeps from the forward for the backward, and the output gradients its
  // weight-gradient jobs read (kept per layer so that the jobs can run late). A low-rank
  // projection keeps mid = in · x and d mid (rows x rank; empty for a dense one).
  struct LayerState {
    Buffer<T> x_in, rstd_attn, h_attn, q, k, v, probs, att, rstd_sub_attn, att_in;
    Buffer<T> x_mid, rstd_ffn, h_ffn, gate, up, f, rstd_sub_ffn, f_in;
    Buffer<T> d_out, d_gate, d_up, d_attn_out, dq, dk, dv;
    Buffer<T> mid[kProjections], d_mid[kProjections];
  };

  void check_inputs(const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq) const;
  void resize(int64_t batch, int64_t seq);
  void forward(const T* params, const int32_t* tokens);  // fills the states, final_x, xf, logits
  void backward(const T* params, const int32_t* tokens, T* grads);
  const T* matrix(const T* params, size_t offset) const;  // the effective (maybe ternary) weights
  void quantize_weights(const T* params);
  void quantize_rows(const T* x, int64_t rows, int64_t d, T* xq);  // activations, honouring QuantOffsets
  void weight_gradient(const T* dy, const T* x, int64_t in, int64_t out, T* dw);  // queued dW += dy^T x
  // y[rows x out] (+)= W x of layer l's projection j (dense: the effective matrix; low rank:
  // out · (in · x), keeping in · x for the backward).
  void project(const T* params, size_t l, Proj j, const T* x, int64_t in, int64_t out, T* y, bool accumulate);
  // dx (+)= W^T dy, and queues the weight gradients (both factors' for a low-rank projection);
  // x is the forward input, kept alive until the jobs finish.
  void project_backward(const T* params, size_t l, Proj j, const T* dy, const T* x, int64_t in, int64_t out, T* dx,
                        bool accumulate, T* grads);
  ops::AttentionShape attention_shape() const;

  ModelConfig config_;
  ParameterLayout layout_;
  ThreadPool* pool_;
  std::vector<LayerSlots> slots_;
  size_t embd_ = 0, output_norm_ = 0, output_ = 0;  // output_ = embd_ when tied
  ops::RopeTable<T> rope_;
  WeightGradientQueue dw_queue_;

  int64_t batch_ = 0, seq_ = 0, rows_ = 0;
  std::vector<LayerState> layers_;
  Buffer<T> final_x_, rstd_out_, xf_, logits_;
  Buffer<T> scratch_d_, scratch_f_, grad_d_, grad_h_, grad_f_, grad_f2_;
  Buffer<T> qweights_;  // ternary: quantized matrices at their layout offsets

  QuantOffsets quant_mode_ = QuantOffsets::Live;
  std::vector<std::vector<T>> quant_offsets_;
  size_t quant_cursor_ = 0;
};

extern template class Network<float>;
extern template class Network<double>;

}  // namespace okapi::train
