// okapi chat [-m MODEL] [--system TEXT] [--chat-template-file F] [-n N] [-c CTX] [-t T] [sampling flags]
// An interactive terminal chat: each line read from stdin is a user message; the reply streams to
// stdout. The conversation is rendered by the model's chat template (as okapi serve renders it)
// and decoded on one scheduler slot, so each turn reuses the cached conversation before it.
// Ctrl-C stops a reply; /reset starts over; /exit or end of input quits.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "common_flags.hpp"
#include "core/error.hpp"
#include "runtime/cancel.hpp"
#include "runtime/chat_prompt.hpp"
#include "runtime/default_model.hpp"
#include "runtime/engine.hpp"
#include "server/scheduler.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct ChatArgs {
  std::string model;
  std::string system;
  std::string template_file;
  int64_t n_predict = -1;
  int64_t n_ctx = runtime::kContextNotGiven;
  int64_t batch_size = 512;
  int64_t seed = -1;
  runtime::EngineOptions engine;
  sample::SamplerConfig sampling;
};

// Streams one reply to stdout; returns its text. Ctrl-C cancels it (the text so far is kept).
std::string stream_reply(server::Job& job) {
  std::string reply;
  std::vector<server::JobEvent> events;
  bool cancelled = false;
  while (job.take_events(events, std::chrono::milliseconds(50))) {
    for (const auto& e : events) {
      if (e.finish && *e.finish == server::FinishReason::Error) throw Error("generation failed: " + e.error);
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
  return reply;
}

int chat(ChatArgs args) {
  if (args.seed >= 0) args.sampling.seed = static_cast<uint32_t>(args.seed);
  args.sampling.validate();
  const std::string model_path = args.model.empty() ? runtime::default_model_path().string() : args.model;
  const auto engine = runtime::Engine::load(model_path, args.engine);
  const runtime::ChatPrompt prompt(*engine, args.template_file);
  server::SchedulerOptions so;
  so.n_slots = 1;
  so.n_ctx_per_slot = engine->resolve_ctx(args.n_ctx);
  so.batch_size = args.batch_size;
  server::Scheduler scheduler(*engine, so);
  runtime::install_interrupt_handler();

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  const auto reset = [&] {
    messages = nlohmann::ordered_json::array();
    if (!args.system.empty()) messages.push_back({{"role", "system"}, {"content", args.system}});
  };
  reset();
  std::fprintf(stderr, "okapi: chat with %s (template: %s). /reset starts over, /exit or Ctrl-D quits.\n",
               model_path.c_str(), prompt.origin().c_str());
  std::string line;
  while (true) {
    std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    chat::RenderInputs inputs;
    inputs.messages = messages;
    server::JobRequest request;
    try {
      request.prompt = prompt.tokenize(prompt.render(inputs));
    } catch (const chat::TemplateError& e) {
      messages.erase(messages.size() - 1);
      std::fprintf(stderr, "okapi: error: the chat template refused this conversation: %s\n", e.what());
      continue;
    }
    if (static_cast<int64_t>(request.prompt.size()) >= so.n_ctx_per_slot) {
      messages.erase(messages.size() - 1);
      std::fprintf(stderr, "okapi: error: the conversation (%zu tokens) no longer fits the context (-c %lld); /reset\n",
                   request.prompt.size(), static_cast<long long>(so.n_ctx_per_slot));
      continue;
    }
    request.sampling = args.sampling;
    request.max_tokens = args.n_predict;
    const std::string reply = stream_reply(*scheduler.submit(std::move(request)));
    messages.push_back({{"role", "assistant"}, {"content", reply}});
  }
  return 0;
}

}  // namespace

void register_chat(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<ChatArgs>();
  args->engine.threads = default_threads();
  auto* cmd = app.add_subcommand("chat", "interactive chat in the terminal, through the model's chat template");
  cmd->add_option("-m,--model", args->model, "GGUF model (default: the bundled stories260K)");
  cmd->add_option("--system", args->system, "system message at the start of the conversation");
  cmd->add_option("--chat-template-file", args->template_file, "Jinja chat template to use instead of the model's")
      ->check(non_empty());
  cmd->add_option("-n,--n-predict", args->n_predict, "most tokens a reply (-1: until end or full context)")
      ->capture_default_str()
      ->check(in_range(-1, kUnbounded));
  add_ctx_flag(cmd, args->n_ctx, "context length (0: the model's trained context; default: that, at most 4096)");
  add_threads_flag(cmd, args->engine.threads);
  add_batch_flag(cmd, args->batch_size, "prompt tokens per forward pass");
  add_sampling_flags(cmd, args->sampling);
  add_seed_flag(cmd, args->seed);
  add_cache_type_flags(cmd, args->engine.cache_type_k, args->engine.cache_type_v, args->engine.kv_rotate);
  cmd->callback([args, &result] {
    if (result.dry_run) return;
    result.exit_code = chat(*args);
  });
}

}  // namespace okapi::cli
