// okapi run [-m MODEL] (-p PROMPT | -f FILE) [-e] [-n N] [-c CTX] [-t T] [-b BATCH] [sampling flags] [-ctk/-ctv]
//           [--json] [--no-display-prompt] [--exact [--exact-attention ntt|direct]]
//           [--lookup N | --draft-model FILE | --draft-skip LIST] [--draft-max N] [--draft-min N] [--draft-p-min P]
// Generates text, streaming it to stdout as it is produced (prompt first, as llama-cli does);
// timings go to stderr. Without -m, the repository's stories260K model; without -p, "Once upon a
// time". Ctrl-C stops the generation, prints the timings so far and exits with code 130.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/progress.hpp"
#include "core/json_output.hpp"
#include "runtime/cancel.hpp"
#include "runtime/default_model.hpp"
#include "runtime/drafters.hpp"
#include "runtime/engine.hpp"
#include "runtime/pipeline.hpp"
#include "runtime/scheduler.hpp"
#include "exact_flags.hpp"
#include "common_flags.hpp"
#include "sample/sampler.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

constexpr int kInterruptedExitCode = 130;  // the shell's code for "ended by SIGINT"

struct RunArgs {
  std::string model;
  ModelSourceFlags source;  // --hf-repo / --model-url when -m is not given
  std::string prompt = "Once upon a time";
  std::string prompt_file;
  int64_t n_predict = 256;
  int64_t n_ctx = runtime::kContextNotGiven;
  int64_t batch_size = 512;
  runtime::EngineOptions engine;
  sample::SamplerConfig sampling;
  int64_t seed = -1;
  bool escape = false;  // -e: llama.cpp's escapes (\n, \t, \xHH, ...) in the prompt
  bool json = false;
  bool no_display_prompt = false;
  bool ignore_eos = false;
  runtime::DrafterOptions drafting;
  GrammarFlags grammar;
};

void print_timings(const runtime::GenerationStats& t, double load_seconds, runtime::StopReason stop,
                   std::string_view drafter) {
  std::fprintf(stderr,
               "\nokapi: load %.2f ms | prompt %lld tokens in %.2f ms, %.1f tok/s | generation %lld tokens in "
               "%.2f ms, %.1f tok/s | stop: %s\n",
               load_seconds * 1e3, static_cast<long long>(t.prompt_tokens), t.prompt_seconds * 1e3,
               t.prompt_tokens_per_second(), static_cast<long long>(t.generated_tokens), t.generation_seconds * 1e3,
               t.generation_tokens_per_second(), std::string(runtime::to_string(stop)).c_str());
  if (drafter.empty()) return;
  std::fprintf(stderr,
               "okapi: speculative (%.*s): %lld drafted, %lld accepted (%.1f%%), %lld target passes for %lld tokens "
               "(%.2f tokens a pass), drafting %.2f ms; the drafter's prompt pass %.2f ms (in the prompt's time)\n",
               static_cast<int>(drafter.size()), drafter.data(), static_cast<long long>(t.drafted_tokens),
               static_cast<long long>(t.accepted_tokens), 100.0 * t.acceptance_rate(),
               static_cast<long long>(t.decode_passes), static_cast<long long>(t.generated_tokens),
               t.decode_passes > 0 ? static_cast<double>(t.generated_tokens) / static_cast<double>(t.decode_passes) : 0.0,
               t.draft_seconds * 1e3, t.draft_prompt_seconds * 1e3);
}

// The prompt's tokens, or an error as soon as they are known not to fit in `n_ctx` cells. A long
// prompt is first tokenized by prefixes (16 bytes a cell, then twice, four times that ...): cutting
// the text changes its tokens only next to the cut, so a prefix with kCutSlack tokens more than the
// context proves the whole does not fit, and a 50 MB file is refused after ~70 KB of it instead of
// after all of it. A prompt that fits is tokenized whole, as it always was.
std::vector<tokenizer::TokenId> tokenize_within_context(const tokenizer::Tokenizer& tokenizer, std::string_view prompt,
                                                        int64_t n_ctx) {
  constexpr int64_t kCutSlack = 64;
  const auto limit = static_cast<size_t>(n_ctx + kCutSlack);
  for (size_t prefix = 16 * limit; prefix < prompt.size(); prefix *= 2) {
    size_t cut = prefix;
    while (cut > 0 && (static_cast<unsigned char>(prompt[cut]) & 0xC0) == 0x80) --cut;  // a UTF-8 character's start
    const size_t n = runtime::tokenize_prompt(tokenizer, prompt.substr(0, cut)).size();
    if (n > limit)
      throw_error("the prompt has more than {} tokens (its first {} of {} bytes alone are {}) but the context holds "
                  "only {} (-c {}); use a larger -c",
                  n_ctx, cut, prompt.size(), n, n_ctx, n_ctx);
  }
  return runtime::tokenize_prompt(tokenizer, prompt);
}

int run(RunArgs args) {
  // The seed is drawn here when it is random: the JSON record reports it, and the drafter's is derived from it.
  args.sampling.seed = sample::resolve_seed(args.seed >= 0 ? static_cast<uint32_t>(args.seed) : args.sampling.seed);
  args.sampling.validate();
  if (!args.prompt_file.empty()) args.prompt = read_input_file(args.prompt_file, "prompt file");
  if (args.escape) args.prompt = process_escapes(args.prompt);
  const auto grammar = load_grammar(args.grammar);  // before loading the model: a bad grammar fails fast
  args.model = resolve_model_source(args.model, args.source);
  const std::string model_path = args.model.empty() ? runtime::default_model_path().string() : args.model;
  // The other ranks of `mpirun ... --pipeline` serve their stages and print nothing.
  if (runtime::serve_if_pipeline_worker(model_path, args.engine)) return 0;
  const auto engine = runtime::Engine::load(model_path, args.engine);
  runtime::require_text_generation(*engine, "use `okapi embed -m MODEL` for its vectors");
  std::optional<runtime::DrafterFactory> drafters;
  if (args.drafting.enabled()) drafters.emplace(args.drafting, *engine, args.engine);
  runtime::SchedulerOptions so;
  so.n_ctx_per_slot = args.n_ctx;
  so.batch_size = args.batch_size;
  so.worker_thread = false;
  so.drafters = drafters ? &*drafters : nullptr;
  so.drafter_seed = args.sampling.seed ^ 0x9e3779b9u;
  runtime::Scheduler scheduler(*engine, so);
  const int64_t n_ctx = scheduler.options().n_ctx_per_slot;
  runtime::SequenceRequest request;
  request.prompt = tokenize_within_context(engine->tokenizer(), args.prompt, n_ctx);
  if (static_cast<int64_t>(request.prompt.size()) > n_ctx)
    throw_error("the prompt has {} tokens but the context holds only {} (-c {}); use a larger -c", request.prompt.size(),
                n_ctx, n_ctx);
  const auto prompt = request.prompt;
  request.sampling = args.sampling;
  request.max_tokens = args.n_predict;
  request.ignore_eos = args.ignore_eos;
  request.report_progress = true;
  request.constraint.grammar = grammar;
  runtime::install_interrupt_handler();
  // A prompt longer than one batch shows a progress bar on a terminal while it is read; the
  // prompt is echoed after it (as the generated text streams), so the bar has its line to itself.
  std::optional<ProgressBar> progress;
  if (static_cast<int64_t>(prompt.size()) > args.batch_size) progress.emplace("prompt", static_cast<uint64_t>(prompt.size()));
  bool echoed = false;
  const auto echo_prompt = [&] {
    if (echoed) return;
    echoed = true;
    if (progress) progress->finish();
    if (args.json || args.no_display_prompt) return;
    std::fwrite(args.prompt.data(), 1, args.prompt.size(), stdout);
    std::fflush(stdout);
  };
  const auto on_event = [&](const runtime::SequenceEvent& event) {
    if (event.prompt_done >= 0) {
      if (progress) progress->update(static_cast<uint64_t>(event.prompt_done), "tokens");
      if (event.prompt_done == event.prompt_total) echo_prompt();
      return;
    }
    echo_prompt();  // also when interrupted before the prompt's end
    if (args.json || event.text.empty()) return;
    std::fwrite(event.text.data(), 1, event.text.size(), stdout);
    std::fflush(stdout);
  };
  const runtime::GenerationResult result =
      runtime::generate(scheduler, std::move(request), on_event, [] { return runtime::interrupt_requested(); });
  const runtime::GenerationStats& t = result.stats;
  const std::string_view drafter = scheduler.drafter_name();
  if (args.json) {
    nlohmann::ordered_json json;
    json["model"] = model_path;
    json["architecture"] = engine->hparams().arch;
    json["prompt"] = args.prompt;
    json["prompt_tokens"] = prompt;
    json["text"] = result.text;
    json["tokens"] = result.tokens;
    json["stop"] = runtime::to_string(result.stop);
    json["n_ctx"] = n_ctx;
    json["threads"] = engine->threads();
    json["seed"] = args.sampling.seed;
    json["cache_type_k"] = std::string(args.engine.exact ? scheduler.slot_kv_type_name() : args.engine.cache.k.name());
    json["cache_type_v"] = std::string(args.engine.exact ? scheduler.slot_kv_type_name() : args.engine.cache.v.name());
    json["exact"] = args.engine.exact;
    json["load_ms"] = engine->load_seconds() * 1e3;
    json["prompt_ms"] = t.prompt_seconds * 1e3;
    json["prompt_tokens_per_second"] = t.prompt_tokens_per_second();
    json["generated_tokens"] = t.generated_tokens;
    json["generation_ms"] = t.generation_seconds * 1e3;
    json["generation_tokens_per_second"] = t.generation_tokens_per_second();
    json["decode_passes"] = t.decode_passes;
    if (!drafter.empty()) {
      json["drafter"] = drafter;
      json["n_drafted"] = t.drafted_tokens;
      json["n_accepted"] = t.accepted_tokens;
      json["acceptance_rate"] = t.acceptance_rate();
      json["draft_ms"] = t.draft_seconds * 1e3;
      json["draft_prompt_ms"] = t.draft_prompt_seconds * 1e3;
    }
    std::printf("%s\n", dump_json(std::move(json)).c_str());
  }
  std::fflush(stdout);
  print_timings(t, engine->load_seconds(), result.stop, drafter);
  return result.stop == runtime::StopReason::Interrupted ? kInterruptedExitCode : 0;
}

}  // namespace

void register_run(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<RunArgs>();
  args->engine.threads = default_threads();
  auto* cmd = app.add_subcommand("run", "generate text from a prompt (streams to stdout, timings to stderr)");
  add_model_source_flags(cmd, args->source, cmd->add_option("-m,--model", args->model, "GGUF model (default: the bundled stories260K)"));
  auto* prompt = cmd->add_option("-p,--prompt", args->prompt, "prompt text")->capture_default_str();
  auto* prompt_file = cmd->add_option("-f,--file", args->prompt_file, "read the prompt from a file (any size)")
                          ->check(non_empty());
  prompt->excludes(prompt_file);
  prompt_file->excludes(prompt);
  cmd->add_flag("-e,--escape,!--no-escape", args->escape,
                "process escapes in the prompt as llama.cpp does (\\n, \\r, \\t, \\', \\\", \\\\, \\xHH); "
                "without -e (unlike llama.cpp) the prompt is used as given");
  cmd->add_option("-n,--n-predict", args->n_predict, "tokens to generate (-1: until end or full context)")
      ->capture_default_str()
      ->check(in_range(-1, kUnbounded));
  add_ctx_flag(cmd, args->n_ctx, "context length (0: the model's trained context; default: that, at most 4096)");
  add_threads_flag(cmd, args->engine.threads);
  add_batch_flag(cmd, args->batch_size, "prompt tokens per forward pass");
  add_sampling_flags(cmd, args->sampling);
  add_seed_flag(cmd, args->seed);
  add_cache_type_flags(cmd, args->engine.cache);
  add_exact_flags(cmd, args->engine.exact, args->engine.exact_attention, args->engine.exact_ring);
  add_pipeline_flag(cmd, args->engine.pipeline);
  cmd->add_flag("--json", args->json, "print one JSON record (text, tokens, timings) instead of streaming");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating after end-of-generation tokens");
  cmd->add_flag("--no-display-prompt", args->no_display_prompt, "print only the generated text");
  add_drafting_flags(cmd, args->drafting);
  add_grammar_flags(cmd, args->grammar);
  cmd->callback([args, cmd, &result] {
    check_exact_flags(cmd, args->engine.exact);
    check_drafting_flags(args->drafting);
    check_pipeline_flags(args->engine.pipeline, args->drafting);
    if (result.dry_run) return;
    result.exit_code = run(*args);
  });
}

}  // namespace okapi::cli
