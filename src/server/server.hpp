// okapi serve: an OpenAI-compatible HTTP server over one model (our event-loop HTTP/1.1 layer,
// http_server.hpp; nlohmann-json for bodies). Endpoints: /health, /v1/models, /v1/chat/completions,
// /v1/completions (streaming as server-sent events), /tokenize, /detokenize, /apply-template,
// /props, /slots, /metrics (with `metrics`), and the chat page at /. Generation runs on the
// continuous-batching Scheduler. With --embeddings / --rerank: /v1/embeddings, /embeddings,
// /v1/rerank (and llama-server's aliases) instead of generation, batched across requests by
// EmbeddingQueue.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_format.hpp"
#include "model/embedding.hpp"
#include "runtime/drafters.hpp"
#include "runtime/engine.hpp"
#include "sample/sampler.hpp"
#include "server/cors.hpp"
#include "server/template_context.hpp"

namespace okapi::server {

struct ServeOptions {
  std::string model_path;
  std::string host = "127.0.0.1";  // comma-separated: listen on each (127.0.0.1,::1)
  int port = 8080;  // 0: any free port (tests; the port is printed and given to on_listening)
  int n_slots = 1;
  int64_t n_ctx = runtime::kContextNotGiven;  // all slots together, as llama-server's -c
  int64_t batch_size = 512;
  runtime::EngineOptions engine;
  sample::SamplerConfig sampling;  // defaults of requests that do not set a field
  std::vector<std::string> api_keys;
  CorsPolicy cors;  // which browser origins may call the API (llama-server's default: any)
  bool metrics = false;
  // The model id clients see (default: the file name); comma-separated aliases: the first in
  // sorted order is the id, all are /v1/models' "aliases" (as llama-server's --alias).
  std::string alias;
  std::vector<std::string> tags;  // --tags: /v1/models' "tags"
  bool ui = true;                 // the chat page at / (--no-ui: 404)
  bool endpoint_slots = true;     // GET /slots (--no-slots: 501)
  // POST /slots/{id}?action=save|restore under this folder (empty: 501, as llama-server).
  std::string slot_save_path;
  float slot_prompt_similarity = 0.1f;  // runtime::SchedulerOptions::slot_prompt_similarity
  // After this many seconds without a request that needs the model, unload it (free its memory)
  // until the next one (< 0: never).
  int64_t sleep_idle_seconds = -1;
  // After SIGTERM, /health says 503 at once but requests are still served for this long before
  // the drain (new requests refused, those in flight finish): a load balancer's health check takes
  // the server out first, so none it sends is refused (0: drain at once).
  double drain_delay_seconds = 0;
  // --verbose: log each request on stderr, and completions carry llama-server's __verbose (the
  // prompt as text, ...) unless a request says otherwise.
  bool verbose = false;
  std::string chat_template_file;
  // --chat-template: one of llama.cpp's built-in template names (llama3, chatml, ...) or Jinja
  // source. jinja false (--no-jinja): only llama.cpp's built-in formats, the given or the model's
  // template read as the one it resembles, as llama-server's legacy formatter does.
  std::string chat_template;
  bool jinja = true;
  // --chat-template-kwargs and --reasoning: what every prompt's template gets unless the request says.
  TemplateDefaults template_defaults;
  // Where reasoning goes (--reasoning-format), its token budget (-1: none; 0: thinking off) and the
  // message forced before the end marker when the budget runs out.
  chat::ReasoningFormat reasoning_format = chat::ReasoningFormat::Auto;
  int64_t reasoning_budget = -1;
  std::string reasoning_budget_message;
  // Control-token text inside messages is read as control tokens (a user can then forge turns).
  bool allow_special_in_content = false;
  size_t max_queue = 64;
  size_t max_body_bytes = size_t{8} << 20;
  // Speculative decoding in every slot (a draft model gets its own cache per slot).
  runtime::DrafterOptions drafting;
  // Embeddings mode (--embeddings; --rerank is it with rank pooling): /v1/embeddings, /embeddings
  // and /v1/rerank answer, chat and completions do not (501), as llama-server's. A model that
  // does not generate text (bert, nomic-bert) is served so without the flag.
  bool embeddings = false;
  std::optional<model::Pooling> pooling;  // --pooling; nullopt: the file's {arch}.pooling_type
  int embd_normalize = 2;                 // runtime::normalize_embedding's mode for pooled vectors
  int64_t ubatch_size = 512;              // -ub: with -b, the tokens of an embeddings pass (the smaller)
  size_t embd_max_inputs = 2048;          // inputs per embeddings / rerank request
  // llama-server's -n: the token limit of a request that sets none (-1: none).
  int64_t n_predict = -1;
  // llama-server's --context-shift: a generation that fills its slot's context drops the older half
  // of what follows the prompt's first token and goes on (else it stops, truncated).
  bool context_shift = false;
  // llama-server's --kv-unified lets one slot use the whole -c: here each slot gets a cache of the
  // whole -c (memory for n_slots such caches) instead of -c / np.
  bool kv_unified = false;
  int http_threads = 0;  // 0: slots + queue + a few for the quick endpoints
  size_t max_connections = 0;  // 0: the HTTP layer's default (http_server.hpp)
  // Opt-in tools that touch the host (tools_builtin.hpp, mcp.hpp, cors_proxy.cpp); off by default.
  std::vector<std::string> tools;     // --tools: built-in tool names or "all"
  std::string tools_runtime;          // --tools-runtime: where the tools run ("": the host)
  std::string mcp_servers_json;       // --mcp-servers-json: an inline MCP servers config
  std::string mcp_servers_config;     // --mcp-servers-config: a file of one
  bool ui_mcp_proxy = false;          // --ui-mcp-proxy: /cors-proxy
  // Called once the socket listens (before the model is loaded), with the port.
  std::function<void(int port)> on_listening;
};

// Runs until SIGTERM or SIGINT, then (after drain_delay_seconds) stops taking requests, lets
// those in flight finish and returns 0; a second signal cuts either wait short. Throws okapi::Error when the address cannot be bound or the model cannot be loaded.
int serve(const ServeOptions& options);

}  // namespace okapi::server
