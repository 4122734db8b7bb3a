#include "runtime/engine.hpp"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "format/model_file.hpp"
#include "kv/exact_store.hpp"
#include "model/cpu_ops.hpp"
#include "model/exact_ops.hpp"

namespace okapi::runtime {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::unique_ptr<Engine> Engine::load(const std::filesystem::path& model_path, const EngineOptions& options) {
  if (options.threads < 1) throw_error("-t must be at least 1, got {}", options.threads);
  // Validate the cache types before the (possibly long) load.
  if (options.exact) {
    (void)exact_scores(options.exact_attention);
  } else {
    (void)kv::make_store({1, 1, 1, 1, 1}, options.cache_type_k, options.cache_type_v);
  }
  const double start = now_seconds();
  gguf::File file = gguf::open_model(model_path);
  std::unique_ptr<model::Model> model = model::Model::load(std::move(file));
  tokenizer::Tokenizer tokenizer(tokenizer::Vocab::from_gguf(model->file()));
  std::unique_ptr<Engine> engine(new Engine(model_path, std::move(model), std::move(tokenizer), options, 0.0));
  if (options.exact) {
    // Encode every weight now (ExactOps caches them per tensor) so that load time, not the first
    // prompt, pays for it: one token through a one-cell scratch cache touches every matmul.
    const auto scratch = engine->make_kv(1);
    const int32_t token = 0, position = 0;
    std::vector<float> logits(static_cast<size_t>(engine->model().n_vocab()));
    engine->model().forward(engine->ops(), *scratch, std::span<const int32_t>(&token, 1),
                            std::span<const int32_t>(&position, 1), model::LogitRows::Last, logits.data());
  }
  engine->load_seconds_ = now_seconds() - start;
  return engine;
}

Engine::Engine(std::filesystem::path path, std::unique_ptr<model::Model> model, tokenizer::Tokenizer tokenizer,
               const EngineOptions& options, double load_seconds)
    : path_(std::move(path)),
      model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      options_(options),
      pool_(options.threads),
      load_seconds_(load_seconds) {
  if (options.exact) {
    ops_ = std::make_unique<model::ExactOps>(&pool_);
  } else {
    ops_ = std::make_unique<model::CpuOps>(&pool_);
  }
}

uint64_t Engine::file_bytes() const { return model_->file().bytes().size(); }

uint64_t Engine::parameter_count() const {
  uint64_t total = 0;
  for (const auto& tensor : model_->file().tensors()) {
    uint64_t n = 1;
    for (const auto dim : tensor.shape) n *= static_cast<uint64_t>(dim);
    total += n;
  }
  return total;
}

int64_t Engine::resolve_ctx(int64_t n_ctx) const {
  if (n_ctx > 0) return n_ctx;
  const int64_t trained = hparams().n_ctx_train;
  return trained > 0 ? std::min<int64_t>(trained, 4096) : 4096;
}

std::unique_ptr<kv::KvStore> Engine::make_kv(int64_t n_ctx) const {
  const model::HParams& hp = hparams();
  const kv::KvShape shape{hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, resolve_ctx(n_ctx)};
  if (options_.exact) return kv::make_exact_store(shape, exact_scores(options_.exact_attention));
  return kv::make_store(shape, options_.cache_type_k, options_.cache_type_v);
}

kv::ExactScores exact_scores(std::string_view name) {
  if (name == "ntt") return kv::ExactScores::Ntt;
  if (name == "direct") return kv::ExactScores::Direct;
  throw_error("--exact-attention must be 'ntt' or 'direct', got '{}'", name);
}

}  // namespace okapi::runtime
