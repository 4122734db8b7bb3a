#include "server/server.hpp"
#include "server/server_state.hpp"

#include <algorithm>
#include <cctype>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <malloc.h>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>

#include "chat/chat_format.hpp"
#include "core/error.hpp"
#include "grammar/grammar.hpp"
#include "grammar/json_schema.hpp"
#include "jinja/chat_template.hpp"
#include "runtime/chat_prompt.hpp"
#include "runtime/drafters.hpp"
#include "runtime/embedder.hpp"
#include "runtime/scheduler.hpp"
#include "server/agent_params.hpp"
#include "server/anthropic_api.hpp"
#include "server/api_error.hpp"
#include "server/api_key.hpp"
#include "server/build_info.hpp"
#include "server/chat_page.hpp"
#include "server/embedding_queue.hpp"
#include "server/embeddings.hpp"
#include "server/http_server.hpp"
#include "server/metrics.hpp"
#include "server/request_params.hpp"
#include "server/responses.hpp"

namespace okapi::server {

namespace {

std::atomic<int> g_signals{0};
extern "C" void on_stop_signal(int) { g_signals.fetch_add(1); }

void install_stop_handlers() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  // A client that goes away mid-write must not kill the server.
  std::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

void send_json(Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(to_text(body), "application/json; charset=utf-8");
}

void send_error(Response& res, const ApiError& e) {
  if (e.status() == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status(), e.body());
}

Response json_error_response(int status, const std::string& message) {
  Response res;
  send_json(res, status, error_body(status, status_type(status), message));
  return res;
}

const char* status_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

namespace {

// Renders a conversation with a tool call whose arguments are an object: a template that writes
// them out as JSON ("probe_arg") wants objects; one that prints Python's repr ('probe_arg') wants text.
bool template_wants_object_arguments(const jinja::ChatTemplate& chat_template) {
  jinja::RenderInputs inputs;
  inputs.messages = Json::array(
      {{{"role", "user"}, {"content", "hi"}},
       {{"role", "assistant"},
        {"content", ""},
        {"tool_calls", Json::array({{{"id", "call_1"},
                                     {"type", "function"},
                                     {"function", {{"name", "probe_tool"}, {"arguments", {{"probe_arg", 1}}}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "call_1"}, {"name", "probe_tool"}, {"content", "ok"}}});
  inputs.add_generation_prompt = true;
  try {
    return chat_template.render(inputs).find("\"probe_arg\"") != std::string::npos;
  } catch (const std::exception&) {
    return false;
  }
}


// --alias a,b: the aliases in sorted order (the first is the model's id, as llama-server's std::set).
std::vector<std::string> alias_list(const std::string& alias) {
  std::vector<std::string> aliases;
  for (size_t begin = 0; begin <= alias.size();) {
    size_t end = alias.find(',', begin);
    if (end == std::string::npos) end = alias.size();
    if (end > begin) aliases.push_back(alias.substr(begin, end - begin));
    begin = end + 1;
  }
  std::sort(aliases.begin(), aliases.end());
  aliases.erase(std::unique(aliases.begin(), aliases.end()), aliases.end());
  return aliases;
}

}  // namespace

void ServerState::load() {
  engine_ = runtime::Engine::load(options_.model_path, options_.engine);
  const auto aliases = alias_list(options_.alias);
  model_id_ = aliases.empty() ? std::filesystem::path(options_.model_path).filename().string() : aliases.front();
  if (options_.embeddings || !engine_->model().generates_text()) {
    load_embeddings();
    loaded_at_ = static_cast<int64_t>(std::time(nullptr));
    ready_.store(true);
    return;
  }
  if (options_.pooling)
    throw_usage_error("--pooling {} pools embeddings: give --embeddings too (or --rerank)",
                      model::pooling_name(*options_.pooling));
  const int64_t total = engine_->resolve_ctx(options_.n_ctx);
  const int64_t per_slot = options_.kv_unified ? total : total / options_.n_slots;
  if (per_slot < 1)
    throw_error_for(Setting::Slots, "a context of {} tokens cannot be shared by {} slots: each needs at least one cell",
                    total, options_.n_slots);
  chat_ = std::make_unique<runtime::ChatPrompt>(runtime::ChatPrompt::chosen(
      *engine_, runtime::ChatTemplateChoice{options_.chat_template_file, options_.chat_template, options_.jinja},
      options_.allow_special_in_content));
  chat_format_ = chat::detect_format(chat_->chat_template());
  // The vocabulary's trie for grammar masks (~60 ms and ~30 MB for 152k tokens), built now so
  // that the first constrained request does not wait for it.
  engine_->token_index();
  object_arguments_ = template_wants_object_arguments(chat_->chat_template());
  if (options_.drafting.enabled()) drafters_.emplace(options_.drafting, *engine_, options_.engine);
  runtime::SchedulerOptions so;
  so.n_slots = options_.n_slots;
  so.n_ctx_per_slot = per_slot;
  so.batch_size = options_.batch_size;
  so.max_queue = options_.max_queue;
  so.slot_prompt_similarity = options_.slot_prompt_similarity;
  so.drafters = drafters_ ? &*drafters_ : nullptr;
  so.context_setting = Setting::SlotContext;  // each slot's context is what meets the trained context
  scheduler_ = std::make_unique<runtime::Scheduler>(*engine_, so);
  loaded_at_ = static_cast<int64_t>(std::time(nullptr));
  ready_.store(true);
}

std::string ServerState::serving() const {
  if (!embeddings_mode()) return fmt::format("({} slot{})", options_.n_slots, options_.n_slots == 1 ? "" : "s");
  return fmt::format("{} (pooling {}, {} value{} per {}, inputs of at most {} tokens){}",
                     embedder_->pooling() == model::Pooling::Rank ? "reranking" : "embeddings",
                     model::pooling_name(embedder_->pooling()), embedder_->width(), embedder_->width() == 1 ? "" : "s",
                     embedding_limits_.per_token ? "token" : "input", embedding_limits_.max_input_tokens,
                     options_.embeddings ? "" : ": this model does not generate text");
}

bool ServerState::authorized(const Request& req) const { return api_key_accepted(req, options_.api_keys); }

void ServerState::load_embeddings() {
  const model::Model& model = engine_->model();
  const auto pooling = options_.pooling ? options_.pooling : model.file_pooling();
  if (pooling == model::Pooling::Rank && model.rank_outputs() == 0)
    throw_error_for(Setting::Model,
                    "{}: rank pooling (--rerank) needs a cross-encoder reranker with a classifier head (the cls / "
                    "cls.output tensors); this {} model has none: serve it with --embeddings",
                    options_.model_path, engine_->hparams().arch);
  runtime::EmbedderOptions eo;
  eo.pooling = options_.pooling;
  // As llama-server: with embeddings a pass is one ubatch (n_batch = n_ubatch when larger).
  eo.batch_tokens = std::min(options_.batch_size, options_.ubatch_size);
  eo.max_input_tokens = engine_->resolve_ctx(options_.n_ctx);
  embedder_ = std::make_unique<runtime::Embedder>(*engine_, eo);

  EmbeddingLimits& limits = embedding_limits_;
  limits.n_vocab = model.n_vocab();
  limits.max_input_tokens = embedder_->max_input_tokens() > 0 ? embedder_->max_input_tokens() : eo.max_input_tokens;
  limits.max_input_reason = options_.n_ctx == runtime::kContextNotGiven || options_.n_ctx == 0
                               ? fmt::format("the model's context of {} tokens", limits.max_input_tokens)
                               : fmt::format("the context, -c {}", limits.max_input_tokens);
  // As llama-server caps a slot's context: beyond it a bert's absolute positions run out.
  if (const int64_t trained = engine_->hparams().n_ctx_train; trained > 0 && limits.max_input_tokens > trained) {
    limits.max_input_tokens = trained;
    limits.max_input_reason = fmt::format("the model's trained context of {} tokens", trained);
  }
  // A non-causal model sees an input whole: it must fit one pass.
  if (!model.causal_attention() && eo.batch_tokens < limits.max_input_tokens) {
    limits.max_input_tokens = eo.batch_tokens;
    limits.max_input_reason = fmt::format("a forward pass, -b / -ub {}", eo.batch_tokens);
  }
  limits.max_inputs = options_.embd_max_inputs;
  limits.width = embedder_->width();
  limits.per_token = embedder_->pooling() == model::Pooling::None;
  limits.max_bytes_per_token = engine_->tokenizer().max_bytes_per_token();
  limits.default_normalize = options_.embd_normalize;
  const tokenizer::Vocab& vocab = engine_->tokenizer().vocab();
  for (const TokenId end : {vocab.eos, vocab.sep})
    if (end != tokenizer::kNoToken) limits.end_tokens.push_back(end);
  embedding_queue_ = std::make_unique<EmbeddingQueue>(*embedder_, eo.batch_tokens, eo.max_inputs_per_pass,
                                                      static_cast<size_t>(options_.n_slots) + options_.max_queue);
}

void ServerState::refuse_generation() const {
  throw ApiError(501, "not_supported_error",
                 embedder_->pooling() == model::Pooling::Rank
                     ? "This server does not support completions. Start it without `--reranking`"
                     : "This server does not support completions. Start it without `--embeddings`");
}

void ServerState::await_embeddings(Response& res, std::vector<std::vector<int32_t>> inputs,
                                   std::function<void(Response&, std::vector<runtime::EmbeddingOutput>&)> finish) {
  std::shared_ptr<EmbeddingJob> job;
  try {
    job = embedding_queue_->submit(std::move(inputs));
  } catch (const EmbeddingQueueFull& e) {
    throw ApiError(503, "unavailable_error", e.what());
  }
  auto in_flight = std::make_shared<InFlight>(in_flight_);
  // The worker thread embeds; this one waits, checking between waits that the client is still
  // there (a client that goes away cancels what is not started), then writes the response.
  res.await = [job, in_flight, finish = std::move(finish)](Response& r) {
    if (!job->wait(std::chrono::milliseconds(100))) return false;
    if (!job->error().empty()) {
      send_error(r, ApiError(500, "server_error", job->error()));
      return true;
    }
    finish(r, job->outputs());
    return true;
  };
  res.on_stream_end = [job](bool completed) {
    if (!completed) job->cancel();
  };
}

void ServerState::handle_embeddings(const Request& req, Response& res, bool openai_route) {
  if (!embeddings_mode())
    throw ApiError(501, "not_supported_error", "This server does not support embeddings. Start it with `--embeddings`");
  if (draining()) throw ApiError(503, "unavailable_error", "the server is shutting down");
  const Json body = parse_body(req.body);
  auto request = std::make_shared<EmbeddingsRequest>(parse_embeddings_request(
      body, openai_route, embedding_limits_, [this](std::string_view text) { return embedder_->tokenize(text); }));
  const bool per_token = embedding_limits_.per_token;
  await_embeddings(res, std::move(request->inputs),
                   [request, per_token, model = model_id_](Response& r, std::vector<runtime::EmbeddingOutput>& outputs) {
                     // Pooled vectors are normalized (embd_normalize), per-token ones not, as llama-server.
                     if (!per_token)
                       for (auto& o : outputs) runtime::normalize_embedding(o.values, request->normalize);
                     r.status = 200;
                     r.set_content(embeddings_response(*request, outputs, per_token, model),
                                   "application/json; charset=utf-8");
                   });
}

void ServerState::handle_rerank(const Request& req, Response& res) {
  if (!embeddings_mode() || embedder_->pooling() != model::Pooling::Rank)
    throw ApiError(501, "not_supported_error", "This server does not support reranking. Start it with `--reranking`");
  if (draining()) throw ApiError(503, "unavailable_error", "the server is shutting down");
  const Json body = parse_body(req.body);
  auto request = std::make_shared<RerankRequest>(
      parse_rerank_request(body, embedding_limits_, [this](std::string_view query, std::string_view document) {
        return embedder_->tokenize_rerank(query, document);
      }));
  await_embeddings(res, std::move(request->inputs),
                   [request, model = model_id_](Response& r, std::vector<runtime::EmbeddingOutput>& outputs) {
                     send_json(r, 200, rerank_response(*request, outputs, model));
                   });
}

void ServerState::throw_context_exceeded(bool chat, int64_t n_tokens, bool at_least) const {
  const int64_t n_ctx = scheduler_->options().n_ctx_per_slot;
  // llama-server's type and fields (n_prompt_tokens, n_ctx), with OpenAI's code.
  throw ApiError(400, "exceed_context_size_error",
                 fmt::format("This model's maximum context length is {} tokens. However, your {} resulted in {}{} tokens.",
                             n_ctx, chat ? "messages" : "prompt", at_least ? "at least " : "", n_tokens),
                 chat ? "messages" : "prompt", "context_length_exceeded")
      .with("n_prompt_tokens", n_tokens)
      .with("n_ctx", n_ctx);
}

void ServerState::refuse_far_beyond_context(size_t prompt_bytes, bool chat) const {
  const size_t per_token = engine_->tokenizer().max_bytes_per_token();
  if (per_token == 0) return;
  const size_t at_least = prompt_bytes / per_token;
  if (static_cast<int64_t>(at_least) >= scheduler_->options().n_ctx_per_slot)
    throw_context_exceeded(chat, static_cast<int64_t>(at_least), true);
}

std::vector<TokenId> ServerState::completion_prompt(const Json& body) const {
  const auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw_bad_request("prompt", "'prompt' is required");
  const Json* prompt = &*it;
  // A one-element array is that element (OpenAI's batch form, n = 1).
  if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) prompt = &(*prompt)[0];
  if (prompt->is_string()) {
    refuse_far_beyond_context(prompt->get_ref<const std::string&>().size(), false);
    tokenizer::EncodeOptions encode;
    encode.parse_special = true;
    auto tokens = engine_->tokenizer().encode(prompt->get<std::string>(), encode);
    if (tokens.empty()) throw_bad_request("prompt", "'prompt' has no tokens");
    return tokens;
  }
  if (prompt->is_array() && !prompt->empty()) {
    std::vector<TokenId> tokens;
    for (const auto& t : *prompt) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= engine_->model().n_vocab())
        throw_bad_request("prompt", "'prompt' token ids must be integers in [0, {})", engine_->model().n_vocab());
      tokens.push_back(static_cast<TokenId>(t.get<int64_t>()));
    }
    return tokens;
  }
  throw_bad_request("prompt", "'prompt' must be a non-empty string or array of token ids");
}

namespace {

jinja::RenderInputs render_inputs(const ChatInput& input) {
  jinja::RenderInputs render;
  render.messages = input.messages;
  render.tools = input.tools;
  render.add_generation_prompt = input.add_generation_prompt;
  render.extra = input.template_kwargs;
  return render;
}

// A template's raise_exception or failure is the request's fault: 400.
template <typename F>
auto rendering(F&& f) {
  try {
    return f();
  } catch (const jinja::TemplateRaised& e) {
    throw_bad_request("messages", "{}", e.what());
  } catch (const jinja::TemplateError& e) {
    throw_bad_request("messages", "the chat template cannot render these messages: {}", e.what());
  }
}

}  // namespace

std::string ServerState::render_chat(const ChatInput& input) const {
  return rendering([&] { return chat_->render(render_inputs(input)) + input.continuation; });
}

std::vector<TokenId> ServerState::chat_tokens(const ChatInput& input) const {
  return rendering([&] { return chat_->tokens(render_inputs(input), input.continuation); });
}

Json ServerState::models_json() const {
  Json model;
  model["id"] = model_id_;
  model["aliases"] = alias_list(options_.alias);
  model["tags"] = options_.tags;
  model["object"] = "model";
  model["created"] = loaded_at_;
  model["owned_by"] = "okapi";
  model["meta"] = {{"n_vocab", engine_->model().n_vocab()},
                   {"n_ctx_train", engine_->hparams().n_ctx_train},
                   {"n_embd", engine_->hparams().n_embd},
                   {"n_params", engine_->parameter_count()},
                   {"size", engine_->file_bytes()}};
  if (embeddings_mode()) {
    model["meta"]["pooling"] = model::pooling_name(embedder_->pooling());
    model["meta"]["embedding_dimensions"] = embedder_->width();
  }
  return {{"object", "list"}, {"data", Json::array({model})}};
}

Json ServerState::props() const {
  Json p;
  if (embeddings_mode()) {
    p["default_generation_settings"] = {{"n_ctx", embedding_limits_.max_input_tokens}, {"params", Json::object()}};
    p["total_slots"] = options_.n_slots;
    p["model_alias"] = model_id_;
    p["model_path"] = options_.model_path;
    p["embeddings"] = true;
    p["reranking"] = embedder_->pooling() == model::Pooling::Rank;
    p["pooling"] = model::pooling_name(embedder_->pooling());
    p["embedding_dimensions"] = embedder_->width();
    p["embd_normalize"] = options_.embd_normalize;
    p["max_input_tokens"] = embedding_limits_.max_input_tokens;
    p["max_inputs_per_request"] = embedding_limits_.max_inputs;
    p["n_ctx"] = embedding_limits_.max_input_tokens;
    p["build_info"] = build_info();
    p["is_sleeping"] = false;
    return p;
  }
  p["embeddings"] = false;
  Json settings;
  const auto& s = options_.sampling;
  settings["n_ctx"] = scheduler_->options().n_ctx_per_slot;
  // llama-server's names; samplers okapi lacks (DRY, XTC, mirostat, dynamic temperature) read as off.
  settings["params"] = {{"seed", s.seed},
                        {"temperature", s.temperature},
                        {"dynatemp_range", 0.0},
                        {"dynatemp_exponent", 1.0},
                        {"top_k", s.top_k},
                        {"top_p", s.top_p},
                        {"min_p", s.min_p},
                        {"top_n_sigma", -1.0},
                        {"xtc_probability", 0.0},
                        {"xtc_threshold", 0.1},
                        {"typical_p", s.typical_p},
                        {"repeat_last_n", s.repeat_last_n},
                        {"repeat_penalty", s.repeat_penalty},
                        {"presence_penalty", s.presence_penalty},
                        {"frequency_penalty", s.frequency_penalty},
                        {"dry_multiplier", 0.0},
                        {"mirostat", 0},
                        {"n_keep", 0},
                        {"ignore_eos", false},
                        {"stream", false},
                        {"n_probs", 0},
                        {"min_keep", s.min_keep},
                        {"reasoning_format", chat::reasoning_format_name(options_.reasoning_format)},
                        {"samplers", Json::array({"penalties", "top_k", "typ_p", "top_p", "min_p", "temperature"})}};
  p["default_generation_settings"] = std::move(settings);
  p["total_slots"] = options_.n_slots;
  p["model_alias"] = model_id_;
  p["model_path"] = options_.model_path;
  p["chat_template"] = chat_->source();
  p["chat_template_origin"] = chat_->origin();
  p["bos_token"] = chat_->bos_text();
  p["eos_token"] = chat_->eos_text();
  p["n_ctx"] = scheduler_->options().n_ctx_per_slot * options_.n_slots;
  p["slot_kv_bytes"] = scheduler_->slot_kv_bytes();
  p["speculative"] = drafters_ ? std::string(drafters_->name()) : std::string("none");
  p["endpoint_slots"] = options_.endpoint_slots;
  p["endpoint_metrics"] = options_.metrics;
  p["ui"] = options_.ui;
  p["build_info"] = build_info();
  p["is_sleeping"] = false;
  return p;
}

ChatInput ServerState::chat_input(const Json& body, const AgentParams& agent) const {
  ChatInput input = parse_chat_input(body);
  input.tools = agent.chat.tools;
  // llama.cpp's built-in formats have no place for tools (llama-server refuses them so too).
  if (!options_.jinja && input.tools.is_array() && !input.tools.empty())
    throw_bad_request("tools", "'tools' needs a Jinja chat template: this server was started with --no-jinja");
  // datetime, date_string, functions, --chat-template-kwargs, --reasoning; the request's own over them.
  Json kwargs = template_context(options_.template_defaults, input.tools, chat_->source(), std::time(nullptr));
  for (auto& [key, value] : input.template_kwargs.items()) kwargs[key] = std::move(value);
  input.template_kwargs = std::move(kwargs);
  // Templates read enable_thinking (R1 distills close the block in the prompt without it): true
  // unless a reasoning budget of 0 turns thinking off, as llama-server sets it.
  const int64_t budget = agent.budget_given ? agent.reasoning_budget : options_.reasoning_budget;
  if (!input.template_kwargs.contains("enable_thinking")) input.template_kwargs["enable_thinking"] = budget != 0;
  agent_template_inputs(input);
  return input;
}

void ServerState::agent_template_inputs(ChatInput& input) const {
  if (!object_arguments_) return;
  for (auto& message : input.messages) {
    const auto calls = message.find("tool_calls");
    if (calls == message.end() || !calls->is_array()) continue;
    for (auto& call : *calls) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      Json& fn = call["function"];
      const auto args = fn.find("arguments");
      if (args == fn.end() || !args->is_string()) continue;
      Json parsed = Json::parse(args->get_ref<const std::string&>(), nullptr, false);
      if (!parsed.is_discarded() && parsed.is_object()) *args = std::move(parsed);
    }
  }
}

chat::ChatPlan ServerState::plan_request(const AgentParams& agent, bool chat, const std::string& rendered,
                                        runtime::SequenceRequest& job) const {
  chat::ChatPlan plan;
  const std::string& field = agent.constraint_field.empty() ? std::string("tools") : agent.constraint_field;
  try {
    plan = chat::plan(chat ? chat_format_ : chat::ChatFormat{}, agent.chat, rendered);
  } catch (const grammar::SchemaError& e) {
    throw_bad_request(field, "'{}': the JSON schema cannot be used: {} (keyword '{}')", field, e.what(), e.keyword());
  } catch (const Error& e) {
    throw_bad_request(field, "'{}': {}", field, e.what());
  }
  if (!plan.grammar.empty()) {
    try {
      job.constraint.grammar = grammar::Grammar::parse(plan.grammar);
    } catch (const grammar::GrammarError& e) {
      throw_bad_request(field, "'{}': the grammar cannot be used: {}", field, e.what());
    }
    if (plan.grammar_lazy) {
      job.constraint.triggers = plan.grammar_triggers;
      job.constraint.start_triggers = plan.grammar_start_triggers;
    }
    job.constraint.after_reasoning = plan.grammar_after_reasoning;
  }
  if (chat) {
    job.reasoning.start = plan.parse.reasoning_start;
    job.reasoning.end = plan.parse.reasoning_end;
    job.reasoning.forced_open = plan.parse.thinking_forced_open;
    job.reasoning.budget = agent.budget_given ? agent.reasoning_budget : options_.reasoning_budget;
    job.reasoning.budget_message = options_.reasoning_budget_message;
    const tokenizer::Vocab& vocab = engine_->tokenizer().vocab();
    for (const auto& text : plan.preserved_tokens) {
      const TokenId id = vocab.find(text);
      if (id != tokenizer::kNoToken) job.preserved_tokens.push_back(id);
    }
    // The reasoning markers reach the parser too.
    for (const auto* marker : {&plan.parse.reasoning_start, &plan.parse.reasoning_end}) {
      if (marker->empty()) continue;
      const TokenId id = vocab.find(*marker);
      if (id != tokenizer::kNoToken) job.preserved_tokens.push_back(id);
    }
  }
  for (const auto& stop : plan.additional_stops) job.stop.push_back(stop);
  return plan;
}

chat::ChatPlan ServerState::plan_chat(const Json& body, const AgentParams& agent, runtime::SequenceRequest& job) const {
  ChatInput input = chat_input(body, agent);
  std::string rendered = render_chat(input);
  // A large conversation is refused before it is tokenized when it cannot fit (a smaller one gets
  // the exact count below). The rendered size, not the messages serialized again to measure them.
  if (rendered.size() > kPrecheckPromptBytes) refuse_far_beyond_context(rendered.size(), true);
  AgentParams planned = agent;
  if (const auto it = input.template_kwargs.find("enable_thinking"); it != input.template_kwargs.end() && it->is_boolean())
    planned.chat.enable_thinking = it->get<bool>();
  chat::ChatPlan plan = plan_request(planned, true, rendered, job);
  add_plan_messages(input, plan);
  job.prompt = chat_tokens(input);
  if (job.prompt.empty()) throw_bad_request("messages", "the rendered conversation has no tokens");
  return plan;
}

ServerState::StartedGeneration ServerState::start_generation(const Json& body, bool chat, const std::string& id_prefix,
                                                             const std::function<void(runtime::SequenceRequest&)>& adjust) {
  if (embeddings_mode()) refuse_generation();
  if (draining()) throw ApiError(503, "unavailable_error", "the server is shutting down");
  GenerationParams params = parse_generation_params(body, chat, options_.sampling);
  // -n: the limit of a request that sets none (as llama-server's).
  if (params.max_tokens < 0) params.max_tokens = options_.n_predict;
  const AgentParams agent = parse_agent_params(body, chat, options_.reasoning_format);
  runtime::SequenceRequest job_request;
  job_request.stop = params.stop;
  chat::ChatPlan plan;
  if (chat) {
    plan = plan_chat(body, agent, job_request);
  } else {
    plan = plan_request(agent, false, std::string(), job_request);
    job_request.prompt = completion_prompt(body);
  }
  if (static_cast<int64_t>(job_request.prompt.size()) >= scheduler_->options().n_ctx_per_slot)
    throw_context_exceeded(chat, static_cast<int64_t>(job_request.prompt.size()), false);
  job_request.sampling = params.sampling;
  job_request.max_tokens = params.max_tokens;
  job_request.top_logprobs = params.top_logprobs;
  job_request.ignore_eos = params.ignore_eos;
  job_request.report_progress = params.return_progress && params.stream;
  job_request.context_shift = options_.context_shift;
  // llama-server keeps n_keep (0) tokens plus the BOS it added.
  job_request.shift_keep = engine_->tokenizer().vocab().add_bos ? 1 : 0;
  if (adjust) adjust(job_request);
  StartedGeneration started;
  try {
    started.job = scheduler_->submit(std::move(job_request));
    for (int i = 1; i < params.n; ++i) {
      // Each choice samples its own stream: seed + i (a random seed draws one per choice).
      runtime::SequenceRequest again = started.job->request();
      if (again.sampling.seed != sample::kRandomSeed) {
        again.sampling.seed += static_cast<uint32_t>(i);
        if (again.sampling.seed == sample::kRandomSeed) again.sampling.seed = 0;
      }
      started.more_jobs.push_back(scheduler_->submit(std::move(again)));
    }
  } catch (const runtime::QueueFull& e) {
    if (started.job) started.job->cancel();
    for (const auto& job : started.more_jobs) job->cancel();
    throw ApiError(503, "unavailable_error", e.what());
  }
  started.plan = std::move(plan);
  started.params = std::move(params);
  started.header = ResponseHeader{make_response_id(id_prefix), static_cast<int64_t>(std::time(nullptr)), model_id_};
  started.chat = chat;
  started.in_flight = std::make_shared<InFlight>(in_flight_);
  return started;
}

void ServerState::add_plan_messages(ChatInput& input, const chat::ChatPlan& plan) {
  if (!plan.extra_messages.is_array() || plan.extra_messages.empty()) return;
  // The family's instruction for tool calls goes in front, merged into a system message.
  Json messages = Json::array();
  const Json& extra = plan.extra_messages;
  if (!input.messages.empty() && input.messages[0].value("role", "") == "system" && input.messages[0]["content"].is_string() &&
      extra.size() == 1 && extra[0].value("role", "") == "system") {
    Json first = input.messages[0];
    first["content"] = first["content"].get<std::string>() + "\n\n" + extra[0].value("content", "");
    messages.push_back(std::move(first));
    for (size_t i = 1; i < input.messages.size(); ++i) messages.push_back(input.messages[i]);
  } else {
    for (const auto& m : extra) messages.push_back(m);
    for (auto& m : input.messages) messages.push_back(m);
  }
  input.messages = std::move(messages);
}

void ServerState::cancel_when_cut(Response& res, const StartedGeneration& started) {
  res.on_stream_end = [job = started.job, in_flight = started.in_flight](bool completed) {
    if (!completed) job->cancel();
  };
}

void ServerState::handle_generation(const Request& req, Response& res, bool chat) {
  StartedGeneration started = start_generation(parse_body(req.body), chat, chat ? "chatcmpl-" : "cmpl-");
  const ResponseHeader header = started.header;
  const GenerationParams& params = started.params;
  const chat::ChatPlan& plan = started.plan;
  // Both kinds are written by a stream provider: between events it returns to the server, which
  // checks that the client is still there, so a closed connection cancels the jobs (on_stream_end).
  // n > 1: a job per choice, their chunks interleaved as they come, each with its index.
  struct Choice {
    Choice(std::shared_ptr<runtime::Job> j, const chat::ParseOptions& options) : job(std::move(j)), parser(options) {}
    std::shared_ptr<runtime::Job> job;
    bool sent_role = false;
    bool finished = false;
    const char* finish = nullptr;
    runtime::StopReason stop = runtime::StopReason::EndOfGeneration;
    std::string text;  // the whole text
    std::vector<TokenLogprob> logprobs;
    size_t text_offset = 0;
    // Chat: the output read as an assistant message (reasoning, content, tool calls) as it streams.
    chat::StreamParser parser;
  };
  struct Progress {
    std::vector<Choice> choices;
    bool done = false;
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  };
  auto progress = std::make_shared<Progress>();
  progress->choices.reserve(1 + started.more_jobs.size());
  progress->choices.emplace_back(started.job, plan.parse);
  for (const auto& job : started.more_jobs) progress->choices.emplace_back(job, plan.parse);
  const bool stream = params.stream;
  const bool include_usage = params.include_usage;
  const bool want_logprobs = params.top_logprobs >= 0;
  const bool timings_per_token = params.timings_per_token;
  // llama-server's __verbose debug object: the prompt as text, the output, the stop.
  std::shared_ptr<const std::string> verbose_prompt;
  if (params.verbose.value_or(options_.verbose))
    verbose_prompt =
        std::make_shared<const std::string>(engine_->tokenizer().decode(started.job->request().prompt, true));
  // The choices' usage together: the prompt once, every choice's completion tokens.
  const auto all_stats = [progress] {
    runtime::GenerationStats stats = progress->choices.front().job->stats();
    for (size_t i = 1; i < progress->choices.size(); ++i)
      stats.generated_tokens += progress->choices[i].job->stats().generated_tokens;
    return stats;
  };
  const auto with_index = [](Json j, size_t index) {
    if (j.contains("choices") && !j["choices"].empty()) j["choices"][0]["index"] = index;
    return j;
  };
  auto provider = [header, progress, chat, stream, include_usage, want_logprobs, all_stats, with_index,
                   timings_per_token, verbose_prompt](http::StreamSink& sink) {
    if (progress->done) return true;
    const auto write = [&](const Json& j) {
      const std::string line = "data: " + to_text(j) + "\n\n";
      return sink.write(line);
    };
    const auto fail = [&](const runtime::SequenceEvent& event) {
      const Json error = error_body(500, "server_error", client_message(Error(event.error, event.error_setting)));
      if (stream) {
        write(error);
      } else {
        const std::string text = to_text(error);
        sink.write(text);
      }
      for (auto& c : progress->choices) c.job->cancel();
      progress->done = true;
      sink.done();
    };
    std::vector<runtime::SequenceEvent> events;
    bool waited = false;
    for (size_t index = 0; index < progress->choices.size(); ++index) {
      Choice& choice = progress->choices[index];
      if (choice.finished) continue;
      events.clear();
      // One choice is waited for (the first unfinished), the others only looked at.
      choice.job->take_events(events, std::chrono::milliseconds(waited ? 0 : 100));
      waited = true;
      const auto& job = choice.job;
      const auto add_verbose = [&](Json& body_json, const runtime::StopReason stop) {
        if (verbose_prompt) body_json["__verbose"] = verbose_json(*verbose_prompt, choice.text, stop, job->stats(), header.model);
      };
      if (stream && chat && !choice.sent_role) {
        // The first chunk names the role, with null content (as OpenAI and llama-server), before any text.
        choice.sent_role = true;
        if (!write(with_index(chat_chunk(header, {{"role", "assistant"}, {"content", nullptr}}, Json(), nullptr), index)))
          return false;
      }
      for (auto& event : events) {
        if (event.prompt_done >= 0) {
          // return_progress: the prompt's progress, in a chunk of its own (llama-server's shape).
          if (!stream) continue;
          Json chunk = chat ? chat_chunk(header, {{"role", "assistant"}, {"content", nullptr}}, Json(), nullptr)
                            : completion_chunk(header, "", Json(), nullptr);
          const double elapsed =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - progress->started).count();
          chunk["prompt_progress"] = prompt_progress_json(event, job->stats().cached_tokens, elapsed);
          if (!write(with_index(std::move(chunk), index))) return false;
          continue;
        }
        const char* finish = nullptr;
        if (event.stop) {
          if (*event.stop == runtime::StopReason::Error) {
            fail(event);
            return true;
          }
          finish = finish_reason_name(*event.stop);
        }
        choice.text += event.text;
        if (!stream) {
          for (auto& lp : event.logprobs) choice.logprobs.push_back(std::move(lp));
          if (event.stop) {
            choice.finished = true;
            choice.finish = finish;
            choice.stop = *event.stop;
          }
          continue;
        }
        Json logprobs;
        if (want_logprobs && !event.logprobs.empty()) {
          logprobs = chat ? chat_logprobs_json(event.logprobs) : completion_logprobs_json(event.logprobs, choice.text_offset);
        }
        choice.text_offset += event.text.size();
        // timings_per_token: every chunk with text carries the timings so far.
        const auto with_timings = [&](Json chunk) {
          if (timings_per_token) chunk["timings"] = timings_json(job->stats());
          return chunk;
        };
        if (chat) {
          std::vector<Json> deltas = choice.parser.push(event.text);
          if (finish) {
            for (auto& d : choice.parser.finish()) deltas.push_back(std::move(d));
            if (!choice.parser.message().tool_calls.empty() && std::string_view(finish) == "stop") finish = "tool_calls";
          }
          if (deltas.empty() && !logprobs.is_null()) deltas.push_back(Json::object());
          for (size_t i = 0; i < deltas.size(); ++i)
            if (!write(with_index(with_timings(chat_chunk(header, deltas[i], i == 0 ? logprobs : Json(), nullptr)), index)))
              return false;
          if (finish) {
            Json last = with_index(chat_chunk(header, Json::object(), Json(), finish), index);
            last["timings"] = timings_json(job->stats());
            add_verbose(last, *event.stop);
            if (!write(last)) return false;
          }
        } else {
          if (!event.text.empty() || !logprobs.is_null())
            if (!write(with_index(with_timings(completion_chunk(header, event.text, logprobs, nullptr)), index))) return false;
          if (finish) {
            Json last = with_index(completion_chunk(header, "", Json(), finish), index);
            last["timings"] = timings_json(job->stats());
            add_verbose(last, *event.stop);
            if (!write(last)) return false;
          }
        }
        if (finish) choice.finished = true;
      }
    }
    for (const auto& c : progress->choices)
      if (!c.finished) return true;
    // Every choice has ended.
    if (stream) {
      if (include_usage && !write(usage_chunk(header, chat, all_stats()))) return false;
      static const std::string kDone = "data: [DONE]\n\n";
      if (!sink.write(kDone)) return false;
    } else {
      Json body_json;
      for (size_t index = 0; index < progress->choices.size(); ++index) {
        Choice& c = progress->choices[index];
        const runtime::GenerationStats stats = c.job->stats();
        Json logprobs;
        if (want_logprobs) logprobs = chat ? chat_logprobs_json(c.logprobs) : completion_logprobs_json(c.logprobs, 0);
        const char* finish = c.finish;
        Json one;
        if (chat) {
          c.parser.push(c.text);
          c.parser.finish();
          const chat::ChatMessage& message = c.parser.message();
          if (!message.tool_calls.empty() && std::string_view(finish) == "stop") finish = "tool_calls";
          one = chat_response(header, message.to_json(), logprobs, finish, stats);
        } else {
          one = completion_response(header, c.text, logprobs, finish, stats);
        }
        if (verbose_prompt && index == 0)
          one["__verbose"] = verbose_json(*verbose_prompt, c.text, c.stop, stats, header.model);
        if (index == 0) {
          body_json = std::move(one);
        } else {
          body_json["choices"].push_back(with_index(std::move(one), index)["choices"][0]);
        }
      }
      if (progress->choices.size() > 1) body_json["usage"] = usage_json(all_stats());
      const std::string text = to_text(body_json);
      if (!sink.write(text)) return false;
    }
    progress->done = true;
    sink.done();
    return true;
  };
  // A stream that ends early (client gone, server stopping) cancels the jobs.
  res.on_stream_end = [progress, in_flight = started.in_flight](bool completed) {
    if (!completed)
      for (auto& c : progress->choices) c.job->cancel();
  };
  res.status = 200;
  res.stream = std::move(provider);
  if (stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.content_type = "text/event-stream";
  }
}

void ServerState::apply_cors(const Request& req, Response& res) const {
  for (auto& [name, value] : cors_headers(options_.cors, req.header("origin"), req.method == "OPTIONS"))
    res.set_header(std::move(name), std::move(value));
}

void ServerState::health(Response& res) const {
  if (!ready()) {
    res.set_header("Retry-After", "1");
    send_json(res, 503, error_body(503, "unavailable_error", "Loading model"));
  } else if (draining() || stop_announced()) {
    // A load balancer stops sending here while the requests in flight finish.
    res.set_header("Retry-After", "1");
    send_json(res, 503, error_body(503, "unavailable_error", "the server is shutting down"));
  } else {
    send_json(res, 200, {{"status", "ok"}});
  }
}

bool ServerState::answer_on_loop(const Request& req, Response& res) const {
  if (req.path != "/health" && req.path != "/v1/health") return false;
  if (req.method != "GET" && req.method != "HEAD") return false;
  apply_cors(req, res);
  health(res);
  return true;
}

namespace {

// The media type of a Content-Type value, lower-cased, without parameters.
std::string media_type(std::string_view content_type) {
  std::string type(content_type.substr(0, content_type.find(';')));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.pop_back();
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return type;
}

// Anthropic's clients read their own error shape (a wrong key, a bad request under /v1/messages).
void send_error_for(const Request& req, Response& res, const ApiError& e) {
  if (!req.path.starts_with("/v1/messages")) return send_error(res, e);
  if (e.status() == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status(), anthropic::error_body(e.status(), e.what()));
}

}  // namespace

void ServerState::dispatch(const Request& req, Response& res) {
  apply_cors(req, res);
  if (req.method == "OPTIONS") {
    // A preflight needs no API key (browsers send none), as llama-server answers it: 200, no body.
    res.set_content("", "text/html");
    return;
  }
  try {
    const bool open = req.path == "/" || req.path == "/health" || req.path == "/v1/health";
    if (!open && !authorized(req))
      throw ApiError(401, "authentication_error", "Invalid API key", "", "invalid_api_key");
    if (!open && !ready()) throw ApiError(503, "unavailable_error", "Loading model");
    const Route* route = nullptr;
    bool path_known = false;
    for (const auto& r : routes_) {
      const bool prefix = !r.path.empty() && r.path.back() == '*';
      if (prefix ? !req.path.starts_with(std::string_view(r.path).substr(0, r.path.size() - 1)) : r.path != req.path)
        continue;
      path_known = true;
      if (r.method == req.method || (r.method == "GET" && req.method == "HEAD")) route = &r;
    }
    if (!route) {
      if (path_known) throw ApiError(405, "invalid_request_error", fmt::format("{} {} is not allowed", req.method, req.path));
      throw ApiError(404, "not_found_error", fmt::format("no endpoint {} {}", req.method, req.path));
    }
    // A web page may POST text/plain or a form to any origin without asking (no CORS preflight):
    // only a JSON body, which a browser sends cross-origin only after the preflight, is taken.
    // An empty body without a Content-Type (POST /slots/0?action=erase) carries nothing to forge.
    const bool no_body = req.body.empty() && !req.has_header("content-type");
    if (req.method == "POST" && !no_body && media_type(req.header("content-type")) != "application/json")
      throw ApiError(415, "invalid_request_error",
                     fmt::format("the request body must be JSON sent with 'Content-Type: application/json', got '{}'",
                                 req.header("content-type")));
    run_route(*route, req, res);
  } catch (const ApiError& e) {
    send_error_for(req, res, e);
  } catch (const Error& e) {  // a library error: the server's fault, with the server flag it blames
    send_error_for(req, res, ApiError(500, status_type(500), client_message(e)));
  }
}

void ServerState::build_routes() {
  add_tool_routes();
  add_cors_proxy_routes();
  add_route("GET", "/health", [this](const Request&, Response& res) { health(res); });
  add_route("GET", "/v1/health", [this](const Request&, Response& res) { health(res); });
  add_route("GET", "/", [this](const Request&, Response& res) {
    if (!options_.ui) throw ApiError(404, "not_found_error", "the chat page is off (--no-ui)");
    res.set_content(std::string(chat_page_html()), "text/html; charset=utf-8");
  }, false);

  const auto models = [this](const Request&, Response& res) {
    send_json(res, 200, sleeping() ? asleep_models_ : models_json());
  };
  add_route("GET", "/v1/models", models, false);
  add_route("GET", "/models", models, false);

  const auto chat = [this](const Request& req, Response& res) { handle_generation(req, res, true); };
  const auto completions = [this](const Request& req, Response& res) { handle_generation(req, res, false); };
  add_route("POST", "/v1/chat/completions", chat);
  add_route("POST", "/chat/completions", chat);
  add_route("POST", "/v1/completions", completions);
  build_responses_routes();

  const auto embeddings_native = [this](const Request& req, Response& res) { handle_embeddings(req, res, false); };
  add_route("POST", "/v1/embeddings", [this](const Request& req, Response& res) { handle_embeddings(req, res, true); });
  add_route("POST", "/embeddings", embeddings_native);
  add_route("POST", "/embedding", embeddings_native);  // llama-server's legacy name
  const auto rerank = [this](const Request& req, Response& res) { handle_rerank(req, res); };
  for (const char* path : {"/v1/rerank", "/rerank", "/reranking", "/v1/reranking"}) add_route("POST", path, rerank);

  add_route("POST", "/tokenize", [this](const Request& req, Response& res) {
    const Json body = parse_body(req.body);
    const std::string content = string_field(body, "content", "");
    tokenizer::EncodeOptions encode;
    encode.add_special = bool_field(body, "add_special", false);
    encode.parse_special = bool_field(body, "parse_special", true);
    const bool with_pieces = bool_field(body, "with_pieces", false);
    const auto tokens = engine_->tokenizer().encode(content, encode);
    Json out = Json::array();
    for (const TokenId id : tokens) {
      if (with_pieces)
        out.push_back({{"id", id}, {"piece", engine_->tokenizer().token_to_piece(id, true)}});
      else
        out.push_back(id);
    }
    send_json(res, 200, {{"tokens", std::move(out)}});
  });
  add_route("POST", "/detokenize", [this](const Request& req, Response& res) {
    const Json body = parse_body(req.body);
    std::vector<TokenId> tokens;
    if (const auto it = body.find("tokens"); it != body.end() && !it->is_null()) {
      if (!it->is_array()) throw_bad_request("tokens", "'tokens' must be an array of token ids");
      for (const auto& t : *it) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= engine_->model().n_vocab())
          throw_bad_request("tokens", "'tokens' must hold integers in [0, {})", engine_->model().n_vocab());
        tokens.push_back(static_cast<TokenId>(t.get<int64_t>()));
      }
    }
    send_json(res, 200, {{"content", engine_->tokenizer().decode(tokens, true)}});
  });
  add_route("POST", "/apply-template", [this](const Request& req, Response& res) {
    if (embeddings_mode()) refuse_generation();
    const Json body = parse_body(req.body);
    const AgentParams agent = parse_agent_params(body, true, options_.reasoning_format);
    send_json(res, 200, {{"prompt", render_chat(chat_input(body, agent))}});
  });
  add_anthropic_routes();
  add_native_routes();
  add_route("GET", "/props", [this](const Request&, Response& res) {
    send_json(res, 200, sleeping() ? asleep_props_ : props());
  }, false);
  add_slot_routes();
  add_route("GET", "/metrics", [this](const Request&, Response& res) {
    if (!options_.metrics)
      throw ApiError(501, "not_supported_error", "metrics are off: start the server with --metrics");
    res.set_header("Process-Start-Time-Unix", std::to_string(process_started_at_));
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  }, false);
}

int serve(const ServeOptions& options) {
  if (options.n_slots < 1) throw_usage_error_for(Setting::Slots, "the server needs at least one slot, got {}", options.n_slots);
  g_signals.store(0);
  install_stop_handlers();
  // glibc gives each thread that allocates an arena of its own and keeps freed memory in it;
  // large request bodies then stay resident. Few arenas, and big blocks mapped (and unmapped
  // when freed) instead of a threshold that grows with every large free.
  mallopt(M_ARENA_MAX, 2);
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  ServerState state(options);
  state.build_routes();

  http::ServerOptions http_options;
  http_options.host = options.host;
  http_options.port = options.port;
  // Vertex AI tells a prediction container its port (AIP_HTTP_PORT), as llama-server reads it.
  if (const char* mode = std::getenv("AIP_MODE"); mode && std::string_view(mode) == "PREDICTION")
    if (const char* port = std::getenv("AIP_HTTP_PORT"); port && *port) http_options.port = std::atoi(port);
  // Workers hold only requests received whole: every slot and queued request, and a few for the
  // quick endpoints.
  http_options.worker_threads = options.http_threads > 0
                                    ? options.http_threads
                                    : options.n_slots + static_cast<int>(std::min<size_t>(options.max_queue, 256)) + 8;
  http_options.limits.max_body_bytes = options.max_body_bytes;
  if (options.max_connections > 0) http_options.max_connections = options.max_connections;
  http::Application app;
  app.dispatch = [&state](const Request& req, Response& res) { state.dispatch(req, res); };
  app.answer_on_loop = [&state](const Request& req, Response& res) { return state.answer_on_loop(req, res); };
  app.error_response = json_error_response;
  http::Server http(http_options, std::move(app));
  const int port = http.bind();
  std::thread listener([&http] { http.run(); });
  // A line per address (--host 127.0.0.1,::1), IPv6 ones in brackets as a URL writes them.
  for (size_t begin = 0; begin <= options.host.size();) {
    size_t end = options.host.find(',', begin);
    if (end == std::string::npos) end = options.host.size();
    const std::string host = options.host.substr(begin, end - begin);
    const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
    if (!host.empty()) std::fprintf(stderr, "okapi: listening on http://%s%s%s:%d\n", v6 ? "[" : "", host.c_str(), v6 ? "]" : "", port);
    begin = end + 1;
  }
  if (options.on_listening) options.on_listening(port);

  const auto stop_http = [&] {
    http.stop();
    listener.join();
  };
  try {
    state.load();
  } catch (...) {
    stop_http();
    throw;
  }
  std::fprintf(stderr, "okapi: model loaded, serving %s\n", state.serving().c_str());
  state.start_sleep_watch();

  while (g_signals.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Behind a load balancer: /health says 503 at once, but requests are still taken until its health
  // check has seen that (else the ones it sends meanwhile are refused). A second signal ends the wait.
  if (options.drain_delay_seconds > 0) {
    std::fprintf(stderr, "okapi: stopping in %g s: /health says 503, requests are still served (--drain-delay)\n",
                 options.drain_delay_seconds);
    state.announce_stop();
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.drain_delay_seconds);
    while (std::chrono::steady_clock::now() < until && g_signals.load() < 2)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Drain: /health says 503, new generations are refused, those in flight finish (a second signal
  // cuts them short).
  std::fprintf(stderr, "okapi: stopping: finishing %lld requests in flight\n",
               static_cast<long long>(state.in_flight()));
  state.start_draining();
  while (state.in_flight() > 0 && g_signals.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop_http();
  state.stop_sleep_watch();
  state.unload();
  std::fprintf(stderr, "okapi: stopped\n");
  return 0;
}

}  // namespace okapi::server
