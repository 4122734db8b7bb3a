// Transformer (model.hpp): the float Network behind the public interface, with size checks.
#include "core/error.hpp"
#include "train/model.hpp"
#include "train/network.hpp"

namespace okapi::train {

struct Transformer::State {
  State(const ModelConfig& config, ThreadPool* pool) : net(config, pool) {}
  Network<float> net;
};

namespace {

void check_sizes(const ParameterLayout& layout, std::span<const float> params, std::span<const int32_t> tokens,
                 std::span<const int32_t> targets, int64_t batch, int64_t seq) {
  if (params.size() != layout.total()) {
    throw_error("parameters: {} floats, the model needs {}", params.size(), layout.total());
  }
  if (batch < 1 || seq < 1) throw_error("batch {} x seq {}: both must be at least 1", batch, seq);
  const auto expected = static_cast<size_t>(batch * seq);
  if (tokens.size() != expected || targets.size() != expected) {
    throw_error("tokens ({}) and targets ({}) must both hold batch {} x seq {} = {} ids", tokens.size(),
                targets.size(), batch, seq, expected);
  }
}

}  // namespace

Transformer::Transformer(const ModelConfig& config, ThreadPool* pool)
    : state_(std::make_unique<State>(config, pool)) {}
Transformer::~Transformer() = default;

const ModelConfig& Transformer::config() const { return state_->net.config(); }
const ParameterLayout& Transformer::layout() const { return state_->net.layout(); }
void Transformer::set_overlap_weight_gradients(bool on) { state_->net.set_overlap_weight_gradients(on); }

float Transformer::forward_backward(std::span<const float> params, std::span<const int32_t> tokens,
                                    std::span<const int32_t> targets, int64_t batch, int64_t seq, float loss_scale,
                                    std::span<float> grads) {
  check_sizes(layout(), params, tokens, targets, batch, seq);
  if (grads.size() != layout().total()) {
    throw_error("gradients: {} floats, the model needs {}", grads.size(), layout().total());
  }
  return static_cast<float>(state_->net.forward_backward(params.data(), tokens.data(), targets.data(), batch, seq,
                                                         loss_scale, grads.data()));
}

float Transformer::forward_loss(std::span<const float> params, std::span<const int32_t> tokens,
                                std::span<const int32_t> targets, int64_t batch, int64_t seq) {
  check_sizes(layout(), params, tokens, targets, batch, seq);
  return static_cast<float>(state_->net.forward_loss(params.data(), tokens.data(), targets.data(), batch, seq));
}

void Transformer::forward_logits(std::span<const float> params, std::span<const int32_t> tokens,
                                 std::span<float> logits) {
  if (params.size() != layout().total()) {
    throw_error("parameters: {} floats, the model needs {}", params.size(), layout().total());
  }
  const auto seq = static_cast<int64_t>(tokens.size());
  if (logits.size() != static_cast<size_t>(seq * config().vocab_size)) {
    throw_error("logits buffer: {} floats for {} tokens x vocab {}", logits.size(), seq, config().vocab_size);
  }
  state_->net.forward_logits(params.data(), tokens.data(), seq, logits.data());
}

}  // namespace okapi::train
