#include "model/ops.hpp"

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

}  // namespace okapi::model
