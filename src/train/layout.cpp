// The flat parameter layout: token_embd, then each block's tensors in GGUF order, then
// output_norm and (untied only) output. Slots are contiguous, without padding.
#include "core/error.hpp"
#include "train/model.hpp"

namespace okapi::train {

ParameterLayout::ParameterLayout(const ModelConfig& config) {
  config.validate();
  const auto add = [&](std::string name, TensorRole role, int64_t rows, int64_t cols) {
    TensorSlot slot;
    slot.name = std::move(name);
    slot.role = role;
    slot.rows = rows;
    slot.cols = cols;
    slot.offset = total_;
    total_ += slot.size();
    slots_.push_back(std::move(slot));
  };
  const int64_t d = config.dim, f = config.hidden_dim, kv = config.kv_dim();
  add("token_embd.weight", TensorRole::Embedding, config.vocab_size, d);
  for (int64_t l = 0; l < config.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", TensorRole::Norm, 1, d);
    add(b + "attn_q.weight", TensorRole::Matrix, d, d);
    add(b + "attn_k.weight", TensorRole::Matrix, kv, d);
    add(b + "attn_v.weight", TensorRole::Matrix, kv, d);
    add(b + "attn_output.weight", TensorRole::Matrix, d, d);
    if (config.ternary) add(b + "attn_sub_norm.weight", TensorRole::Norm, 1, d);
    add(b + "ffn_norm.weight", TensorRole::Norm, 1, d);
    add(b + "ffn_gate.weight", TensorRole::Matrix, f, d);
    add(b + "ffn_down.weight", TensorRole::Matrix, d, f);
    add(b + "ffn_up.weight", TensorRole::Matrix, f, d);
    if (config.ternary) add(b + "ffn_sub_norm.weight", TensorRole::Norm, 1, f);
  }
  add("output_norm.weight", TensorRole::Norm, 1, d);
  if (!config.tied_embeddings) add("output.weight", TensorRole::Output, config.vocab_size, d);
}

const TensorSlot& ParameterLayout::find(std::string_view name) const {
  for (const TensorSlot& s : slots_) {
    if (s.name == name) return s;
  }
  throw_error("parameter layout: no tensor named '{}' ({} tensors)", name, slots_.size());
}

}  // namespace okapi::train
