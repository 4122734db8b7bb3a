#include "model/evaluate.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"

namespace okapi::model {

std::vector<float> evaluate_all(const Model& model, Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens,
                                int64_t batch_size, int32_t first_position) {
  if (batch_size <= 0) throw_error("batch size must be positive, got {}", batch_size);
  const int64_t n_vocab = model.n_vocab();
  const auto n = static_cast<int64_t>(tokens.size());
  std::vector<float> logits(static_cast<size_t>(n * n_vocab));
  std::vector<int32_t> positions;
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    const int64_t count = std::min(batch_size, n - begin);
    positions.resize(static_cast<size_t>(count));
    std::iota(positions.begin(), positions.end(), static_cast<int32_t>(first_position + begin));
    model.forward(ops, kv, tokens.subspan(static_cast<size_t>(begin), static_cast<size_t>(count)), positions,
                  LogitRows::All, logits.data() + begin * n_vocab);
  }
  return logits;
}

}  // namespace okapi::model
