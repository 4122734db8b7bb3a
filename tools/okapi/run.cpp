// okapi run [-m MODEL] (-p PROMPT | -f FILE) [-e] [-n N] [-c CTX] [-t T] [-b BATCH] [sampling flags] [-ctk/-ctv]
//           [--json] [--no-display-prompt] [--exact [--exact-attention ntt|direct]]
//           [--lookup N | --draft-model FILE | --draft-skip LIST] [--draft-max N] [--draft-min N] [--draft-p-min P]
// Generates text, streaming it to stdout as it is produced (prompt first, as llama-cli does);
// timings go to stderr. Without -m, the repository's stories260K model; without -p, "Once upon a
// time". Ctrl-C stops the generation, prints the timings so far and exits with code 130.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_output.hpp"
#include "runtime/cancel.hpp"
#include "runtime/default_model.hpp"
#include "runtime/drafters.hpp"
#include "runtime/engine.hpp"
#include "runtime/session.hpp"
#include "exact_flags.hpp"
#include "common_flags.hpp"
#include "sample/sampler.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

constexpr int kInterruptedExitCode = 130;  // the shell's code for "ended by SIGINT"

struct RunArgs {
  std::string model;
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
  // Speculative decoding: one drafter at most.
  int lookup = 0;
  std::string draft_model;
  std::string draft_skip;
  int draft_max = 16;
  int draft_min = 0;
  float draft_p_min = 0.0f;  // llama.cpp de3ff81's default (older releases: 0.75)
};

void print_timings(const runtime::Timings& t, runtime::StopReason stop, std::string_view drafter) {
  std::fprintf(stderr,
               "\nokapi: load %.2f ms | prompt %lld tokens in %.2f ms, %.1f tok/s | generation %lld tokens in "
               "%.2f ms, %.1f tok/s | stop: %s\n",
               t.load_seconds * 1e3, static_cast<long long>(t.prompt_tokens), t.prompt_seconds * 1e3,
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

// The drafter the flags ask for (null: none), with the draft model's engine in `draft_engine`.
std::unique_ptr<runtime::Drafter> make_drafter(const RunArgs& args, runtime::Engine& target, kv::KvStore& target_kv,
                                               std::unique_ptr<runtime::Engine>& draft_engine, uint32_t seed) {
  runtime::ModelDrafterOptions options;
  options.p_min = args.draft_p_min;
  options.seed = seed ^ 0x9e3779b9u;
  if (args.lookup > 0) return std::make_unique<runtime::LookupDrafter>(args.lookup);
  if (!args.draft_model.empty()) {
    draft_engine = runtime::Engine::load_sharing_threads(args.draft_model, args.engine, target);
    runtime::check_draft_vocabulary(target, *draft_engine);
    auto kv = draft_engine->make_kv(target_kv.n_ctx(), {.batch = 512});
    return std::make_unique<runtime::ModelDrafter>(*draft_engine, std::move(kv), "draft model", options);
  }
  if (!args.draft_skip.empty()) {
    options.skip_layers = runtime::parse_layer_list(args.draft_skip, target.hparams().n_layer);
    if (!target.model().can_skip_layers())
      throw_error("--draft-skip: the {} architecture cannot skip layers (llama, qwen2, qwen3 and bitnet can)",
                  target.hparams().arch);
    return std::make_unique<runtime::ModelDrafter>(target, target_kv, "layer skip " + args.draft_skip, options);
  }
  return nullptr;
}

// The prompt's tokens, or an error as soon as they are known not to fit in `n_ctx` cells. A long
// prompt is first tokenized by prefixes (16 bytes a cell, then twice, four times that ...): cutting
// the text changes its tokens only next to the cut, so a prefix with kCutSlack tokens more than the
// context proves the whole does not fit, and a 50 MB file is refused after ~70 KB of it instead of
// after all of it. A prompt that fits is tokenized whole, as it always was.
std::vector<tokenizer::TokenId> tokenize_within_context(const runtime::Session& session, std::string_view prompt,
                                                        int64_t n_ctx) {
  constexpr int64_t kCutSlack = 64;
  const auto limit = static_cast<size_t>(n_ctx + kCutSlack);
  for (size_t prefix = 16 * limit; prefix < prompt.size(); prefix *= 2) {
    size_t cut = prefix;
    while (cut > 0 && (static_cast<unsigned char>(prompt[cut]) & 0xC0) == 0x80) --cut;  // a UTF-8 character's start
    const size_t n = session.tokenize_prompt(prompt.substr(0, cut)).size();
    if (n > limit)
      throw_error("the prompt has more than {} tokens (its first {} of {} bytes alone are {}) but the context holds "
                  "only {} (-c {}); use a larger -c",
                  n_ctx, cut, prompt.size(), n, n_ctx, n_ctx);
  }
  return session.tokenize_prompt(prompt);
}

int run(RunArgs args) {
  if (args.seed >= 0) args.sampling.seed = static_cast<uint32_t>(args.seed);
  args.sampling.validate();
  if (!args.prompt_file.empty()) args.prompt = read_input_file(args.prompt_file, "prompt file");
  if (args.escape) args.prompt = process_escapes(args.prompt);
  const std::string model_path = args.model.empty() ? runtime::default_model_path().string() : args.model;
  const auto engine = runtime::Engine::load(model_path, args.engine);
  const auto kv = engine->make_kv(args.n_ctx, {.batch = args.batch_size});
  runtime::Session session(*engine, *kv);
  const auto prompt = tokenize_within_context(session, args.prompt, kv->n_ctx());
  sample::Sampler sampler(args.sampling);
  std::unique_ptr<runtime::Engine> draft_engine;
  const auto drafter = make_drafter(args, *engine, *kv, draft_engine, sampler.seed());
  runtime::install_interrupt_handler();
  runtime::GenerateOptions options;
  options.n_predict = args.n_predict;
  options.batch_size = args.batch_size;
  options.ignore_eos = args.ignore_eos;
  options.drafter = drafter.get();
  options.draft_max = args.draft_max;
  options.draft_min = args.draft_min;
  options.after_prefill = [&] {
    if (args.json || args.no_display_prompt) return;
    std::fwrite(args.prompt.data(), 1, args.prompt.size(), stdout);
    std::fflush(stdout);
  };
  const auto on_text = [&](std::string_view piece) {
    if (args.json) return;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  const runtime::GenerationResult result = session.generate(prompt, sampler, options, on_text);
  const runtime::Timings& t = result.timings;
  if (args.json) {
    nlohmann::ordered_json json;
    json["model"] = model_path;
    json["architecture"] = engine->hparams().arch;
    json["prompt"] = args.prompt;
    json["prompt_tokens"] = prompt;
    json["text"] = result.text;
    json["tokens"] = result.tokens;
    json["stop"] = runtime::to_string(result.stop);
    json["n_ctx"] = kv->n_ctx();
    json["threads"] = engine->threads();
    json["seed"] = sampler.seed();
    json["cache_type_k"] = std::string(args.engine.exact ? kv->type_name() : args.engine.cache.k.name());
    json["cache_type_v"] = std::string(args.engine.exact ? kv->type_name() : args.engine.cache.v.name());
    json["exact"] = args.engine.exact;
    json["load_ms"] = t.load_seconds * 1e3;
    json["prompt_ms"] = t.prompt_seconds * 1e3;
    json["prompt_tokens_per_second"] = t.prompt_tokens_per_second();
    json["generated_tokens"] = t.generated_tokens;
    json["generation_ms"] = t.generation_seconds * 1e3;
    json["generation_tokens_per_second"] = t.generation_tokens_per_second();
    json["decode_passes"] = t.decode_passes;
    if (drafter) {
      json["drafter"] = drafter->name();
      json["n_drafted"] = t.drafted_tokens;
      json["n_accepted"] = t.accepted_tokens;
      json["acceptance_rate"] = t.acceptance_rate();
      json["draft_ms"] = t.draft_seconds * 1e3;
      json["draft_prompt_ms"] = t.draft_prompt_seconds * 1e3;
    }
    std::printf("%s\n", dump_json(std::move(json)).c_str());
  }
  std::fflush(stdout);
  print_timings(t, result.stop, drafter ? drafter->name() : std::string_view());
  return result.stop == runtime::StopReason::Interrupted ? kInterruptedExitCode : 0;
}

}  // namespace

void register_run(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<RunArgs>();
  args->engine.threads = default_threads();
  auto* cmd = app.add_subcommand("run", "generate text from a prompt (streams to stdout, timings to stderr)");
  cmd->add_option("-m,--model", args->model, "GGUF model (default: the bundled stories260K)");
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
  cmd->add_flag("--json", args->json, "print one JSON record (text, tokens, timings) instead of streaming");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating after end-of-generation tokens");
  cmd->add_flag("--no-display-prompt", args->no_display_prompt, "print only the generated text");
  auto* lookup = cmd->add_option("--lookup", args->lookup,
                                  "speculative decoding with prompt lookup: draft what followed the longest earlier "
                                  "match of the last N tokens")
                      ->check(in_range(1, 64));
  auto* draft_model = cmd->add_option("--draft-model", args->draft_model,
                                      "speculative decoding with a draft model of the same vocabulary (also -md; a smaller model, "
                                      "or one made by okapi compress)")
                          ->check(non_empty());
  auto* draft_skip = cmd->add_option("--draft-skip", args->draft_skip,
                                     "speculative decoding drafting with the model itself, these layers left out "
                                     "(0-based, e.g. 2,4-6)")
                         ->check(non_empty());
  lookup->excludes(draft_model)->excludes(draft_skip);
  draft_model->excludes(lookup)->excludes(draft_skip);
  draft_skip->excludes(lookup)->excludes(draft_model);
  cmd->add_option("--draft-max,--draft", args->draft_max, "most tokens drafted a round")
      ->capture_default_str()
      ->check(in_range(1, 256));
  cmd->add_option("--draft-min", args->draft_min, "fewest drafted tokens worth verifying (fewer: decode plainly)")
      ->capture_default_str()
      ->check(in_range(0, 256));
  cmd->add_option("--draft-p-min", args->draft_p_min,
                  "a model drafter stops when its pick's probability is below this")
      ->capture_default_str()
      ->check(in_range(0, 1));
  cmd->callback([args, cmd, &result] {
    check_exact_flags(cmd, args->engine.exact);
    if (args->draft_min > args->draft_max)
      throw_usage_error("--draft-min {} is more than --draft-max {}", args->draft_min, args->draft_max);
    if (result.dry_run) return;
    result.exit_code = run(*args);
  });
}

}  // namespace okapi::cli
