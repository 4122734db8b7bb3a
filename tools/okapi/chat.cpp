// okapi chat [-m MODEL] [--system TEXT] [--chat-template-file F] [--allow-special-in-content] [-n N]
//            [-c CTX] [-t T] [sampling flags] [--lookup N | --draft-model F | --draft-skip LIST] [--draft-max N]
// An interactive terminal chat: each line read from stdin is a user message; the reply streams to
// stdout. The conversation is rendered by the model's chat template (as okapi serve renders it)
// and decoded on one scheduler slot, so each turn reuses the cached conversation before it.
// Control tokens are read in the template's own text only: "<|im_start|>" or "</s>" typed in a
// message stays text (--allow-special-in-content reads them as before).
// Ctrl-C stops a reply; /help lists the commands, /reset starts over, /exit or end of input quits.
// When the context is full (a reply cut off, or a conversation that no longer fits) it says so.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "common_flags.hpp"
#include "core/error.hpp"
#include "runtime/cancel.hpp"
#include "runtime/chat_prompt.hpp"
#include "runtime/default_model.hpp"
#include "runtime/engine.hpp"
#include "runtime/drafters.hpp"
#include "runtime/scheduler.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct ChatArgs {
  std::string model;
  ModelSourceFlags source;  // --hf-repo / --model-url when -m is not given
  std::string system;
  std::string template_file;
  int64_t n_predict = -1;
  int64_t n_ctx = runtime::kContextNotGiven;
  int64_t batch_size = 512;
  int64_t seed = -1;
  bool allow_special_in_content = false;
  runtime::EngineOptions engine;
  sample::SamplerConfig sampling;
  runtime::DrafterOptions drafting;
  GrammarFlags grammar;
};

constexpr const char* kHelp =
    "commands:\n"
    "  /help          this list\n"
    "  /reset         start a new conversation (the --system message is kept)\n"
    "  /exit, /quit   leave (so does end of input, Ctrl-D)\n"
    "Ctrl-C stops a reply. Any other line is sent to the model as your message.\n";

struct Reply {
  std::string text;
  std::optional<runtime::StopReason> stop;
};

// Streams one reply to stdout; returns its text. Ctrl-C cancels it (the text so far is kept).
Reply stream_reply(runtime::Job& job) {
  Reply result;
  std::string& reply = result.text;
  std::vector<runtime::SequenceEvent> events;
  bool cancelled = false;
  while (job.take_events(events, std::chrono::milliseconds(50))) {
    for (const auto& e : events) {
      if (e.stop && *e.stop == runtime::StopReason::Error) throw Error("generation failed: " + e.error);
      if (e.stop) result.stop = *e.stop;
      std::fwrite(e.text.data(), 1, e.text.size(), stdout);
      reply += e.text;
    }
    std::fflush(stdout);
    events.clear();
    if (!cancelled && runtime::interrupt_requested()) {
      job.cancel();
      cancelled = true;
    }
  }
  runtime::clear_interrupt();
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return result;
}

// A line of one word starting with '/' (not a message, even if no command has that name).
bool looks_like_command(const std::string& line) {
  return line.size() > 1 && line[0] == '/' && line.find_first_of(" \t") == std::string::npos;
}

int chat(ChatArgs args) {
  if (args.seed >= 0) args.sampling.seed = static_cast<uint32_t>(args.seed);
  args.sampling.validate();
  args.model = resolve_model_source(args.model, args.source);
  const std::string model_path = args.model.empty() ? runtime::default_model_path().string() : args.model;
  const auto grammar = load_grammar(args.grammar);  // before loading the model: a bad grammar fails fast
  const auto engine = runtime::Engine::load(model_path, args.engine);
  runtime::require_text_generation(*engine, "use `okapi embed -m MODEL` for its vectors");
  const runtime::ChatPrompt prompt(*engine, args.template_file, args.allow_special_in_content);
  std::optional<runtime::DrafterFactory> drafters;
  if (args.drafting.enabled()) drafters.emplace(args.drafting, *engine, args.engine);
  runtime::SchedulerOptions so;
  so.n_ctx_per_slot = engine->resolve_ctx(args.n_ctx);
  so.batch_size = args.batch_size;
  so.drafters = drafters ? &*drafters : nullptr;
  runtime::Scheduler scheduler(*engine, so);
  runtime::install_interrupt_handler();

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  const auto reset = [&] {
    messages = nlohmann::ordered_json::array();
    if (!args.system.empty()) messages.push_back({{"role", "system"}, {"content", args.system}});
  };
  reset();
  std::fprintf(stderr, "okapi: chat with %s (template: %s, context: %lld tokens). /help lists the commands, /exit or Ctrl-D quits.\n",
               model_path.c_str(), prompt.origin().c_str(), static_cast<long long>(so.n_ctx_per_slot));
  std::string line;
  while (true) {
    std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      std::fputs("okapi: a new conversation.\n", stderr);
      continue;
    }
    if (line == "/help" || line == "/?") {
      std::fputs(kHelp, stderr);
      continue;
    }
    if (looks_like_command(line)) {
      std::fprintf(stderr, "okapi: unknown command %s; /help lists the commands\n", line.c_str());
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    jinja::RenderInputs inputs;
    inputs.messages = messages;
    runtime::SequenceRequest request;
    try {
      request.prompt = prompt.tokens(inputs);
    } catch (const jinja::TemplateError& e) {
      messages.erase(messages.size() - 1);
      std::fprintf(stderr, "okapi: error: the chat template refused this conversation: %s\n", e.what());
      continue;
    }
    if (static_cast<int64_t>(request.prompt.size()) >= so.n_ctx_per_slot) {
      messages.erase(messages.size() - 1);
      std::fprintf(stderr,
                   "okapi: the context is full: the conversation with this message is %zu tokens, the context holds "
                   "%lld (-c). /reset starts a new conversation.\n",
                   request.prompt.size(), static_cast<long long>(so.n_ctx_per_slot));
      continue;
    }
    request.sampling = args.sampling;
    request.max_tokens = args.n_predict;
    request.constraint.grammar = grammar;
    const auto job = scheduler.submit(std::move(request));
    const Reply reply = stream_reply(*job);
    messages.push_back({{"role", "assistant"}, {"content", reply.text}});
    // Only the end of the context is news (not -n).
    if (reply.stop == runtime::StopReason::ContextFull) {
      std::fprintf(stderr,
                   "okapi: the context is full (%lld tokens, -c): the reply was cut off. /reset starts a new "
                   "conversation.\n",
                   static_cast<long long>(so.n_ctx_per_slot));
    }
  }
  return 0;
}

}  // namespace

void register_chat(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<ChatArgs>();
  args->engine.threads = default_threads();
  auto* cmd = app.add_subcommand("chat", "interactive chat in the terminal, through the model's chat template");
  add_model_source_flags(cmd, args->source, cmd->add_option("-m,--model", args->model, "GGUF model (default: the bundled stories260K)"));
  cmd->add_option("--system", args->system, "system message at the start of the conversation");
  cmd->add_option("--chat-template-file", args->template_file, "Jinja chat template to use instead of the model's")
      ->check(non_empty());
  cmd->add_option("-n,--n-predict", args->n_predict, "most tokens a reply (-1: until end or full context)")
      ->capture_default_str()
      ->check(in_range(-1, kUnbounded));
  cmd->add_flag("--allow-special-in-content", args->allow_special_in_content,
               "read control tokens (e.g. <|im_start|>, </s>) in what you type too, as older okapi did; by default "
               "only the chat template's own are control tokens, so a message cannot forge a turn");
  add_ctx_flag(cmd, args->n_ctx, "context length (0: the model's trained context; default: that, at most 4096)");
  add_threads_flag(cmd, args->engine.threads);
  add_batch_flag(cmd, args->batch_size, "prompt tokens per forward pass");
  add_sampling_flags(cmd, args->sampling);
  add_seed_flag(cmd, args->seed);
  add_cache_type_flags(cmd, args->engine.cache);
  add_drafting_flags(cmd, args->drafting);
  add_grammar_flags(cmd, args->grammar);
  cmd->callback([args, &result] {
    check_drafting_flags(args->drafting);
    if (result.dry_run) return;
    result.exit_code = chat(*args);
  });
}

}  // namespace okapi::cli
