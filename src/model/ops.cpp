#include "model/ops.hpp"

#include <cmath>

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

}  // namespace okapi::model
