// The training loop: micro-batches of random windows, gradient accumulation, global-norm
// clipping, AdamW with warmup + cosine, held-out evaluation with a sample, checkpoints, the CSV
// log and the loss curve. Everything random is seeded and saved, so a run resumed from a
// checkpoint produces the same losses, bit for bit, as a run that was never stopped.
//
// Run directory layout: train.csv, loss.svg, checkpoints/step-NNNNNNNN.ckpt, cache/*.tok.
// Ctrl-C (SIGINT) finishes the current step, saves a checkpoint and returns interrupted = true.
//
// Data parallel over MPI (TrainOptions::comm): every rank draws every micro-batch's windows, computes
// its share of the micro-batches (train/grad_tree.hpp), and the ranks exchange their partial sums;
// every rank then holds the same gradient and applies the same AdamW update, so the weights, the
// loss curve and the checkpoints are the bits of one process at the same global batch (accum
// micro-batches of batch sequences), whatever the number of ranks. Rank 0 alone evaluates,
// samples, logs, reports and writes checkpoints; it decides when Ctrl-C stops the run.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dist/communicator.hpp"
#include "train/checkpoint.hpp"
#include "train/data.hpp"
#include "train/grad_tree.hpp"
#include "train/model.hpp"

namespace okapi::train {

// Shape changes applied to a named config (0: keep the named value).
struct ConfigOverrides {
  int64_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, seq_len = 0;
};

struct TrainOptions {
  std::vector<std::filesystem::path> data_files;
  std::filesystem::path tokenizer;
  std::string config_name = "stories260K";
  // A new run that fine-tunes this GGUF: its config and weights replace config_name, overrides
  // (but a non-zero seq_len, which replaces the file's context length) and the initialization;
  // its vocabulary is the tokenizer unless `tokenizer` is given.
  std::filesystem::path init_from;
  ConfigOverrides overrides;
  bool ternary = false;
  TrainHyper hyper;
  int64_t eval_every = 100;    // 0: only at the end
  int64_t eval_windows = 64;   // held-out windows per evaluation (<= 0: all)
  int64_t save_every = 100;    // 0: only at the end (and on Ctrl-C)
  int64_t keep_checkpoints = 2;
  int64_t sample_tokens = 48;  // generated after each evaluation (0: none)
  int64_t stop_after = 0;      // stop (with a checkpoint) after this many steps of this call (0: no)
  int64_t log_every = 0;       // progress lines when stderr is not a terminal (0: about 20 per run)
  std::filesystem::path out_dir;
  std::filesystem::path cache_dir;  // empty: <out_dir>/cache
  int threads = 1;
  bool overlap_weight_gradients = false;
  bool quiet = false;  // no progress or eval lines on stderr
  // The ranks of a data-parallel run (nullptr or a world of one: this process alone). Needs
  // accum >= ranks.
  dist::Communicator* comm = nullptr;
  // What the caller writes and reads after the run (--export, --eval-model): checked with the
  // run's own files before any work, so that no output replaces an input.
  std::filesystem::path export_path;
  std::vector<std::filesystem::path> eval_models;
};

struct TrainResult {
  int64_t first_step = 0;  // the first step this call ran
  int64_t last_step = 0;   // the last step done (== first_step - 1 when none ran)
  bool interrupted = false;  // Ctrl-C
  bool stopped = false;      // options.stop_after reached before the last step
  double last_train_loss = 0;
  std::optional<double> last_eval_loss;
  double seconds = 0;  // wall time of the steps this call ran (without eval/saves)
  double eval_seconds = 0, save_seconds = 0;
  double tokens_per_second = 0;
  std::filesystem::path last_checkpoint;
};

class Trainer {
 public:
  // A new run (resume_from == nullptr; out_dir must hold no checkpoints; options.init_from: from
  // that model, else randomly initialized), or the continuation of
  // `resume_from`, whose config and hyper-parameters are used (options.hyper.steps may extend
  // the run). Refuses outputs (train.csv, loss.svg, checkpoints, the token cache, the export) that
  // would replace an input; tokenizes (or reads the cache) and checks the data matches the
  // checkpoint's.
  Trainer(const TrainOptions& options, const Checkpoint* resume_from);
  ~Trainer();

  TrainResult run();
  // Runs `steps` timed steps after one warm-up step, without evaluation, logging or saving, and
  // returns tokens per second (forward + backward + optimizer).
  double bench(int64_t steps);
  double evaluate();  // mean cross-entropy over the held-out windows
  std::string sample(int64_t n_tokens, uint64_t seed);
  std::filesystem::path save();  // a checkpoint of the current state; prunes old ones

  const ModelConfig& config() const { return config_; }
  const TrainHyper& hyper() const { return hyper_; }
  const TrainingTokenizer& tokenizer() const { return *tokenizer_; }
  // GGUF keys an export writes again (an --init-from model's okapi.compress.*).
  const std::vector<gguf::KeyValue>& export_metadata() const { return export_metadata_; }
  const Dataset& dataset() const { return data_; }
  const EvalWindows& eval_windows() const { return eval_; }
  std::span<const float> params() const { return params_; }
  int64_t step() const { return step_; }
  int64_t parameter_count() const { return static_cast<int64_t>(params_.size()); }
  // Rank 0 of a data-parallel run, or the only process: the one that writes and reports.
  bool leader() const { return options_.comm == nullptr || options_.comm->rank() == 0; }
  int ranks() const { return options_.comm ? options_.comm->size() : 1; }
  // Bytes each rank sends per step in the gradient exchange (0 alone): its tree nodes and losses.
  size_t exchange_bytes_per_rank(int rank) const;

 private:
  struct Runtime;
  float train_step(float lr, float* grad_norm);
  // The ranks' share of the step's micro-batches, exchanged: grads_ and the leaf losses complete.
  void exchange_gradients(const GradientTree::LeafFn& leaf);
  CheckpointMeta meta() const;
  void report(const std::string& line) const;

  TrainOptions options_;
  ModelConfig config_;
  TrainHyper hyper_;
  std::unique_ptr<TrainingTokenizer> tokenizer_;  // no default-constructible Tokenizer
  Dataset data_;
  EvalWindows eval_;
  std::vector<float> params_, grads_;
  std::filesystem::path init_from_;
  std::vector<gguf::KeyValue> export_metadata_;
  int64_t step_ = 0;
  uint64_t tokens_seen_ = 0;
  double train_seconds_ = 0;
  std::unique_ptr<Runtime> rt_;
};

// The named config with overrides and ternary applied, validated.
ModelConfig make_config(const std::string& name, const ConfigOverrides& overrides, bool ternary, int64_t vocab_size);

}  // namespace okapi::train
