#include "eval/chunk_pass.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

namespace okapi::eval {

void run_chunk_all_logits(runtime::Engine& engine, model::Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens,
                          int64_t n_batch, float* logits, const std::function<void(int64_t, int64_t)>& before_pass) {
  const tokenizer::Vocab& vocab = engine.tokenizer().vocab();
  const auto n_ctx = static_cast<int64_t>(tokens.size());
  const int64_t n_vocab = engine.model().n_vocab();
  std::vector<int32_t> chunk(tokens.begin(), tokens.end());
  if (!chunk.empty() && vocab.add_bos && vocab.bos != tokenizer::kNoToken) chunk[0] = vocab.bos;
  kv.truncate(0);
  std::vector<int32_t> positions;
  for (int64_t b = 0; b < n_ctx; b += n_batch) {
    const int64_t size = std::min(n_batch, n_ctx - b);
    positions.resize(static_cast<size_t>(size));
    std::iota(positions.begin(), positions.end(), static_cast<int32_t>(b));
    if (before_pass) before_pass(b, size);
    engine.model().forward(ops, kv, std::span<const int32_t>(chunk).subspan(static_cast<size_t>(b), static_cast<size_t>(size)),
                           positions, model::LogitRows::All, logits + b * n_vocab);
  }
}

}  // namespace okapi::eval
