#include "server/server.hpp"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <thread>

#include "chat/chat_template.hpp"
#include "core/error.hpp"
#include "runtime/chat_prompt.hpp"
#include "runtime/drafters.hpp"
#include "server/api_error.hpp"
#include "server/chat_page.hpp"
#include "server/metrics.hpp"
#include "server/request_params.hpp"
#include "server/responses.hpp"
#include "server/scheduler.hpp"

namespace okapi::server {

namespace {

using httplib::Request;
using httplib::Response;

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

void send_json(Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(to_text(body), "application/json; charset=utf-8");
}

void send_error(Response& res, const ApiError& e) {
  if (e.status() == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status(), e.body());
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

// Everything a running server shares between its handler threads.
class ServerState {
 public:
  explicit ServerState(const ServeOptions& options) : options_(options) {}

  void load() {
    engine_ = runtime::Engine::load(options_.model_path, options_.engine);
    const int64_t total = engine_->resolve_ctx(options_.n_ctx);
    runtime::warn_beyond_trained_context(total, engine_->hparams());
    const int64_t per_slot = total / options_.n_slots;
    if (per_slot < 1)
      throw_error("-c {} cannot be shared by {} slots (-np): each needs at least one cell", total, options_.n_slots);
    chat_ = std::make_unique<runtime::ChatPrompt>(*engine_, options_.chat_template_file);
    SchedulerOptions so;
    so.n_slots = options_.n_slots;
    so.n_ctx_per_slot = per_slot;
    so.batch_size = options_.batch_size;
    so.max_queue = options_.max_queue;
    so.draft_max = options_.draft_max;
    so.draft_min = options_.draft_min;
    if (!options_.draft_model.empty()) {
      draft_engine_ = runtime::Engine::load_sharing_threads(options_.draft_model, options_.engine, *engine_);
      runtime::check_draft_vocabulary(*engine_, *draft_engine_);
      so.make_drafter = [this, per_slot](int slot) -> std::unique_ptr<runtime::Drafter> {
        runtime::ModelDrafterOptions drafter;
        drafter.p_min = options_.draft_p_min;
        drafter.seed = 0x9e3779b9u + static_cast<uint32_t>(slot);
        return std::make_unique<runtime::ModelDrafter>(*draft_engine_, draft_engine_->make_kv(per_slot, {.batch = 512}),
                                                       "draft model", drafter);
      };
    } else if (options_.lookup > 0) {
      so.make_drafter = [this](int) -> std::unique_ptr<runtime::Drafter> {
        return std::make_unique<runtime::LookupDrafter>(options_.lookup);
      };
    }
    scheduler_ = std::make_unique<Scheduler>(*engine_, so);
    model_id_ = options_.alias.empty() ? std::filesystem::path(options_.model_path).filename().string() : options_.alias;
    loaded_at_ = static_cast<int64_t>(std::time(nullptr));
    ready_.store(true);
  }
  bool ready() const { return ready_.load(); }
  void start_draining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  // Requests whose response is still being written (streams included).
  int64_t in_flight() const { return in_flight_.load(); }
  // Frees the model after the HTTP server has stopped.
  void unload() {
    scheduler_.reset();
    chat_.reset();
    draft_engine_.reset();
    engine_.reset();
  }

  void route(httplib::Server& http);

 private:
  struct InFlight {
    explicit InFlight(std::atomic<int64_t>& n) : n_(n) { n_.fetch_add(1); }
    ~InFlight() { n_.fetch_sub(1); }
    std::atomic<int64_t>& n_;
  };

  bool authorized(const Request& req) const;
  void handle_generation(const Request& req, Response& res, bool chat);
  std::vector<TokenId> completion_prompt(const Json& body) const;
  // The prompt a conversation renders to; a template's raise_exception or failure is a 400.
  std::string render_chat(const ChatInput& input) const;
  Json props() const;

  const ServeOptions& options_;
  std::unique_ptr<runtime::Engine> engine_;
  std::unique_ptr<runtime::Engine> draft_engine_;  // before scheduler_: its drafters use it
  std::unique_ptr<runtime::ChatPrompt> chat_;
  std::unique_ptr<Scheduler> scheduler_;
  std::string model_id_;
  int64_t loaded_at_ = 0;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> in_flight_{0};
};

bool ServerState::authorized(const Request& req) const {
  if (options_.api_keys.empty()) return true;
  std::string key;
  const std::string auth = req.get_header_value("Authorization");
  if (auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
  if (key.empty()) key = req.get_header_value("X-Api-Key");
  return std::find(options_.api_keys.begin(), options_.api_keys.end(), key) != options_.api_keys.end();
}

std::vector<TokenId> ServerState::completion_prompt(const Json& body) const {
  const auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw_bad_request("prompt", "'prompt' is required");
  const Json* prompt = &*it;
  // A one-element array is that element (OpenAI's batch form, n = 1).
  if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) prompt = &(*prompt)[0];
  if (prompt->is_string()) {
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

std::string ServerState::render_chat(const ChatInput& input) const {
  chat::RenderInputs render;
  render.messages = input.messages;
  render.tools = input.tools;
  render.add_generation_prompt = input.add_generation_prompt;
  render.extra = input.template_kwargs;
  try {
    return chat_->render(std::move(render));
  } catch (const chat::TemplateRaised& e) {
    throw_bad_request("messages", "{}", e.what());
  } catch (const chat::TemplateError& e) {
    throw_bad_request("messages", "the chat template cannot render these messages: {}", e.what());
  }
}

Json ServerState::props() const {
  Json p;
  Json settings;
  const auto& s = options_.sampling;
  settings["n_ctx"] = scheduler_->options().n_ctx_per_slot;
  settings["params"] = {{"temperature", s.temperature}, {"top_k", s.top_k},         {"top_p", s.top_p},
                        {"min_p", s.min_p},             {"typical_p", s.typical_p}, {"repeat_penalty", s.repeat_penalty},
                        {"repeat_last_n", s.repeat_last_n}};
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
  p["speculative"] = !options_.draft_model.empty() ? "draft model" : options_.lookup > 0 ? "lookup" : "none";
  p["build_info"] = "okapi";
  return p;
}

void ServerState::handle_generation(const Request& req, Response& res, bool chat) {
  if (draining()) throw ApiError(503, "unavailable_error", "the server is shutting down");
  const Json body = parse_body(req.body);
  GenerationParams params = parse_generation_params(body, chat, options_.sampling);
  JobRequest job_request;
  if (chat) {
    job_request.prompt = chat_->tokenize(render_chat(parse_chat_input(body)));
    if (job_request.prompt.empty()) throw_bad_request("messages", "the rendered conversation has no tokens");
  } else {
    job_request.prompt = completion_prompt(body);
  }
  const int64_t n_ctx = scheduler_->options().n_ctx_per_slot;
  if (static_cast<int64_t>(job_request.prompt.size()) >= n_ctx)
    throw ApiError(400, "invalid_request_error",
                   fmt::format("This model's maximum context length is {} tokens. However, your {} resulted in {} "
                               "tokens.",
                               n_ctx, chat ? "messages" : "prompt", job_request.prompt.size()),
                   chat ? "messages" : "prompt", "context_length_exceeded");
  job_request.sampling = params.sampling;
  job_request.max_tokens = params.max_tokens;
  job_request.stop = params.stop;
  job_request.top_logprobs = params.top_logprobs;
  job_request.ignore_eos = params.ignore_eos;
  std::shared_ptr<Job> job;
  try {
    job = scheduler_->submit(std::move(job_request));
  } catch (const QueueFull& e) {
    throw ApiError(503, "unavailable_error", e.what());
  }

  ResponseHeader header{make_response_id(chat ? "chatcmpl-" : "cmpl-"), static_cast<int64_t>(std::time(nullptr)),
                        model_id_};
  auto in_flight = std::make_shared<InFlight>(in_flight_);
  // Both kinds are written by a chunked provider: between events it returns to httplib, which
  // checks that the client is still there, so a closed connection cancels the job (the releaser).
  struct Progress {
    bool sent_role = false;
    bool done = false;
    std::string text;  // non-streaming: the whole text
    std::vector<TokenLogprob> logprobs;
    size_t text_offset = 0;
  };
  auto progress = std::make_shared<Progress>();
  const bool stream = params.stream;
  const bool include_usage = params.include_usage;
  const bool want_logprobs = params.top_logprobs >= 0;
  auto provider = [job, header, progress, chat, stream, include_usage, want_logprobs](size_t,
                                                                                       httplib::DataSink& sink) {
    if (progress->done) return true;
    std::vector<JobEvent> events;
    job->take_events(events, std::chrono::milliseconds(100));
    const auto write = [&](const Json& j) {
      const std::string line = "data: " + to_text(j) + "\n\n";
      return sink.write(line.data(), line.size());
    };
    for (auto& event : events) {
      const char* finish = nullptr;
      if (event.finish) {
        if (*event.finish == FinishReason::Error) {
          const Json error = error_body(500, "server_error", event.error);
          if (stream) {
            write(error);
          } else {
            const std::string text = to_text(error);
            sink.write(text.data(), text.size());
          }
          progress->done = true;
          sink.done();
          return true;
        }
        finish = finish_reason_name(*event.finish == FinishReason::Length ? FinishReason::Length : FinishReason::Stop);
      }
      if (!stream) {
        progress->text += event.text;
        for (auto& lp : event.logprobs) progress->logprobs.push_back(std::move(lp));
        if (event.finish) {
          const JobStats stats = job->stats();
          Json logprobs;
          if (want_logprobs)
            logprobs = chat ? chat_logprobs_json(progress->logprobs) : completion_logprobs_json(progress->logprobs, 0);
          const Json body_json = chat ? chat_response(header, progress->text, logprobs, finish, stats)
                                      : completion_response(header, progress->text, logprobs, finish, stats);
          const std::string text = to_text(body_json);
          if (!sink.write(text.data(), text.size())) return false;
          progress->done = true;
          sink.done();
        }
        continue;
      }
      Json logprobs;
      if (want_logprobs && !event.logprobs.empty()) {
        logprobs = chat ? chat_logprobs_json(event.logprobs) : completion_logprobs_json(event.logprobs, progress->text_offset);
      }
      progress->text_offset += event.text.size();
      if (chat) {
        Json delta = Json::object();
        if (!progress->sent_role) {
          delta["role"] = "assistant";
          progress->sent_role = true;
        }
        if (!event.text.empty() || !finish) delta["content"] = event.text;
        if (!event.text.empty() || !logprobs.is_null() || delta.contains("role"))
          if (!write(chat_chunk(header, delta, logprobs, nullptr))) return false;
        if (finish) {
          Json last = chat_chunk(header, Json::object(), Json(), finish);
          last["timings"] = timings_json(job->stats());
          if (!write(last)) return false;
        }
      } else {
        if (!event.text.empty() || !logprobs.is_null())
          if (!write(completion_chunk(header, event.text, logprobs, nullptr))) return false;
        if (finish) {
          Json last = completion_chunk(header, "", Json(), finish);
          last["timings"] = timings_json(job->stats());
          if (!write(last)) return false;
        }
      }
      if (finish) {
        if (include_usage && !write(usage_chunk(header, chat, job->stats()))) return false;
        static const std::string kDone = "data: [DONE]\n\n";
        if (!sink.write(kDone.data(), kDone.size())) return false;
        progress->done = true;
        sink.done();
      }
    }
    return true;
  };
  auto releaser = [job, in_flight](bool success) {
    if (!success) job->cancel();
  };
  res.status = 200;
  if (stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider("text/event-stream", std::move(provider), std::move(releaser));
  } else {
    res.set_chunked_content_provider("application/json; charset=utf-8", std::move(provider), std::move(releaser));
  }
}

void ServerState::route(httplib::Server& http) {
  // Every handler: ApiError -> its status and OpenAI error body.
  const auto guarded = [](auto handler) {
    return [handler](const Request& req, Response& res) {
      try {
        handler(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    };
  };

  http.set_pre_routing_handler([this](const Request& req, Response& res) {
    const std::string origin = req.get_header_value("Origin");
    if (!origin.empty()) {
      const auto& allowed = options_.cors_origins;
      const bool any = std::find(allowed.begin(), allowed.end(), "*") != allowed.end();
      if (any || std::find(allowed.begin(), allowed.end(), origin) != allowed.end()) {
        res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
        res.set_header("Vary", "Origin");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key");
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      }
    }
    if (req.method == "OPTIONS") {
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool open = req.path == "/" || req.path == "/health" || req.path == "/v1/health";
    if (!open && !authorized(req)) {
      send_json(res, 401,
                error_body(401, "authentication_error", "Invalid API key", "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!open && !ready()) {
      res.set_header("Retry-After", "1");
      send_json(res, 503, error_body(503, "unavailable_error", "Loading model"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  const auto health = [this](const Request&, Response& res) {
    if (!ready()) {
      res.set_header("Retry-After", "1");
      send_json(res, 503, error_body(503, "unavailable_error", "Loading model"));
    } else {
      send_json(res, 200, {{"status", "ok"}});
    }
  };
  http.Get("/health", health);
  http.Get("/v1/health", health);
  http.Get("/", [](const Request&, Response& res) { res.set_content(std::string(chat_page_html()), "text/html; charset=utf-8"); });

  const auto models = [this](const Request&, Response& res) {
    Json model;
    model["id"] = model_id_;
    model["object"] = "model";
    model["created"] = loaded_at_;
    model["owned_by"] = "okapi";
    model["meta"] = {{"n_vocab", engine_->model().n_vocab()},
                     {"n_ctx_train", engine_->hparams().n_ctx_train},
                     {"n_params", engine_->parameter_count()},
                     {"size", engine_->file_bytes()}};
    send_json(res, 200, {{"object", "list"}, {"data", Json::array({model})}});
  };
  http.Get("/v1/models", models);
  http.Get("/models", models);

  const auto chat = guarded([this](const Request& req, Response& res) { handle_generation(req, res, true); });
  const auto completions = guarded([this](const Request& req, Response& res) { handle_generation(req, res, false); });
  http.Post("/v1/chat/completions", chat);
  http.Post("/chat/completions", chat);
  http.Post("/v1/completions", completions);
  http.Post("/completions", completions);

  http.Post("/tokenize", guarded([this](const Request& req, Response& res) {
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
  }));
  http.Post("/detokenize", guarded([this](const Request& req, Response& res) {
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
  }));
  http.Post("/apply-template", guarded([this](const Request& req, Response& res) {
    const Json body = parse_body(req.body);
    send_json(res, 200, {{"prompt", render_chat(parse_chat_input(body))}});
  }));
  http.Get("/props", [this](const Request&, Response& res) { send_json(res, 200, props()); });
  http.Get("/slots", [this](const Request&, Response& res) { send_json(res, 200, scheduler_->slots_json()); });
  http.Get("/metrics", [this](const Request&, Response& res) {
    if (!options_.metrics) {
      send_json(res, 501, error_body(501, "not_supported_error", "metrics are off: start the server with --metrics"));
      return;
    }
    res.set_content(prometheus_text(scheduler_->counters(), options_.n_slots), "text/plain; version=0.0.4");
  });

  http.set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    send_json(res, 500, error_body(500, "server_error", message));
  });
  // Statuses httplib sets itself (404 no route, 413 body too large, 400 bad request line) get a body too.
  http.set_error_handler([](const Request& req, Response& res) {
    if (!res.body.empty()) return;
    std::string message = fmt::format("HTTP status {}", res.status);
    if (res.status == 404) message = fmt::format("no endpoint {} {}", req.method, req.path);
    if (res.status == 413) message = "the request body is too large";
    send_json(res, res.status, error_body(res.status, status_type(res.status), message));
  });
}

}  // namespace

int serve(const ServeOptions& options) {
  if (options.n_slots < 1) throw_usage_error("-np must be at least 1, got {}", options.n_slots);
  g_signals.store(0);
  install_stop_handlers();
  ServerState state(options);
  httplib::Server http;
  // httplib holds a thread per connection, idle keep-alive ones included: room for every slot and
  // queued request plus idle client pools, and a short keep-alive so that idle connections neither
  // starve new ones for long nor hold up the exit after SIGTERM (it joins their threads).
  const int threads = options.http_threads > 0
                          ? options.http_threads
                          : options.n_slots + static_cast<int>(std::min<size_t>(options.max_queue, 256)) + 32;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_payload_max_length(options.max_body_bytes);
  http.set_read_timeout(30, 0);
  http.set_write_timeout(30, 0);
  http.set_keep_alive_timeout(2);
  state.route(http);

  int port = options.port;
  if (port == 0) {
    port = http.bind_to_any_port(options.host);
    if (port < 0) throw_error("cannot listen on {}: no free port", options.host);
  } else if (!http.bind_to_port(options.host, port)) {
    throw_error("cannot listen on {}:{} (in use, or not an address of this machine)", options.host, port);
  }
  std::atomic<bool> listener_done{false};
  std::thread listener([&http, &listener_done] {
    http.listen_after_bind();
    listener_done.store(true);
  });
  std::fprintf(stderr, "okapi: listening on http://%s:%d\n", options.host.c_str(), port);
  if (options.on_listening) options.on_listening(port);

  const auto stop_http = [&] {
    // httplib's stop() does nothing until the listener has marked itself running: a model that
    // fails to load at once would otherwise leave the listener, and this join, waiting forever.
    while (!http.is_running() && !listener_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    http.stop();
    listener.join();
  };
  try {
    state.load();
  } catch (...) {
    stop_http();
    throw;
  }
  std::fprintf(stderr, "okapi: model loaded, serving (%d slots)\n", options.n_slots);

  while (g_signals.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Drain: refuse new generations, let those in flight finish (a second signal cuts them short).
  std::fprintf(stderr, "okapi: stopping: finishing %lld requests in flight\n",
               static_cast<long long>(state.in_flight()));
  state.start_draining();
  while (state.in_flight() > 0 && g_signals.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop_http();
  state.unload();
  std::fprintf(stderr, "okapi: stopped\n");
  return 0;
}

}  // namespace okapi::server
