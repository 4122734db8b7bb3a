// What every generating/evaluating verb sets up: the mapped model, its tokenizer, a thread pool
// and CPU ops, plus KV caches sized for a context. Shared by run, perplexity and bench.
#pragma once
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "kv/exact_store.hpp"
#include "kv/cache_type.hpp"
#include "kv/kv_store.hpp"
#include "backend/exact_ops.hpp"
#include "grammar/grammar.hpp"
#include "model/model.hpp"
#include "model/ops.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::runtime {

struct EngineOptions {
  int threads = 1;
  kv::CacheTypes cache{};  // K's and V's types and their rotation
  // Exact mode (docs/exact-mode.md): ExactOps and an exact KV store; the cache types above are
  // then not used (the exact store keeps K/V as int16 with one scale per token and head).
  bool exact = false;
  // How the exact store computes q.k (the same bits; direct is 2-3x faster than the NTT).
  kv::ExactScores exact_attention = kv::ExactScores::Direct;
  // Exact mode's weight products (backend/exact_ops.hpp): int16 dot products, or seed 000's Z[w]
  // matvec with the Frobenius shim pi^frobenius (the same integers).
  backend::ExactRing exact_ring{};
  // Pipeline-parallel over MPI (runtime/pipeline.hpp): under `mpirun -np N`, this rank loads only
  // its stage of the layers. Engine::load on rank 0 routes the model through the pipeline; the
  // other ranks serve it (serve_if_pipeline_worker). A draft model beside it runs whole on rank 0.
  bool pipeline = false;
};

// -c as the verbs take it, llama.cpp's habit: 0 is the model's trained context; not given, a
// default of the trained context capped at kDefaultContextCap (kDefaultContextCap when the model
// does not say), so that a model trained on 128K tokens does not reserve a 128K cache unasked.
inline constexpr int64_t kContextNotGiven = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kDefaultContextCap = 4096;
// The context length for -c `n_ctx`; a negative one, or one beyond int32 positions, throws
// okapi::UsageError stating the range.
int64_t resolve_context(int64_t n_ctx, const model::HParams& hp);
// Warns (okapi::warn, tagged with `context`, the setting that chose n_ctx) "a context of N tokens is
// beyond the model's trained context (M); quality will degrade" when it is; returns whether it warned.
bool warn_beyond_trained_context(int64_t n_ctx, const model::HParams& hp, Setting context = Setting::ContextLength);

// How a verb will use a KV cache, for the memory check made before it is allocated.
struct Workload {
  int64_t batch = 512;          // tokens per forward pass (-b)
  int64_t logit_rows = 1;       // rows of logits kept at once (perplexity: a whole chunk)
  Setting context = Setting::ContextLength;  // the setting that chose the context length, for messages
};

// Estimates the weight copies, the KV cache of n_ctx cells and the scratch buffers of `work`
// (model/memory_estimate.hpp) and throws okapi::Error "... needs X (weights, KV cache, scratch),
// this machine has Y available" when they do not fit in available_memory(), with the remedies
// (a smaller context, an f16 cache, a smaller batch, no exact mode) that would lower the need. Pass
// `weights_loaded` when the weight copies already exist (they are then not counted again).
void check_memory(const model::Model& model, const EngineOptions& options, int threads, int64_t n_ctx,
                  const Workload& work, bool weights_loaded);
// check_memory, then the cache made by the backend `ops` (ExactOps: the exact store of
// options.exact_attention; CpuOps: the cache types' store).
std::unique_ptr<kv::KvStore> make_checked_kv(const model::Model& model, model::Ops& ops, const EngineOptions& options,
                                             int threads, int64_t n_ctx, const Workload& work, bool weights_loaded);
// The backend of `options` (ExactOps in exact mode, else CpuOps) on `pool`, not yet prepared.
std::unique_ptr<model::Ops> make_backend(const EngineOptions& options, ThreadPool* pool);

class PipelineDriver;

class Engine {
 public:
  ~Engine();
  // Maps and loads the model and its vocabulary, and has the backend prepare the weights (CpuOps
  // repacks them, ExactOps encodes them to int16). Throws okapi::Error (missing file, bad GGUF,
  // unknown architecture, threads < 1).
  static std::unique_ptr<Engine> load(const std::filesystem::path& model_path, const EngineOptions& options);
  // The same, running on `pool_owner`'s thread pool (a draft model beside its target: the two run
  // in turn, and a second pool's idle workers would spin against the first's).
  static std::unique_ptr<Engine> load_sharing_threads(const std::filesystem::path& model_path,
                                                      const EngineOptions& options, const Engine& pool_owner);

  const model::Model& model() const { return *model_; }
  const model::HParams& hparams() const { return model_->hparams(); }
  const tokenizer::Tokenizer& tokenizer() const { return tokenizer_; }
  // The vocabulary's token index for grammar masks, built on first use (thread-safe).
  const grammar::TokenIndex& token_index() const;
  model::Ops& ops() { return *ops_; }  // ExactOps in exact mode, CpuOps otherwise
  bool exact() const { return options_.exact; }
  const EngineOptions& options() const { return options_; }
  int threads() const { return pool_->size(); }
  double load_seconds() const { return load_seconds_; }
  const std::filesystem::path& path() const { return path_; }
  uint64_t file_bytes() const;
  uint64_t parameter_count() const;
  // Rank 0's pipeline (options.pipeline under mpirun with several ranks); null otherwise.
  const PipelineDriver* pipeline() const { return pipeline_.get(); }

  // A KV cache of resolve_ctx(n_ctx) cells, after make_checked_kv's memory check for `work`: the
  // exact store of options().exact_attention in exact mode, else the cache types' store. Warns
  // (once per engine) when the context is beyond the model's trained context.
  std::unique_ptr<kv::KvStore> make_kv(int64_t n_ctx, const Workload& work = {});
  int64_t resolve_ctx(int64_t n_ctx) const { return resolve_context(n_ctx, hparams()); }

 private:
  Engine(std::filesystem::path path, std::unique_ptr<model::Model> model, tokenizer::Tokenizer tokenizer,
         const EngineOptions& options, std::shared_ptr<ThreadPool> pool);
  static std::unique_ptr<Engine> load_on(const std::filesystem::path& model_path, const EngineOptions& options,
                                         std::shared_ptr<ThreadPool> pool);
  std::filesystem::path path_;
  std::unique_ptr<model::Model> model_;
  tokenizer::Tokenizer tokenizer_;
  EngineOptions options_;
  std::shared_ptr<ThreadPool> pool_;
  std::unique_ptr<model::Ops> ops_;  // after model_: destroyed first (it holds copies of its weights)
  double load_seconds_;
  bool warned_context_ = false;
  mutable std::once_flag token_index_once_;
  mutable std::unique_ptr<grammar::TokenIndex> token_index_;
  // Last: destroyed first, telling the other ranks to stop while the model it routes still exists.
  std::unique_ptr<PipelineDriver> pipeline_;
};

// Throws okapi::Error "MODEL is an embedding model (ARCH) and cannot generate text; ADVICE" when
// the engine's model has no LM head (an encoder such as bert): what text verbs check after loading.
void require_text_generation(const Engine& engine, std::string_view advice);

// Seconds elapsed on a monotonic clock since `start` (a value from now_seconds()).
double now_seconds();

}  // namespace okapi::runtime
