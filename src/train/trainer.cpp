#include "train/trainer.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <optional>
#include <system_error>

#include "core/error.hpp"
#include "core/output_paths.hpp"
#include "core/thread_pool.hpp"
#include "runtime/cancel.hpp"
#include "runtime/engine.hpp"
#include "sample/sampler.hpp"
#include "train/grad_tree.hpp"
#include "train/init_from.hpp"
#include "train/optimizer.hpp"
#include "train/train_log.hpp"

namespace okapi::train {
namespace {

// The window sampler's stream is decorrelated from the initialization's (same user seed).
constexpr uint64_t kSamplerSeedSalt = 0x5851F42D4C957F2Dull;

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string format_rate(double tokens_per_second) {
  if (tokens_per_second >= 1e6) return fmt::format("{:.2f}M", tokens_per_second / 1e6);
  if (tokens_per_second >= 1e3) return fmt::format("{:.1f}k", tokens_per_second / 1e3);
  return fmt::format("{:.0f}", tokens_per_second);
}

// A path as text that fmt::format reads literally (a Remedy's change is a format string).
std::string escape_braces(const std::string& text) {
  std::string out;
  for (const char c : text) {
    out += c;
    if (c == '{' || c == '}') out += c;
  }
  return out;
}

void check_hyper(const TrainHyper& h, const ModelConfig& c) {
  const auto positive = [](int64_t v, Setting setting, const char* what) {
    if (v <= 0) throw_error_for(setting, "the {} must be positive, not {}", what, v);
  };
  positive(h.steps, Setting::Steps, "number of steps");
  positive(h.batch, Setting::TrainBatch, "batch (sequences per micro-batch)");
  positive(h.seq, Setting::Sequence, "sequence length");
  positive(h.accum, Setting::Accumulation, "accumulation (micro-batches per step)");
  if (h.warmup < 0) throw_error_for(Setting::Warmup, "the warm-up steps must not be negative, not {}", h.warmup);
  if (h.seq > c.seq_len) {
    throw Error(fmt::format("sequences of {} tokens are longer than the config's context {}", h.seq, c.seq_len),
                Setting::Sequence, {{Setting::TrainContext, "raising it with {}"}});
  }
  if (!(h.lr > 0) || !std::isfinite(h.lr))
    throw_error_for(Setting::LearningRate, "the learning rate must be a positive number, not {}", h.lr);
  if (!(h.lr_min >= 0) || h.lr_min > h.lr)
    throw_error_for(Setting::LearningRateMin, "the final learning rate must be in [0, {}] (the peak), not {}", h.lr,
                    h.lr_min);
  if (!(h.weight_decay >= 0))
    throw_error_for(Setting::WeightDecay, "the weight decay must not be negative, not {}", h.weight_decay);
  if (!(h.grad_clip >= 0))
    throw_error_for(Setting::GradClip, "the gradient clip must not be negative (0: off), not {}", h.grad_clip);
}

// The run's files (and the caller's export) must not replace what it reads; the checkpoint
// folder and the cache are written and pruned under generated names, so nothing may lie inside.
void check_run_paths(const TrainOptions& o) {
  OutputPlan paths;
  for (const auto& file : o.data_files) paths.inputs.push_back({file, "the training data"});
  paths.inputs.push_back({o.tokenizer, "the tokenizer"});
  if (!o.init_from.empty()) paths.inputs.push_back({o.init_from, "the model to start from"});
  for (const auto& model : o.eval_models) paths.inputs.push_back({model, "the model to evaluate"});
  paths.outputs = {{o.out_dir / "train.csv", "the run's log"}, {o.out_dir / "loss.svg", "the run's loss plot"},
                   {o.export_path, "the export"}};
  paths.directories = {{o.out_dir, "the run directory"}};
  paths.owned_directories = {{checkpoint_dir(o.out_dir), "the checkpoint folder"}, {o.cache_dir, "the token cache"}};
  check_output_plan(paths);
}

}  // namespace

ModelConfig make_config(const std::string& name, const ConfigOverrides& o, bool ternary, int64_t vocab_size) {
  ModelConfig c = config_by_name(name, vocab_size);
  const auto apply = [](int64_t value, int64_t& field) {
    if (value != 0) field = value;
  };
  apply(o.dim, c.dim);
  apply(o.hidden_dim, c.hidden_dim);
  apply(o.n_layers, c.n_layers);
  apply(o.n_heads, c.n_heads);
  apply(o.n_kv_heads, c.n_kv_heads);
  apply(o.seq_len, c.seq_len);
  if (o.n_heads != 0 && o.n_kv_heads == 0) c.n_kv_heads = c.n_heads;  // a new head count: plain MHA
  if (o.dim || o.hidden_dim || o.n_layers || o.n_heads || o.n_kv_heads || o.seq_len) c.name += "-custom";
  c.ternary = ternary;
  c.validate();
  return c;
}

struct Trainer::Runtime {
  Runtime(const ModelConfig& config, const TrainHyper& hyper, const Dataset& data, int threads)
      : pool(threads),
        transformer(config, &pool),
        adam(transformer.layout(), AdamWConfig{hyper.beta1, hyper.beta2, hyper.adam_eps, hyper.weight_decay, false}),
        sampler(data.train, hyper.seq, hyper.seed ^ kSamplerSeedSalt),
        tree(transformer.layout().total()),
        tokens(static_cast<size_t>(hyper.batch * hyper.seq * hyper.accum)),
        targets(tokens.size()),
        leaf_losses(static_cast<size_t>(hyper.accum)) {}
  ThreadPool pool;
  Transformer transformer;
  AdamW adam;
  WindowSampler sampler;
  GradientTree tree;
  std::vector<int32_t> tokens, targets;  // every micro-batch of a step, [accum][batch][seq]
  std::vector<float> leaf_losses;        // each micro-batch's mean loss
  std::vector<float> sent, gathered;     // the gradient exchange between ranks
  std::unique_ptr<TrainLog> log;
  bool tty = ::isatty(STDERR_FILENO) != 0;
};

Trainer::Trainer(const TrainOptions& options, const Checkpoint* resume_from) : options_(options) {
  if (options_.out_dir.empty()) throw_error_for(Setting::RunDirectory, "no run directory given");
  if (options_.threads < 1)
    throw_error_for(Setting::TrainThreads, "the thread count must be at least 1, not {}", options_.threads);
  if (options_.cache_dir.empty()) options_.cache_dir = options_.out_dir / "cache";
  if (options_.comm != nullptr && options_.comm->size() == 1) options_.comm = nullptr;  // alone
  if (resume_from) {
    const CheckpointMeta& m = resume_from->meta;
    if (options_.data_files.empty()) options_.data_files.assign(m.data_files.begin(), m.data_files.end());
    if (options_.tokenizer.empty()) options_.tokenizer = m.tokenizer_path;
    hyper_ = m.hyper;
    hyper_.steps = options.hyper.steps;
    config_ = m.config;
    init_from_ = options_.init_from = m.init_from;  // still an input: an export may not replace it
    export_metadata_ = m.export_metadata;
  } else {
    hyper_ = options_.hyper;
    if (!list_checkpoints(options_.out_dir).empty()) {
      const std::string dir = options_.out_dir.string();
      throw Error(fmt::format("'{}' already holds checkpoints", dir), Setting::None,
                  {{Setting::Resume, fmt::format("continuing it with {{}} {}", escape_braces(dir))},
                   {Setting::RunDirectory, "another {}"}});
    }
  }
  std::optional<SourceModel> source;
  if (!resume_from && !options_.init_from.empty()) {
    init_from_ = options_.init_from;
    if (options_.tokenizer.empty()) options_.tokenizer = init_from_;
    check_run_paths(options_);
    source = load_source_model(init_from_, options_.overrides.seq_len);
    config_ = source->config;
    export_metadata_ = source->export_metadata;
    if (options_.tokenizer == init_from_ && gguf::File::open(init_from_).find("tokenizer.ggml.tokens") == nullptr) {
      throw_error_for(Setting::Tokenizer, "the model '{}' to start from has no tokenizer.ggml.* vocabulary",
                      init_from_.string());
    }
  } else {
    check_run_paths(options_);
  }
  tokenizer_ = std::make_unique<TrainingTokenizer>(load_training_tokenizer(options_.tokenizer));
  if (!resume_from && !source) {
    config_ = make_config(options_.config_name, options_.overrides, options_.ternary, tokenizer_->vocab_size());
  }
  if (config_.vocab_size != tokenizer_->vocab_size()) {
    throw_error("tokenizer '{}' has {} tokens but the model {} {}", options_.tokenizer.string(),
                tokenizer_->vocab_size(), source ? "to fine-tune has" : "was trained with", config_.vocab_size);
  }
  check_hyper(hyper_, config_);
  if (hyper_.accum < ranks()) {
    throw_error_for(Setting::Accumulation,
                    "{} ranks need at least {} micro-batches per step (each computes a share of them), not {}; "
                    "the global batch is batch x accum sequences{}",
                    ranks(), ranks(), hyper_.accum,
                    resume_from ? " (fixed by the checkpoint: resume with fewer ranks)" : "");
  }
  if (resume_from && resume_from->meta.tokenizer_sha256 != tokenizer_->file_sha256) {
    throw_error("tokenizer '{}' is not the one the checkpoint was trained with (sha256 {} vs {})",
                options_.tokenizer.string(), tokenizer_->file_sha256, resume_from->meta.tokenizer_sha256);
  }
  std::error_code ec;
  std::filesystem::create_directories(options_.out_dir, ec);
  if (ec) throw_error("cannot create '{}': {}", options_.out_dir.string(), ec.message());
  // Rank 0 tokenizes first; the others then read its token cache when they share the directory.
  if (!leader()) options_.comm->barrier();
  data_ = build_dataset(options_.data_files, *tokenizer_, options_.cache_dir, hyper_.held_out_fraction, hyper_.seq);
  if (leader() && options_.comm != nullptr) options_.comm->barrier();
  if (resume_from && resume_from->meta.data_sha256 != data_.sha256) {
    throw_error_for(Setting::TrainData,
                    "the training data do not hold the tokens the checkpoint was trained on (sha256 {} vs {})",
                data_.sha256, resume_from->meta.data_sha256);
  }
  eval_ = make_eval_windows(data_.held_out, hyper_.seq, options_.eval_windows);
  rt_ = std::make_unique<Runtime>(config_, hyper_, data_, options_.threads);
  rt_->transformer.set_overlap_weight_gradients(options_.overlap_weight_gradients);
  const size_t n = rt_->transformer.layout().total();
  grads_.assign(n, 0.0f);
  if (resume_from) {
    params_ = resume_from->params;
    rt_->adam.first_moment() = resume_from->adam_m;
    rt_->adam.second_moment() = resume_from->adam_v;
    rt_->sampler.restore(resume_from->meta.sampler);
    step_ = resume_from->meta.step;
    tokens_seen_ = resume_from->meta.tokens_seen;
    train_seconds_ = resume_from->meta.train_seconds;
  } else if (source) {
    params_ = std::move(source->params);
  } else {
    params_.assign(n, 0.0f);
    initialize(rt_->transformer.layout(), static_cast<Init>(hyper_.init), hyper_.seed, params_);
  }
  const std::string title = fmt::format("okapi train: {}{} (seed {})", config_.name, config_.ternary ? " ternary" : "",
                                        hyper_.seed);
  if (leader()) {
    rt_->log = std::make_unique<TrainLog>(options_.out_dir / "train.csv", options_.out_dir / "loss.svg", title,
                                          resume_from ? step_ : -1);
  }
  report(fmt::format("train: {}{}: dim {}, hidden {}, {} layers, {} heads / {} kv, vocab {}, {} parameters", config_.name,
                     config_.ternary ? " (ternary)" : "", config_.dim, config_.hidden_dim, config_.n_layers,
                     config_.n_heads, config_.n_kv_heads, config_.vocab_size, n));
  if (!init_from_.empty()) {
    report(fmt::format("train: fine-tuning {}{}", init_from_.string(),
                       config_.low_rank.empty() ? std::string()
                                                : fmt::format(" ({} of {} projections as low-rank factors)",
                                                              config_.low_rank.size(),
                                                              projection_kinds().size() * static_cast<size_t>(config_.n_layers))));
  }
  report(fmt::format("train: data: {} training tokens, {} held out ({} of {} files from the cache); {} eval windows",
                     data_.train.size(), data_.held_out.size(), data_.cache_hits, options_.data_files.size(),
                     eval_.count));
  report(fmt::format("train: {} steps of {} x {} tokens x {} accum, lr {:g} (warmup {}, cosine to {:g}), seed {}{}",
                     hyper_.steps, hyper_.batch, hyper_.seq, hyper_.accum, hyper_.lr, hyper_.warmup, hyper_.lr_min,
                     hyper_.seed, resume_from ? fmt::format(", resuming after step {}", step_) : std::string()));
  if (options_.comm != nullptr) {
    const LeafRange mine = rank_leaves(hyper_.accum, 0, ranks());
    report(fmt::format("train: {} ranks x {} thread{} (data parallel: {}{} micro-batches each per step; {:.2f} MB "
                       "exchanged per rank per step)",
                       ranks(), options_.threads, options_.threads == 1 ? "" : "s",
                       hyper_.accum % ranks() == 0 ? "" : "up to ", mine.size(),
                       static_cast<double>(exchange_bytes_per_rank(0)) / 1e6));
  } else {
    report(fmt::format("train: 1 process x {} thread{}", options_.threads, options_.threads == 1 ? "" : "s"));
  }
}

Trainer::~Trainer() = default;

void Trainer::report(const std::string& line) const {
  if (options_.quiet || !leader()) return;
  std::fprintf(stderr, "%s%s\n", rt_ && rt_->tty ? "\r\033[2K" : "", line.c_str());
}

size_t Trainer::exchange_bytes_per_rank(int rank) const {
  if (ranks() == 1) return 0;
  const LeafRange leaves = rank_leaves(hyper_.accum, rank, ranks());
  const size_t nodes = covering_nodes(hyper_.accum, leaves).size();
  return (nodes * grads_.size() + static_cast<size_t>(leaves.size())) * sizeof(float);
}

float Trainer::train_step(float lr, float* grad_norm) {
  // Every rank draws every micro-batch's windows (in order), so the sampler's state is the same
  // on all of them and in a checkpoint written by any number of ranks.
  const auto window = static_cast<size_t>(hyper_.batch * hyper_.seq);
  for (size_t a = 0; a < static_cast<size_t>(hyper_.accum); ++a) {
    rt_->sampler.next_batch(hyper_.batch, std::span<int32_t>(rt_->tokens).subspan(a * window, window),
                            std::span<int32_t>(rt_->targets).subspan(a * window, window));
  }
  const float scale = 1.0f / static_cast<float>(hyper_.accum);
  // Each micro-batch's gradient starts from zero (a leaf of the fixed tree), never added into
  // another's: that is what makes the sum independent of who computes which leaf.
  const GradientTree::LeafFn leaf = [&](int64_t a, std::span<float> out) {
    std::fill(out.begin(), out.end(), 0.0f);
    const size_t offset = static_cast<size_t>(a) * window;
    rt_->leaf_losses[static_cast<size_t>(a)] = rt_->transformer.forward_backward(
        params_, std::span<const int32_t>(rt_->tokens).subspan(offset, window),
        std::span<const int32_t>(rt_->targets).subspan(offset, window), hyper_.batch, hyper_.seq, scale, out);
  };
  if (ranks() == 1) {
    rt_->tree.sum({0, hyper_.accum}, {}, leaf, grads_);
  } else {
    exchange_gradients(leaf);
  }
  float loss_sum = 0;
  for (const float loss : rt_->leaf_losses) loss_sum += loss;  // in micro-batch order, as one process
  *grad_norm = clip_global_norm(grads_, hyper_.grad_clip);
  rt_->adam.step(params_, grads_, lr, step_ + 1);
  ++step_;
  tokens_seen_ += static_cast<uint64_t>(hyper_.batch * hyper_.seq * hyper_.accum);
  return loss_sum * scale;
}

void Trainer::exchange_gradients(const GradientTree::LeafFn& leaf) {
  dist::Communicator& comm = *options_.comm;
  const size_t width = grads_.size();
  const int64_t leaves = hyper_.accum;
  // Rank r sends the sums of the largest tree nodes inside its leaves, then its leaves' losses.
  std::vector<LeafRange> ranges;
  std::vector<std::vector<LeafRange>> nodes;
  std::vector<size_t> byte_counts;
  for (int r = 0; r < comm.size(); ++r) {
    ranges.push_back(rank_leaves(leaves, r, comm.size()));
    nodes.push_back(covering_nodes(leaves, ranges.back()));
    byte_counts.push_back((nodes.back().size() * width + static_cast<size_t>(ranges.back().size())) * sizeof(float));
  }
  const auto me = static_cast<size_t>(comm.rank());
  std::vector<float>& sent = rt_->sent;
  sent.resize(byte_counts[me] / sizeof(float));
  for (size_t k = 0; k < nodes[me].size(); ++k)
    rt_->tree.sum(nodes[me][k], {}, leaf, std::span<float>(sent).subspan(k * width, width));
  std::copy(rt_->leaf_losses.begin() + ranges[me].begin, rt_->leaf_losses.begin() + ranges[me].end,
            sent.begin() + static_cast<std::ptrdiff_t>(nodes[me].size() * width));
  size_t total = 0;
  for (const size_t c : byte_counts) total += c;
  std::vector<float>& gathered = rt_->gathered;
  gathered.resize(total / sizeof(float));
  comm.all_gather_into(std::as_bytes(std::span<const float>(sent)), byte_counts,
                       std::as_writable_bytes(std::span<float>(gathered)));
  std::vector<KnownNode> known;
  size_t offset = 0;
  for (size_t r = 0; r < byte_counts.size(); ++r) {
    for (const LeafRange& node : nodes[r]) {
      known.push_back({node, gathered.data() + offset});
      offset += width;
    }
    const auto n_losses = static_cast<size_t>(ranges[r].size());
    std::copy(gathered.begin() + static_cast<std::ptrdiff_t>(offset),
              gathered.begin() + static_cast<std::ptrdiff_t>(offset + n_losses),
              rt_->leaf_losses.begin() + ranges[r].begin);
    offset += n_losses;
  }
  // The known nodes cover every leaf: completing the tree computes none.
  const GradientTree::LeafFn none = [](int64_t a, std::span<float>) {
    throw_error("internal error: micro-batch {} was not exchanged", a);
  };
  rt_->tree.sum({0, leaves}, known, none, grads_);
}

double Trainer::evaluate() {
  double total = 0;
  const int64_t seq = eval_.seq;
  for (int64_t first = 0; first < eval_.count; first += hyper_.batch) {
    const int64_t n = std::min(hyper_.batch, eval_.count - first);
    const auto offset = static_cast<size_t>(first * seq), size = static_cast<size_t>(n * seq);
    const std::span<const int32_t> tokens(eval_.tokens.data() + offset, size);
    const std::span<const int32_t> targets(eval_.targets.data() + offset, size);
    total += static_cast<double>(rt_->transformer.forward_loss(params_, tokens, targets, n, seq)) *
             static_cast<double>(n);
  }
  return total / static_cast<double>(eval_.count);
}

std::string Trainer::sample(int64_t n_tokens, uint64_t seed) {
  const tokenizer::Vocab& vocab = tokenizer_->tokenizer.vocab();
  std::vector<int32_t> ids;
  if (vocab.bos != tokenizer::kNoToken) ids.push_back(vocab.bos);
  sample::SamplerConfig sc;
  sc.seed = static_cast<uint32_t>(seed);
  sample::Sampler sampler(sc);
  const auto n_vocab = static_cast<size_t>(config_.vocab_size);
  std::vector<float> logits;
  for (int64_t i = 0; i < n_tokens; ++i) {
    const size_t ctx = std::min(ids.size(), static_cast<size_t>(config_.seq_len));
    const std::span<const int32_t> window(ids.data() + ids.size() - ctx, ctx);
    if (window.empty()) break;
    logits.resize(ctx * n_vocab);
    rt_->transformer.forward_logits(params_, window, logits);
    const int32_t next = sampler.sample(std::span<const float>(logits.data() + (ctx - 1) * n_vocab, n_vocab));
    if (next == vocab.eos) break;
    sampler.accept(next);
    ids.push_back(next);
  }
  const size_t skip = vocab.bos != tokenizer::kNoToken ? 1 : 0;
  return tokenizer_->tokenizer.decode(std::span<const int32_t>(ids.data() + skip, ids.size() - skip));
}

CheckpointMeta Trainer::meta() const {
  CheckpointMeta m;
  m.config = config_;
  m.hyper = hyper_;
  m.step = step_;
  m.sampler = rt_->sampler.state();
  m.tokens_seen = tokens_seen_;
  m.train_seconds = train_seconds_;
  m.eval_every = options_.eval_every;
  m.eval_windows = options_.eval_windows;
  m.save_every = options_.save_every;
  m.data_sha256 = data_.sha256;
  m.tokenizer_sha256 = tokenizer_->file_sha256;
  m.tokenizer_path = std::filesystem::absolute(options_.tokenizer).string();
  for (const auto& f : options_.data_files) m.data_files.push_back(std::filesystem::absolute(f).string());
  if (!init_from_.empty()) m.init_from = std::filesystem::absolute(init_from_).string();
  m.export_metadata = export_metadata_;
  return m;
}

std::filesystem::path Trainer::save() {
  const auto path = checkpoint_path(options_.out_dir, step_);
  save_checkpoint(path, meta(), params_, rt_->adam.first_moment(), rt_->adam.second_moment());
  prune_checkpoints(options_.out_dir, options_.keep_checkpoints);
  return path;
}

TrainResult Trainer::run() {
  runtime::install_interrupt_handler();
  // mpirun kills the job on Ctrl-C (SIGTERM, SIGKILL a second later) but forwards SIGUSR1: the
  // way to stop every rank after a step with a checkpoint.
  if (options_.comm != nullptr) runtime::also_interrupt_on(SIGUSR1);
  TrainResult r;
  r.first_step = step_ + 1;
  r.last_step = step_;
  const LrSchedule schedule{hyper_.lr, hyper_.lr_min, hyper_.warmup, hyper_.steps};
  const int64_t log_every = options_.log_every > 0 ? options_.log_every : std::max<int64_t>(1, hyper_.steps / 20);
  const double tokens_per_step = static_cast<double>(hyper_.batch * hyper_.seq * hyper_.accum);
  double last_draw = -1;
  while (step_ < hyper_.steps) {
    const float lr = schedule.at(step_ + 1);
    float grad_norm = 0;
    const double t0 = runtime::now_seconds();
    const float loss = train_step(lr, &grad_norm);
    const double dt = runtime::now_seconds() - t0;
    r.seconds += dt;
    train_seconds_ += dt;
    if (!std::isfinite(loss)) {
      throw Error(fmt::format("the training loss became {} at step {}", loss, step_), Setting::None,
                  {{Setting::LearningRate, "a lower {}"}});
    }
    r.last_step = step_;
    r.last_train_loss = loss;
    const double rate = static_cast<double>(step_ - r.first_step + 1) * tokens_per_step / r.seconds;
    LogRow row{step_, loss, lr, grad_norm, rate, train_seconds_, std::nullopt};
    const bool last = step_ == hyper_.steps;
    // Rank 0 decides (mpirun forwards Ctrl-C to every rank, not always at the same step).
    bool interrupted = runtime::interrupt_requested();
    if (options_.comm != nullptr) interrupted = options_.comm->broadcast_value<uint8_t>(0, static_cast<uint8_t>(interrupted)) != 0;
    const bool stop = !last && options_.stop_after > 0 && step_ - r.first_step + 1 >= options_.stop_after;
    if (((options_.eval_every > 0 && step_ % options_.eval_every == 0) || last) && leader()) {
      const double e0 = runtime::now_seconds();
      row.eval_loss = evaluate();
      r.last_eval_loss = row.eval_loss;
      report(fmt::format("step {}: held-out loss {:.4f}, ppl {:.3f} ({} windows of {} tokens)", step_, *row.eval_loss,
                         std::exp(*row.eval_loss), eval_.count, eval_.seq));
      if (options_.sample_tokens > 0) {
        report(fmt::format("step {}: sample: {}", step_, sample(options_.sample_tokens, hyper_.seed + static_cast<uint64_t>(step_))));
      }
      r.eval_seconds += runtime::now_seconds() - e0;
    }
    if (leader()) rt_->log->append(row);
    if (((options_.save_every > 0 && step_ % options_.save_every == 0) || last || interrupted || stop) && leader()) {
      const double s0 = runtime::now_seconds();
      r.last_checkpoint = save();
      r.save_seconds += runtime::now_seconds() - s0;
    }
    if (row.eval_loss && leader()) rt_->log->write_plot();
    const double eta = static_cast<double>(hyper_.steps - step_) * r.seconds / static_cast<double>(step_ - r.first_step + 1);
    const std::string progress = fmt::format("step {}/{} | loss {:.4f} | lr {:.3e} | {} tok/s | ETA {}", step_,
                                             hyper_.steps, loss, lr, format_rate(rate), format_duration(eta));
    if (!leader()) {
      // Only rank 0 reports progress.
    } else if (!options_.quiet && rt_->tty) {
      const double now = runtime::now_seconds();
      if (now - last_draw > 0.1 || last || interrupted) {
        std::fprintf(stderr, "\r\033[2K%s", progress.c_str());
        last_draw = now;
      }
    } else if (step_ % log_every == 0 || last || interrupted) {
      report(progress);
    }
    if (interrupted || stop) {
      r.interrupted = interrupted;
      r.stopped = !interrupted;
      break;
    }
  }
  if (!options_.quiet && rt_->tty && leader()) std::fputc('\n', stderr);
  if (leader()) rt_->log->write_plot();
  const int64_t ran = r.last_step - r.first_step + 1;
  r.tokens_per_second = ran > 0 ? static_cast<double>(ran) * tokens_per_step / r.seconds : 0;
  return r;
}

double Trainer::bench(int64_t steps) {
  if (steps <= 0) throw_error_for(Setting::BenchSteps, "the steps to time must be positive, not {}", steps);
  float grad_norm = 0;
  train_step(hyper_.lr, &grad_norm);  // warm-up: buffers sized, pages touched
  const double t0 = runtime::now_seconds();
  for (int64_t i = 0; i < steps; ++i) train_step(hyper_.lr, &grad_norm);
  const double seconds = runtime::now_seconds() - t0;
  return static_cast<double>(steps * hyper_.batch * hyper_.seq * hyper_.accum) / seconds;
}

}  // namespace okapi::train
