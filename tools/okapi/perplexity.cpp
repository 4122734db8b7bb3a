// okapi perplexity -m MODEL -f TEXT [-c CTX] [--chunks N] [-b BATCH] [-t T] [-ctk/-ctv]
//                  [--save-logits FILE] [--kl-divergence FILE] [--exact [--exact-attention ntt|direct]]
// llama-perplexity's method (eval/perplexity.hpp): running "[chunk]ppl," values on stdout,
// then "Final estimate: PPL = X +/- Y". --save-logits writes this run's log-probs; a later run
// with --kl-divergence FILE (same text and -c) reports KL divergence, top-1 agreement and Δp.
// The KV cache is F16 by default, as llama-perplexity's, so the numbers compare directly.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>

#include "common_flags.hpp"
#include "core/error.hpp"
#include "core/output_paths.hpp"
#include "core/progress.hpp"
#include "eval/perplexity.hpp"
#include "exact_flags.hpp"
#include "runtime/cancel.hpp"
#include "runtime/engine.hpp"
#include "runtime/pipeline.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct PerplexityArgs {
  std::string model;
  ModelSourceFlags source;  // --hf-repo / --model-url when -m is not given
  std::string text_file;
  eval::PerplexityOptions options;
  // llama-perplexity's default cache types.
  runtime::EngineOptions engine{default_threads(), {kv::CacheType::f16(), kv::CacheType::f16()}};
  std::string save_logits;
  std::string kl_divergence;
};

void print_kl(const eval::PerplexityResult& r) {
  const eval::KlStats& k = *r.kl;
  std::printf("\n====== Perplexity statistics ======\n");
  std::printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", r.ppl, r.ppl_stderr);
  std::printf("Mean PPL(base)                : %10.6f ± %10.6f\n", k.ppl_base, k.ppl_base_err);
  std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * k.cor_ln_ppl);
  std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", k.mean_ln_ppl_ratio, k.mean_ln_ppl_ratio_err);
  std::printf("Mean PPL(Q)/PPL(base)         : %10.6f\n", r.ppl / k.ppl_base);
  std::printf("Mean PPL(Q)-PPL(base)         : %10.6f\n", r.ppl - k.ppl_base);
  std::printf("\n====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6f ± %10.6f\n", k.kld_mean, k.kld_err);
  std::printf("Maximum KLD: %10.6f\n99.9%%   KLD: %10.6f\n99.0%%   KLD: %10.6f\n", k.kld_max, k.kld_p999, k.kld_p99);
  std::printf("Median  KLD: %10.6f\n10.0%%   KLD: %10.6f\n 5.0%%   KLD: %10.6f\n", k.kld_median, k.kld_p10, k.kld_p5);
  std::printf(" 1.0%%   KLD: %10.6f\nMinimum KLD: %10.6f\n", k.kld_p1, k.kld_min);
  std::printf("\n====== Token probability statistics ======\n");
  std::printf("Mean    Δp: %8.3f ± %.3f %%\n", 100.0 * k.dp_mean, 100.0 * k.dp_err);
  for (const auto& [name, value] : k.dp_percentiles) std::printf("%-7s Δp: %8.3f%%\n", name.c_str(), 100.0 * value);
  std::printf("RMS Δp    : %8.3f %%\n", 100.0 * k.dp_rms);
  std::printf("Same top p: %8.3f ± %.3f %%\n", 100.0 * k.same_top_fraction, 100.0 * k.same_top_err);
}

int run(PerplexityArgs args) {
  args.model = resolve_model_source(args.model, args.source);
  check_output_path({args.save_logits, "--save-logits"},
                    {{args.model, "-m"}, {args.text_file, "-f"}, {args.kl_divergence, "--kl-divergence"}});
  args.options.save_logits = args.save_logits;
  args.options.kl_divergence = args.kl_divergence;
  // The other ranks of `mpirun ... --pipeline` serve their stages and print nothing.
  if (runtime::serve_if_pipeline_worker(args.model, args.engine)) return 0;
  const std::string text = okapi::read_text_file(args.text_file);
  const auto engine = runtime::Engine::load(args.model, args.engine);
  runtime::require_text_generation(*engine, "use `okapi embed -m MODEL` for its vectors");
  std::fprintf(stderr, "perplexity: model loaded in %.2f ms\n", engine->load_seconds() * 1e3);
  if (engine->pipeline()) std::fprintf(stderr, "perplexity: %s\n", engine->pipeline()->describe().c_str());
  runtime::install_interrupt_handler();
  std::unique_ptr<ProgressBar> progress;
  const auto on_chunk = [&](const eval::ChunkReport& c) {
    if (!progress) {
      std::fprintf(stderr, "perplexity: %lld chunks of %lld tokens, %.2f s per chunk\n",
                   static_cast<long long>(c.n_chunks), static_cast<long long>(engine->resolve_ctx(args.options.n_ctx)),
                   c.seconds);
      progress = std::make_unique<ProgressBar>("perplexity", static_cast<uint64_t>(c.n_chunks));
    }
    std::printf("[%lld]%.4f,", static_cast<long long>(c.chunk + 1), c.running_ppl);
    std::fflush(stdout);
    progress->update(static_cast<uint64_t>(c.chunk + 1), fmt::format("ppl {:.4f}", c.running_ppl));
  };
  const eval::PerplexityResult r = eval::compute_perplexity(*engine, text, args.options, on_chunk);
  if (progress) progress->finish();
  std::printf("\n");
  std::fflush(stdout);
  if (r.interrupted) std::fprintf(stderr, "perplexity: interrupted after %zu chunks\n", r.running_ppl.size());
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_stderr);
  std::fprintf(stderr, "perplexity: %lld tokens scored in %.2f s (%.1f tok/s evaluated)\n",
               static_cast<long long>(r.scored), r.seconds,
               r.seconds > 0 ? static_cast<double>(r.running_ppl.size()) * static_cast<double>(r.n_ctx) / r.seconds
                             : 0.0);
  if (r.kl) print_kl(r);
  return r.interrupted ? 130 : 0;
}

}  // namespace

void register_perplexity(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<PerplexityArgs>();
  auto& o = args->options;
  auto* cmd = app.add_subcommand("perplexity", "perplexity of a text, as llama-perplexity computes it");
  add_model_source_flags(cmd, args->source, cmd->add_option("-m,--model", args->model, "GGUF model")->check(non_empty()));
  cmd->add_option("-f,--file", args->text_file, "text file")->required()->check(non_empty());
  add_ctx_flag(cmd, o.n_ctx, "tokens per chunk (0: the model's trained context; default: that, at most 4096)");
  cmd->add_option("--chunks", o.n_chunks, "chunks to evaluate (-1: all)")->capture_default_str()
      ->check(in_range(-1, kUnbounded));
  add_batch_flag(cmd, o.batch_size, "tokens per forward pass");
  add_threads_flag(cmd, args->engine.threads);
  add_cache_type_flags(cmd, args->engine.cache);
  add_exact_flags(cmd, args->engine.exact, args->engine.exact_attention, args->engine.exact_ring);
  add_pipeline_flag(cmd, args->engine.pipeline);
  cmd->add_option("--save-logits", args->save_logits, "write this run's log-probs (okapi format) to FILE")
                   ->check(non_empty());
  cmd->add_option("--kl-divergence", args->kl_divergence, "compare with log-probs saved by --save-logits")
                      ->check(non_empty());
  cmd->callback([args, cmd, &result] {
    check_exact_flags(cmd, args->engine.exact);
    require_model_source("perplexity", args->model, args->source);
    if (result.dry_run) return;
    result.exit_code = run(*args);
  });
}

}  // namespace okapi::cli
