// okapi serve's shared state (the model, scheduler, chat template, routes) and the member
// functions every endpoint module defines: server.cpp (OpenAI chat/completions, tokenize, props,
// metrics), embeddings, and one file per further API. A module is member functions of ServerState
// declared here and defined in its own .cpp; it registers its routes from build_routes().
#pragma once
#include <atomic>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "chat/chat_format.hpp"
#include "runtime/chat_prompt.hpp"
#include "runtime/drafters.hpp"
#include "runtime/embedder.hpp"
#include "runtime/scheduler.hpp"
#include "server/agent_params.hpp"
#include "server/api_error.hpp"
#include "server/embedding_queue.hpp"
#include "server/embeddings.hpp"
#include "server/http_server.hpp"
#include "server/mcp.hpp"
#include "server/request_params.hpp"
#include "server/responses.hpp"
#include "server/responses_api.hpp"
#include "server/server.hpp"
#include "server/tools_builtin.hpp"

namespace okapi::server {

using http::Request;
using http::Response;

void send_json(Response& res, int status, const Json& body);
void send_error(Response& res, const ApiError& e);
// The error type a status gets in the OpenAI shape ("authentication_error", "server_error", ...).
const char* status_type(int status);
// The HTTP layer's own errors (408, 413, ...) in the OpenAI shape (http::Application::error_response).
Response json_error_response(int status, const std::string& message);

// Everything a running server shares between its handler threads.
class ServerState {
 public:
  explicit ServerState(const ServeOptions& options) : options_(options) {}
  ~ServerState() { stop_sleep_watch(); }
  ServerState(const ServerState&) = delete;
  ServerState& operator=(const ServerState&) = delete;

  // Loads the model and builds the scheduler (or the embedder); /health says 200 after.
  void load();
  bool ready() const { return ready_.load(); }
  // What the startup line says is served.
  std::string serving() const;
  void start_draining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  // The stop is announced (--drain-delay): /health says 503 so a load balancer takes this server
  // out, while requests are still served until the drain starts.
  void announce_stop() { stop_announced_.store(true); }
  bool stop_announced() const { return stop_announced_.load(); }
  // Requests whose response is still being written (streams included).
  int64_t in_flight() const { return in_flight_.load(); }
  // Frees the model after the HTTP server has stopped.
  void unload() {
    tools_.reset();
    mcp_.reset();
    embedding_queue_.reset();
    embedder_.reset();
    scheduler_.reset();
    chat_.reset();
    drafters_.reset();
    engine_.reset();
  }

  void build_routes();
  // Every request but /health: CORS, API key, loading, routing, Content-Type, errors; wakes a
  // sleeping model for a route that needs it (slots_api.cpp).
  void dispatch(const Request& req, Response& res);
  // --sleep-idle-seconds: a thread that unloads the model after that long without a request that
  // needs it (started after load(), stopped before unload()).
  void start_sleep_watch();
  void stop_sleep_watch();
  bool sleeping() const { return sleeping_.load(); }
  // /health on the event loop, so that it answers even when every worker is busy.
  bool answer_on_loop(const Request& req, Response& res) const;

 private:
  struct InFlight {
    explicit InFlight(std::atomic<int64_t>& n) : n_(n) { n_.fetch_add(1); }
    ~InFlight() { n_.fetch_sub(1); }
    std::atomic<int64_t>& n_;
  };

  bool authorized(const Request& req) const;
  // Embeddings mode: the Embedder, its queue and the limits of a request.
  void load_embeddings();
  bool embeddings_mode() const { return embedder_ != nullptr; }
  void handle_embeddings(const Request& req, Response& res, bool openai_route);
  void handle_rerank(const Request& req, Response& res);
  // Queues a request's inputs; `finish` writes the response from the finished job's outputs.
  void await_embeddings(Response& res, std::vector<std::vector<int32_t>> inputs,
                        std::function<void(Response&, std::vector<runtime::EmbeddingOutput>&)> finish);
  // Generation in embeddings mode: 501, as llama-server once answered.
  void refuse_generation() const;
  // The OpenAI chat / text completion endpoints: start_generation, then OpenAI's shapes.
  void handle_generation(const Request& req, Response& res, bool chat);
  // One generation started from an OpenAI-shaped body (chat: `messages`, else `prompt`), parsed,
  // validated, rendered, planned and queued. Every API that generates text (OpenAI's, Anthropic's,
  // the Responses API, llama-server's native one) converts its request to this body, starts it here
  // and writes the job's events in its own shapes. Throws ApiError for the request's faults.
  struct StartedGeneration {
    std::shared_ptr<runtime::Job> job;
    // n > 1: the other choices' jobs (the same prompt; choice i samples with seed + i).
    std::vector<std::shared_ptr<runtime::Job>> more_jobs;
    chat::ChatPlan plan;  // chat: how the output reads as a message (reasoning, tool calls)
    GenerationParams params;
    ResponseHeader header;  // id prefix from `id_prefix`
    bool chat = false;
    std::shared_ptr<InFlight> in_flight;  // held until the response is written
  };
  // `adjust` (optional) sees the runtime request last, before it is queued (llama-server's native
  // fields: logit biases, probabilities after sampling, context-shift settings).
  StartedGeneration start_generation(const Json& body, bool chat, const std::string& id_prefix,
                                     const std::function<void(runtime::SequenceRequest&)>& adjust = {});
  // The Responses API (responses_api.cpp): /v1/responses and the input_tokens counts.
  void build_responses_routes();
  void handle_responses(const Request& req, Response& res);
  void handle_input_tokens(const Request& req, Response& res, bool responses);
  // A Responses request read, with the conversation of its previous_response_id.
  ResponsesRequest responses_request(const Json& body);
  ResponseStore response_store_{kStoredResponses, kStoredResponseBytes};
  // Ties a streamed response to its job: a stream that ends early (client gone) cancels it.
  static void cancel_when_cut(Response& res, const StartedGeneration& started);
  // A plan's extra messages (the Generic family's tool instruction), merged in front of the
  // conversation as start_generation renders it.
  static void add_plan_messages(ChatInput& input, const chat::ChatPlan& plan);
  // Anthropic's Messages API (anthropic_routes.cpp): /v1/messages and /v1/messages/count_tokens.
  void add_anthropic_routes();
  void handle_anthropic_messages(const Request& req, Response& res);
  void handle_anthropic_count_tokens(const Request& req, Response& res);
  std::vector<TokenId> completion_prompt(const Json& body) const;
  // 400 exceed_context_size_error (code context_length_exceeded): the prompt has `n_tokens` tokens
  // (`at_least`: at least that many).
  [[noreturn]] void throw_context_exceeded(bool chat, int64_t n_tokens, bool at_least) const;
  // Text of `prompt_bytes` bytes has at least bytes / max_bytes_per_token tokens: a prompt that
  // cannot fit is refused before tokenizing it (an 8 MiB prompt took seconds and ~200 MB).
  void refuse_far_beyond_context(size_t prompt_bytes, bool chat) const;
  static constexpr size_t kPrecheckPromptBytes = 64 * 1024;
  // The prompt a conversation renders to; a template's raise_exception or failure is a 400.
  std::string render_chat(const ChatInput& input) const;
  // Its tokens: control tokens only from the template's own text (unless allow_special_in_content).
  std::vector<TokenId> chat_tokens(const ChatInput& input) const;
  Json props() const;
  Json models_json() const;
  // /slots and POST /slots/{id}?action=save|restore|erase (slots_api.cpp).
  void add_slot_routes();
  void handle_slots(const Request& req, Response& res);
  void handle_slot_action(const Request& req, Response& res);
  // /metrics' text (while the model sleeps, the snapshot taken on falling asleep is answered).
  std::string metrics_text() const;
  // The plan of a request's tools, constraint and reasoning; fills `job`'s constraint, reasoning,
  // preserved tokens and stops. `rendered`: the chat prompt (empty for text completions).
  chat::ChatPlan plan_request(const AgentParams& agent, bool chat, const std::string& rendered,
                              runtime::SequenceRequest& job) const;
  // A chat request's prompt: its conversation rendered, planned (plan_request) and tokenized into
  // `job.prompt`.
  chat::ChatPlan plan_chat(const Json& body, const AgentParams& agent, runtime::SequenceRequest& job) const;

  const ServeOptions& options_;
  std::unique_ptr<runtime::Engine> engine_;
  std::optional<runtime::DrafterFactory> drafters_;  // before scheduler_: its drafters use it
  std::unique_ptr<runtime::ChatPrompt> chat_;
  chat::ChatFormat chat_format_;
  bool object_arguments_ = false;  // the template renders tool-call arguments as objects (tojson)
  // Clients send a call's arguments as JSON text; templates that print them with tojson expect
  // the object: converted for those (as llama-server does).
  void agent_template_inputs(ChatInput& input) const;
  // A request's conversation as the template gets it: validated tools, enable_thinking, arguments.
  ChatInput chat_input(const Json& body, const AgentParams& agent) const;
  std::unique_ptr<runtime::Scheduler> scheduler_;
  std::unique_ptr<runtime::Embedder> embedder_;
  std::unique_ptr<EmbeddingQueue> embedding_queue_;  // after embedder_: its worker uses it
  EmbeddingLimits embedding_limits_;
  std::string model_id_;
  int64_t loaded_at_ = 0;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> stop_announced_{false};
  std::atomic<int64_t> in_flight_{0};

  struct Route {
    std::string method;
    std::string path;  // a path ending in '*' matches every path that starts with what precedes it
    std::function<void(const Request&, Response&)> handler;
    // The handler uses the model: a sleeping model is loaded first. Routes that answer from
    // what the server remembers (/props, /v1/models, /metrics) do not wake it.
    bool wakes = true;
  };
  std::vector<Route> routes_;
  void add_route(std::string method, std::string path, std::function<void(const Request&, Response&)> handler,
                 bool wakes = true) {
    routes_.push_back({std::move(method), std::move(path), std::move(handler), wakes});
  }

  // Sleep (--sleep-idle-seconds). Every routed request holds model_mutex_ shared while its
  // handler runs (a stream's InFlight keeps the model awake after); falling asleep and waking
  // take it exclusively, so no handler sees the model half loaded.
  std::shared_mutex model_mutex_;
  std::atomic<bool> sleeping_{false};
  std::atomic<int64_t> handlers_running_{0};
  std::atomic<int64_t> last_activity_ms_{0};  // steady clock, when a handler last ended
  Json asleep_props_, asleep_models_;  // answered while asleep (under model_mutex_)
  std::thread sleep_watch_;
  std::atomic<bool> sleep_watch_stop_{false};
  // Runs a route's handler holding model_mutex_ shared (waking the model first when it wakes it).
  void run_route(const Route& route, const Request& req, Response& res);
  void fall_asleep();  // under model_mutex_, exclusively
  void wake_up();      // ... and back
  void health(Response& res) const;
  // Opt-in host tools: /tools (tools_builtin.cpp: --tools, MCP servers) and /cors-proxy
  // (cors_proxy.cpp: --ui-mcp-proxy); 403 without their flags.
  std::unique_ptr<McpManager> mcp_;
  std::unique_ptr<ServerTools> tools_;  // after mcp_: its MCP tools call it
  void add_tool_routes();
  void add_cors_proxy_routes();
  void handle_cors_proxy(const Request& req, Response& res) const;

  // llama-server's native API (native_api.cpp): /completion, /completions, /infill, and with
  // AIP_MODE=PREDICTION in the environment, Vertex AI's POST /predict.
  void add_native_routes();
  void handle_native_completion(const Request& req, Response& res, bool infill);
  void handle_gcp_predict(const Request& req, Response& res) const;
  // A route's whole response, run in this thread (a streamed one drained): /predict's instances.
  Response run_route(const std::string& method, const std::string& path, const Request& outer, std::string body) const;
  // The /metrics text, with the throughput gauges over the window since the previous scrape.
  const int64_t process_started_at_ = static_cast<int64_t>(std::time(nullptr));
  mutable std::mutex metrics_mutex_;
  mutable runtime::SchedulerCounters scraped_;  // the counters at the previous scrape
  // Counters of schedulers unloaded by sleep, so that /metrics' totals are the server's.
  runtime::SchedulerCounters retired_counters_;
  runtime::SchedulerCounters server_counters() const;
  // Before the scheduler is unloaded: its counters join retired_counters_.
  void retire_counters();
  void apply_cors(const Request& req, Response& res) const;
};

}  // namespace okapi::server
