// okapi train --data FILE... --tokenizer (MODEL.gguf | tokenizer.bin) --config NAME --out DIR
//             [--steps --batch --seq --accum --lr --warmup --eval-every --save-every --seed ...]
//             [--ternary] [--export MODEL.gguf [--export-type T]] [--eval-model M.gguf]...
// okapi train --init-from MODEL.gguf --data FILE... --out DIR [--tokenizer ...] [--steps ...] [--export ...]
// okapi train --resume DIR [--steps N] [--export ...]
// Trains a Llama-2-style model from scratch (train/trainer.hpp), or fine-tunes one (--init-from,
// train/init_from.hpp; low-rank factors of a compressed model stay factors). Ctrl-C saves a checkpoint and
// exits with 130; --resume continues it with the same losses an uninterrupted run gives.
// `mpirun -np N okapi train ...` trains data-parallel over N processes (train/trainer.hpp) with the
// losses and weights of one process; rank 0 prints, writes the run's files and exports.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common_flags.hpp"
#include "core/error.hpp"
#include "core/output_paths.hpp"
#include "dist/communicator.hpp"
#include "train/export.hpp"
#include "train/trainer.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct TrainArgs {
  train::TrainOptions options;
  std::vector<std::string> data;
  std::string tokenizer, out, resume, init = "xavier", init_from;
  std::string export_path, export_type;
  std::vector<std::string> eval_models;
  int64_t bench_steps = 0;
};

train::Init parse_init(const std::string& name) {
  if (name == "xavier") return train::Init::Xavier;
  if (name == "llama2c") return train::Init::Llama2c;
  throw_usage_error("--init '{}' is not xavier or llama2c", name);
}

// A new run needs data, a tokenizer and a directory; a resumed one has them in its directory.
void check_required_flags(const TrainArgs& a) {
  if (!a.resume.empty()) {
    if (!a.out.empty() && !same_file_reason(a.out, a.resume))
      throw_usage_error("train: --out '{}' and --resume '{}' differ: a resumed run continues in its own directory",
                        a.out, a.resume);
    return;
  }
  if (a.data.empty()) throw_usage_error("train: --data FILE is required (or --resume DIR)");
  if (a.tokenizer.empty() && a.init_from.empty()) {
    throw_usage_error("train: --tokenizer is required (or --init-from MODEL.gguf, or --resume DIR)");
  }
  if (a.out.empty()) throw_usage_error("train: --out DIR is required (or --resume DIR)");
}

// --init-from takes the model's shape and weights: flags that would set them are refused.
void check_init_from_flags(const CLI::App& cmd, const TrainArgs& a) {
  if (a.init_from.empty()) return;
  if (!a.resume.empty()) {
    throw_usage_error("train: --init-from starts a new run; --resume '{}' continues one from its checkpoint (leave "
                      "--init-from out)",
                      a.resume);
  }
  for (const char* flag : {"--config", "--dim", "--hidden", "--layers", "--heads", "--kv-heads", "--ternary", "--init"}) {
    if (cmd.count(flag) > 0) {
      throw_usage_error("train: {} conflicts with --init-from: the model's shape and weights come from '{}'", flag,
                        a.init_from);
    }
  }
}

// On --resume the flags that shape the loss curve must agree with the checkpoint (or be left out).
void check_resume_flags(const CLI::App& cmd, const TrainArgs& a, const train::Checkpoint& ck) {
  const train::TrainHyper& h = ck.meta.hyper;
  const train::TrainHyper& g = a.options.hyper;
  const auto check = [&](const char* flag, bool same, const std::string& stored) {
    if (cmd.count(flag) > 0 && !same) {
      throw_error("{} differs from the checkpoint's {} (leave it out to continue the run as it was)", flag, stored);
    }
  };
  check("--batch", g.batch == h.batch, std::to_string(h.batch));
  check("--seq", g.seq == h.seq, std::to_string(h.seq));
  check("--accum", g.accum == h.accum, std::to_string(h.accum));
  check("--warmup", g.warmup == h.warmup, std::to_string(h.warmup));
  check("--lr", g.lr == h.lr, fmt::format("{:g}", h.lr));
  check("--lr-min", g.lr_min == h.lr_min, fmt::format("{:g}", h.lr_min));
  check("--weight-decay", g.weight_decay == h.weight_decay, fmt::format("{:g}", h.weight_decay));
  check("--grad-clip", g.grad_clip == h.grad_clip, fmt::format("{:g}", h.grad_clip));
  check("--seed", g.seed == h.seed, std::to_string(h.seed));
  check("--held-out", g.held_out_fraction == h.held_out_fraction, fmt::format("{:g}", h.held_out_fraction));
  check("--init", static_cast<int32_t>(parse_init(a.init)) == h.init, "init");
  check("--ternary", a.options.ternary == ck.meta.config.ternary, ck.meta.config.ternary ? "ternary" : "float");
  for (const char* flag : {"--config", "--dim", "--hidden", "--layers", "--heads", "--kv-heads", "--ctx"}) {
    if (cmd.count(flag) == 0) continue;
    const auto c = train::make_config(a.options.config_name, a.options.overrides, ck.meta.config.ternary,
                                      ck.meta.config.vocab_size);
    const auto& s = ck.meta.config;
    const bool same = c.dim == s.dim && c.hidden_dim == s.hidden_dim && c.n_layers == s.n_layers &&
                      c.n_heads == s.n_heads && c.n_kv_heads == s.n_kv_heads && c.seq_len == s.seq_len;
    check(flag, same, fmt::format("{} shape", s.name));
  }
}

void export_and_check(const TrainArgs& a, train::Trainer& trainer) {
  train::ExportOptions options;
  options.type = a.export_type.empty() ? train::default_export_type(trainer.config())
                                       : dtype_from_name(a.export_type).value_or(DType::Q8_K);
  if (!a.export_type.empty() && !dtype_from_name(a.export_type)) throw_usage_error("--export-type '{}' is unknown", a.export_type);
  options.metadata = trainer.export_metadata();
  const auto summary = train::export_gguf(trainer.config(), trainer.params(), trainer.tokenizer(), a.export_path, options);
  std::printf("export: %s: %s, %zu tensors, %llu bytes", a.export_path.c_str(), summary.architecture.c_str(),
              summary.n_tensors, static_cast<unsigned long long>(summary.file_bytes));
  if (trainer.config().ternary) {
    std::printf(" (ternary projections: %lld %s, %lld f32%s)", static_cast<long long>(summary.ternary_packed),
                std::string(dtype_name(options.type)).c_str(), static_cast<long long>(summary.ternary_fallback),
                options.type != DType::F32 && summary.ternary_fallback > 0 ? " as rows are not multiples of 256" : "");
  }
  std::printf("\n");
  if (written_in_place(a.export_path)) {  // a device or FIFO cannot be read back
    std::printf("export: not checked with the engine ('%s' is not a regular file)\n", a.export_path.c_str());
    return;
  }
  const double trainer_loss = trainer.evaluate();
  const auto engine = train::evaluate_gguf(a.export_path, trainer.eval_windows(), a.options.threads);
  const double ppl_trainer = std::exp(trainer_loss), ppl_engine = std::exp(engine.mean_loss);
  std::printf("export: held-out PPL: trainer %.4f, engine %.4f (%+.3f%%, %lld tokens)\n", ppl_trainer, ppl_engine,
              100.0 * (ppl_engine / ppl_trainer - 1.0), static_cast<long long>(engine.scored));
}

int run_train(const CLI::App& cmd, TrainArgs a, VerbResult& result) {
  train::TrainOptions& o = a.options;
  o.comm = dist::join_launched_world();  // refuses mpirun in a build without MPI
  const bool leader = o.comm == nullptr || o.comm->rank() == 0;
  for (const auto& d : a.data) o.data_files.emplace_back(d);
  o.tokenizer = a.tokenizer;
  o.init_from = a.init_from;
  o.hyper.init = static_cast<int32_t>(parse_init(a.init));
  std::unique_ptr<train::Checkpoint> checkpoint;
  if (!a.resume.empty()) {
    // Rank 0 first: it sets a corrupt newest checkpoint aside (and warns) before the others look.
    if (!leader) o.comm->barrier();
    train::ResumePoint resume = train::load_newest_good_checkpoint(a.resume, [leader](const std::string& message) {
      if (leader) std::fprintf(stderr, "okapi: warning: %s\n", message.c_str());
    });
    if (leader && o.comm != nullptr) o.comm->barrier();
    checkpoint = std::make_unique<train::Checkpoint>(std::move(resume.checkpoint));
    check_resume_flags(cmd, a, *checkpoint);
    const train::CheckpointMeta& m = checkpoint->meta;
    if (cmd.count("--steps") == 0) o.hyper.steps = m.hyper.steps;
    if (cmd.count("--eval-every") == 0) o.eval_every = m.eval_every;
    if (cmd.count("--eval-windows") == 0) o.eval_windows = m.eval_windows;
    if (cmd.count("--save-every") == 0) o.save_every = m.save_every;
    if (o.hyper.steps < checkpoint->meta.step) {
      throw_error("--steps {} is before the checkpoint's step {}", o.hyper.steps, checkpoint->meta.step);
    }
    o.out_dir = a.resume;
    if (leader)
      std::fprintf(stderr, "train: resuming from %s (step %lld)\n", resume.path.c_str(),
                 static_cast<long long>(checkpoint->meta.step));
  } else {
    o.out_dir = a.out;
  }
  o.export_path = a.export_path;
  o.eval_models.assign(a.eval_models.begin(), a.eval_models.end());
  train::Trainer trainer(o, checkpoint.get());
  checkpoint.reset();  // the trainer has copied what it needs
  if (a.bench_steps > 0) {
    const double rate = trainer.bench(a.bench_steps);
    if (!leader) return 0;
    const double tokens_per_step = static_cast<double>(o.hyper.batch * o.hyper.seq * o.hyper.accum);
    std::printf("bench: %s, vocab %lld, %lld params, batch %lld x seq %lld x accum %lld, %d threads: %.1f tok/s (%.2f "
                "ms/step)%s\n",
                trainer.config().name.c_str(), static_cast<long long>(trainer.config().vocab_size),
                static_cast<long long>(trainer.parameter_count()),
                static_cast<long long>(o.hyper.batch), static_cast<long long>(o.hyper.seq),
                static_cast<long long>(o.hyper.accum), o.threads, rate, 1e3 * tokens_per_step / rate,
                o.comm == nullptr ? ""
                                  : fmt::format(", {} ranks, {} bytes exchanged per rank per step", trainer.ranks(),
                                                trainer.exchange_bytes_per_rank(0))
                                        .c_str());
    return 0;
  }
  const train::TrainResult r = trainer.run();
  const int64_t ran = r.last_step - r.first_step + 1;
  // Every rank stops at the same step (rank 0 decides on Ctrl-C): the exit code is the job's, not
  // one rank's failure.
  result.every_rank_exits = true;
  if (!leader) return r.interrupted ? 130 : 0;
  std::fprintf(stderr, "train: %lld steps in %.2f s (%.2f steps/s, %.0f tok/s); eval %.2f s, checkpoints %.2f s\n",
               static_cast<long long>(ran), r.seconds, r.seconds > 0 ? static_cast<double>(ran) / r.seconds : 0.0,
               r.tokens_per_second, r.eval_seconds, r.save_seconds);
  if (!r.last_checkpoint.empty()) std::printf("checkpoint: %s\n", r.last_checkpoint.c_str());
  if (r.last_eval_loss) {
    std::printf("final: step %lld, train loss %.4f, held-out loss %.4f, PPL %.4f\n", static_cast<long long>(r.last_step),
                r.last_train_loss, *r.last_eval_loss, std::exp(*r.last_eval_loss));
  }
  if (r.interrupted) {
    std::fprintf(stderr, "train: interrupted; continue with: okapi train --resume %s\n", o.out_dir.c_str());
    return 130;
  }
  if (r.stopped) {
    std::fprintf(stderr, "train: stopped after %lld steps (--stop-after); continue with: okapi train --resume %s\n",
                 static_cast<long long>(ran), o.out_dir.c_str());
  }
  if (!a.export_path.empty()) export_and_check(a, trainer);
  for (const auto& model : a.eval_models) {
    const auto e = train::evaluate_gguf(model, trainer.eval_windows(), o.threads);
    std::printf("eval-model: %s: held-out loss %.4f, PPL %.4f (%lld tokens)\n", model.c_str(), e.mean_loss,
                std::exp(e.mean_loss), static_cast<long long>(e.scored));
  }
  return 0;
}

}  // namespace

void register_train(CLI::App& app, VerbResult& result) {
  auto a = std::make_shared<TrainArgs>();
  train::TrainOptions& o = a->options;
  train::TrainHyper& h = o.hyper;
  o.threads = default_threads();
  const auto positive = in_range(1, kUnbounded);
  const auto non_negative = in_range(0, kUnbounded);
  auto* cmd = app.add_subcommand("train", "train a Llama-2-style model from scratch (float or b1.58 ternary), or fine-tune one (--init-from)");
  cmd->add_option("--data", a->data, "text files to train on (each one document; the last 10% held out)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(non_empty());
  cmd->add_option("--tokenizer", a->tokenizer, "a GGUF model's vocabulary or a llama2.c tokenizer.bin")->check(non_empty());
  cmd->add_option("--init-from", a->init_from,
                  "fine-tune this llama GGUF (its shape, weights, low-rank factors and, without --tokenizer, vocabulary)")
      ->check(non_empty());
  cmd->add_option("--config", o.config_name, "model shape: stories260K, stories15M, stories42M, stories110M")
      ->capture_default_str();
  cmd->add_option("--dim", o.overrides.dim, "override the config's width")->check(in_range(1, 1 << 16));
  cmd->add_option("--hidden", o.overrides.hidden_dim, "override the FFN width")->check(in_range(1, 1 << 18));
  cmd->add_option("--layers", o.overrides.n_layers, "override the layer count")->check(in_range(1, 1024));
  cmd->add_option("--heads", o.overrides.n_heads, "override the head count")->check(in_range(1, 1024));
  cmd->add_option("--kv-heads", o.overrides.n_kv_heads, "override the KV head count")->check(in_range(1, 1024));
  cmd->add_option("--ctx", o.overrides.seq_len,
                  "override the context length (RoPE table, exported context; also the --init-from model's)")
      ->check(in_range(1, 1 << 20));
  cmd->add_flag("--ternary", o.ternary, "b1.58 quantization-aware training (exports a bitnet GGUF)");
  cmd->add_option("--out,-o", a->out, "run directory: checkpoints, train.csv, loss.svg, token cache")->check(non_empty());
  cmd->add_option("--resume", a->resume, "continue the run in DIR from its newest checkpoint")->check(non_empty());
  cmd->add_option("--steps", h.steps, "optimizer steps (the cosine schedule ends here)")->capture_default_str()
      ->check(positive);
  cmd->add_option("--batch", h.batch, "sequences per micro-batch")->capture_default_str()->check(in_range(1, 1 << 16));
  cmd->add_option("--seq", h.seq, "tokens per sequence")->capture_default_str()->check(in_range(1, 1 << 20));
  cmd->add_option("--accum", h.accum, "micro-batches per step (gradient accumulation)")->capture_default_str()
      ->check(in_range(1, 1 << 16));
  cmd->add_option("--lr", h.lr, "peak learning rate")->capture_default_str()->check(in_range(0, 10));
  cmd->add_option("--lr-min", h.lr_min, "learning rate at the end of the cosine")->capture_default_str()
      ->check(in_range(0, 10));
  cmd->add_option("--warmup", h.warmup, "linear warm-up steps")->capture_default_str()->check(non_negative);
  cmd->add_option("--weight-decay", h.weight_decay, "AdamW decoupled weight decay (matrices only)")->capture_default_str()
      ->check(non_negative);
  cmd->add_option("--grad-clip", h.grad_clip, "clip the global gradient norm to this (0: off)")->capture_default_str()
      ->check(non_negative);
  cmd->add_option("-s,--seed", h.seed, "seed of the initialization and the data order")->capture_default_str()
      ->check(in_range(0, 4294967295.0));
  cmd->add_option("--init", a->init, "initialization: xavier or llama2c")->capture_default_str()
      ->check(CLI::IsMember({"xavier", "llama2c"}));
  cmd->add_option("--held-out", h.held_out_fraction, "fraction of the tokens held out (the end)")->capture_default_str()
      ->check(in_range(0.0001, 0.99));
  cmd->add_option("--eval-every", o.eval_every, "evaluate every N steps (0: only at the end)")->capture_default_str()
      ->check(non_negative);
  cmd->add_option("--eval-windows", o.eval_windows, "held-out windows per evaluation (0: all)")->capture_default_str()
      ->check(non_negative);
  cmd->add_option("--save-every", o.save_every, "checkpoint every N steps (0: only at the end)")->capture_default_str()
      ->check(non_negative);
  cmd->add_option("--keep", o.keep_checkpoints, "checkpoints to keep")->capture_default_str()->check(positive);
  cmd->add_option("--sample-tokens", o.sample_tokens, "tokens sampled after each evaluation")->capture_default_str()
      ->check(in_range(0, 1 << 20));
  cmd->add_option("--stop-after", o.stop_after, "stop after N steps of this invocation (checkpoint saved; --resume continues)")
      ->check(positive);
  cmd->add_option("--log-every", o.log_every, "progress line every N steps when stderr is not a terminal")
      ->check(positive);
  add_threads_flag(cmd, o.threads);
  cmd->add_flag("--overlap-dw", o.overlap_weight_gradients, "weight gradients on a second thread");
  cmd->add_flag("--quiet,-q", o.quiet, "no progress or evaluation lines");
  cmd->add_option("--export", a->export_path, "write the trained model as GGUF and check it with the engine")
      ->check(non_empty());
  cmd->add_option("--export-type", a->export_type, "f32 or f16 (float); tq2_0, tq1_0 or f32 (ternary)")
      ->check(CLI::IsMember({"f32", "f16", "tq2_0", "tq1_0"}));
  cmd->add_option("--eval-model", a->eval_models, "also report a GGUF model's loss on the held-out windows")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(non_empty());
  cmd->add_option("--bench-steps", a->bench_steps, "time N training steps (after one warm-up) and exit")
      ->check(positive);
  CLI::App* self = cmd;
  cmd->callback([a, self, &result] {
    check_required_flags(*a);
    check_init_from_flags(*self, *a);
    if (result.dry_run) return;
    result.exit_code = run_train(*self, *a, result);
  });
}

}  // namespace okapi::cli
