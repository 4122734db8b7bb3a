#include "runtime/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "backend/make_backend.hpp"
#include "core/error.hpp"
#include "core/system_memory.hpp"
#include "format/gguf.hpp"
#include "format/model_file.hpp"
#include "kv/exact_store.hpp"
#include "model/memory_estimate.hpp"
#include "runtime/pipeline.hpp"

namespace okapi::runtime {

namespace {

// The settings whose change would make a run fit: whatever holds a good share of the need.
std::vector<Remedy> remedies(const model::MemoryEstimate& need, const EngineOptions& options, const Workload& work) {
  std::vector<Remedy> out;
  const double share = 0.25 * need.total();
  if (need.kv >= share || (work.logit_rows > 1 && need.scratch >= share)) {
    out.push_back({work.context, "a smaller {}"});
    const kv::CacheType f32 = kv::CacheType::f32();
    if (!options.exact && need.kv >= share && (options.cache.k == f32 || options.cache.v == f32))
      out.push_back({Setting::CacheTypes, "a {} f16 cache"});
  }
  if (need.scratch >= share && work.batch > 1) out.push_back({Setting::BatchSize, "a smaller {}"});
  if (need.weights >= share)
    out.push_back({Setting::Exact, "running without {} (it keeps int16 copies of the weights)"});
  return out;
}

}  // namespace

int64_t resolve_context(int64_t n_ctx, const model::HParams& hp) {
  const int64_t trained = hp.n_ctx_train;
  if (n_ctx == kContextNotGiven) return trained > 0 ? std::min(trained, kDefaultContextCap) : kDefaultContextCap;
  if (n_ctx < 0)
    throw_usage_error_for(Setting::ContextLength,
                          "the context length must be 0 (the model's trained context{}) or a positive number of "
                          "tokens, got {}",
                          trained > 0 ? fmt::format(", {}", trained) : std::string(), n_ctx);
  // Token positions are int32 (as in llama.cpp).
  const int64_t resolved = n_ctx == 0 ? (trained > 0 ? trained : kDefaultContextCap) : n_ctx;
  if (resolved > std::numeric_limits<int32_t>::max())
    throw_usage_error_for(Setting::ContextLength, "a context of {} tokens{} is beyond the largest positions can address ({})",
                          resolved, n_ctx == 0 ? " (the model's trained context)" : "",
                          std::numeric_limits<int32_t>::max());
  return resolved;
}

bool warn_beyond_trained_context(int64_t n_ctx, const model::HParams& hp, Setting context) {
  if (hp.n_ctx_train <= 0 || n_ctx <= hp.n_ctx_train) return false;
  warn(fmt::format("a context of {} tokens is beyond the model's trained context ({}); quality will degrade", n_ctx,
                   hp.n_ctx_train),
       context);
  return true;
}

namespace {

model::RunShape run_shape(const model::Model& model, const EngineOptions& options, int threads, int64_t n_ctx,
                          const Workload& work) {
  model::RunShape run;
  run.layer_windows.assign(model.layer_windows().begin(), model.layer_windows().end());
  run.n_ctx = n_ctx;
  run.batch = work.batch;
  run.logit_rows = work.logit_rows;
  run.threads = threads;
  run.cache = options.cache;
  run.exact = options.exact;
  run.exact_scores = options.exact_attention;
  return run;
}

std::string kv_description(const model::MemoryEstimate& need, int64_t n_ctx) {
  return fmt::format("KV cache {} for a context of {} tokens", format_bytes(need.kv), n_ctx);
}

}  // namespace

void check_memory(const model::Model& model, const EngineOptions& options, int threads, int64_t n_ctx,
                  const Workload& work, bool weights_loaded) {
  const model::HParams& hp = model.hparams();
  const model::RunShape run = run_shape(model, options, threads, n_ctx, work);
  const model::MemoryEstimate need = model::estimate_memory(model.file(), hp, run);
  // Copies that already exist have already lowered what is available.
  const double to_allocate = need.total() - (weights_loaded ? need.weights : 0.0);
  const MemoryBudget budget = available_memory();
  const std::string kv_part = kv_description(need, n_ctx);
  if (to_allocate > static_cast<double>(budget.bytes)) {
    std::string parts;
    if (need.weights > 0 && !weights_loaded) parts = fmt::format("int16 weights {}, ", format_bytes(need.weights));
    parts += fmt::format("{}, scratch {}", kv_part, format_bytes(need.scratch));
    if (need.weights == 0)
      parts += fmt::format("; the {} of weights are mapped from the file", format_bytes(need.mapped));
    if (need.weights > 0 && weights_loaded)
      parts += fmt::format("; the {} of int16 weights are already loaded", format_bytes(need.weights));
    throw Error(fmt::format("{}: this run needs {} ({}), this machine has {} available ({})", model.file().name(),
                            format_bytes(to_allocate), parts, format_bytes(static_cast<double>(budget.bytes)),
                            budget.source),
                Setting::None, remedies(need, options, work));
  }
}

std::unique_ptr<kv::KvStore> make_checked_kv(const model::Model& model, model::Ops& ops, const EngineOptions& options,
                                             int threads, int64_t n_ctx, const Workload& work, bool weights_loaded) {
  check_memory(model, options, threads, n_ctx, work, weights_loaded);
  const model::HParams& hp = model.hparams();
  const kv::KvShape shape = model.kv_shape(n_ctx, work.batch);
  const model::KvTypes types{options.cache, options.exact_attention};
  try {
    return ops.make_kv(shape, types);
  } catch (const std::bad_alloc&) {
    const model::MemoryEstimate need = model::estimate_memory(model.file(), hp, run_shape(model, options, threads, n_ctx, work));
    throw_error("out of memory allocating the {}", kv_description(need, n_ctx));
  }
}

std::unique_ptr<model::Ops> make_backend(const EngineOptions& options, ThreadPool* pool) {
  backend::BackendOptions backend_options;
  backend_options.pool = pool;
  backend_options.exact = options.exact;
  if (options.exact) backend_options.exact_ring = options.exact_ring;
  return backend::make_backend(backend_options);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::unique_ptr<Engine> Engine::load(const std::filesystem::path& model_path, const EngineOptions& options) {
  if (options.threads < 1) throw_error_for(Setting::Threads, "the thread count must be at least 1, got {}", options.threads);
  return load_on(model_path, options, std::make_shared<ThreadPool>(options.threads));
}

std::unique_ptr<Engine> Engine::load_sharing_threads(const std::filesystem::path& model_path,
                                                     const EngineOptions& options, const Engine& pool_owner) {
  EngineOptions alone = options;
  alone.pipeline = false;  // a draft model runs whole beside its target on rank 0
  return load_on(model_path, alone, pool_owner.pool_);
}

std::unique_ptr<Engine> Engine::load_on(const std::filesystem::path& model_path, const EngineOptions& options,
                                        std::shared_ptr<ThreadPool> pool) {
  return out_of_memory_as_error("loading the model", [&] {
    const double start = now_seconds();
    gguf::File file = gguf::open_model(model_path);
    std::unique_ptr<model::Model> model = model::Model::load(std::move(file));
    // Before the backend prepares: a pipeline rank repacks only its stage's weights.
    std::unique_ptr<PipelineDriver> pipeline = plan_pipeline(options, *model);
    tokenizer::Tokenizer tokenizer(tokenizer::Vocab::from_gguf(model->file()));
    std::unique_ptr<Engine> engine(new Engine(model_path, std::move(model), std::move(tokenizer), options, pool));
    // The copies the backend is about to make (exact mode's int16 weights) must fit.
    check_memory(*engine->model_, options, engine->threads(), 1, {.batch = 1}, /*weights_loaded=*/false);
    engine->ops_->prepare(engine->model_->weights());
    if (pipeline) {
      engine->pipeline_ = std::move(pipeline);
      engine->model_->set_route(engine->pipeline_.get());
    }
    engine->load_seconds_ = now_seconds() - start;
    return engine;
  });
}

Engine::Engine(std::filesystem::path path, std::unique_ptr<model::Model> model, tokenizer::Tokenizer tokenizer,
               const EngineOptions& options, std::shared_ptr<ThreadPool> pool)
    : path_(std::move(path)),
      model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      options_(options),
      pool_(std::move(pool)),
      ops_(make_backend(options, pool_.get())),
      load_seconds_(0.0) {}

Engine::~Engine() = default;

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

std::unique_ptr<kv::KvStore> Engine::make_kv(int64_t n_ctx, const Workload& work) {
  const int64_t cells = resolve_ctx(n_ctx);
  // load() has already had the backend prepare its weight copies.
  auto kv = make_checked_kv(*model_, *ops_, options_, threads(), cells, work, /*weights_loaded=*/true);
  if (!warned_context_) warned_context_ = warn_beyond_trained_context(cells, hparams(), work.context);
  return kv;
}

void require_text_generation(const Engine& engine, std::string_view advice) {
  if (engine.model().generates_text()) return;
  throw_error_for(Setting::Model, "{} is an embedding model ({}) and cannot generate text; {}", engine.path().string(),
                  engine.hparams().arch, advice);
}

const grammar::TokenIndex& Engine::token_index() const {
  std::call_once(token_index_once_, [this] { token_index_ = std::make_unique<grammar::TokenIndex>(tokenizer_); });
  return *token_index_;
}

}  // namespace okapi::runtime
