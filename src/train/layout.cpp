// The flat parameter layout: token_embd, then each block's tensors in GGUF order, then
// output_norm and (untied only) output. Slots are contiguous, without padding. A low-rank
// projection takes its in-factor slot (unless a shared one is already placed) and its out-factor
// slot where its dense matrix would be.
#include <array>
#include <set>

#include "core/error.hpp"
#include "train/model.hpp"

namespace okapi::train {
namespace {

constexpr std::array<std::string_view, 7> kProjectionKinds = {"attn_q",   "attn_k",   "attn_v", "attn_output",
                                                              "ffn_gate", "ffn_down", "ffn_up"};

}  // namespace

std::span<const std::string_view> projection_kinds() { return kProjectionKinds; }

std::pair<int64_t, int64_t> projection_shape(const ModelConfig& config, std::string_view kind) {
  const int64_t d = config.dim, f = config.hidden_dim, kv = config.kv_dim();
  if (kind == "attn_q" || kind == "attn_output") return {d, d};
  if (kind == "attn_k" || kind == "attn_v") return {kv, d};
  if (kind == "ffn_gate" || kind == "ffn_up") return {f, d};
  if (kind == "ffn_down") return {d, f};
  throw_error("'{}' is not a projection of a llama block", kind);
}

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
    return slots_.back().offset;
  };
  std::vector<size_t> in_factor_slots;  // indices, so that only in-factors are shared
  const auto add_projection = [&](const std::string& block, std::string_view kind) {
    const std::string name = block + std::string(kind);
    const auto [n_out, n_in] = projection_shape(config, kind);
    ProjectionSlots p;
    if (const LowRankProjection* lr = config.find_low_rank(name)) {
      p.rank = lr->rank;
      const TensorSlot* shared = nullptr;
      for (const size_t index : in_factor_slots) {
        if (slots_[index].name == lr->in_factor) shared = &slots_[index];
      }
      if (shared == nullptr) {
        in_factor_slots.push_back(slots_.size());
        p.in = add(lr->in_factor, TensorRole::Matrix, lr->rank, n_in);
      } else if (shared->rows != lr->rank || shared->cols != n_in) {
        throw_error("model config '{}': {} shares the in-factor '{}' of {} x {}, but needs {} x {}", config.name, name,
                    lr->in_factor, shared->rows, shared->cols, lr->rank, n_in);
      } else {
        p.in = shared->offset;
      }
      p.weight = add(name + ".lr_out.weight", TensorRole::Matrix, n_out, lr->rank);
    } else {
      p.weight = add(name + ".weight", TensorRole::Matrix, n_out, n_in);
    }
    projections_.emplace_back(name, p);
  };
  const int64_t d = config.dim, f = config.hidden_dim;
  add("token_embd.weight", TensorRole::Embedding, config.vocab_size, d);
  for (int64_t l = 0; l < config.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", TensorRole::Norm, 1, d);
    for (const char* kind : {"attn_q", "attn_k", "attn_v", "attn_output"}) add_projection(b, kind);
    if (config.ternary) add(b + "attn_sub_norm.weight", TensorRole::Norm, 1, d);
    add(b + "ffn_norm.weight", TensorRole::Norm, 1, d);
    for (const char* kind : {"ffn_gate", "ffn_down", "ffn_up"}) add_projection(b, kind);
    if (config.ternary) add(b + "ffn_sub_norm.weight", TensorRole::Norm, 1, f);
  }
  add("output_norm.weight", TensorRole::Norm, 1, d);
  if (!config.tied_embeddings) add("output.weight", TensorRole::Output, config.vocab_size, d);
  std::set<std::string_view> names;  // a shared in-factor's name must not be another tensor's
  for (const TensorSlot& s : slots_) {
    if (!names.insert(s.name).second) throw_error("model config '{}': two tensors named '{}'", config.name, s.name);
  }
}

const TensorSlot& ParameterLayout::find(std::string_view name) const {
  for (const TensorSlot& s : slots_) {
    if (s.name == name) return s;
  }
  throw_error("parameter layout: no tensor named '{}' ({} tensors)", name, slots_.size());
}

ProjectionSlots ParameterLayout::projection(std::string_view name) const {
  for (const auto& [n, p] : projections_) {
    if (n == name) return p;
  }
  throw_error("parameter layout: no projection named '{}'", name);
}

}  // namespace okapi::train
