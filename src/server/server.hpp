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

namespace okapi::server {

struct ServeOptions {
  std::string model_path;
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (tests; the port is printed and given to on_listening)
  int n_slots = 1;
  int64_t n_ctx = runtime::kContextNotGiven;  // all slots together, as llama-server's -c
  int64_t batch_size = 512;
  runtime::EngineOptions engine;
  sample::SamplerConfig sampling;  // defaults of requests that do not set a field
  std::vector<std::string> api_keys;
  std::vector<std::string> cors_origins;  // "*" allows any origin; empty: no CORS headers
  bool metrics = false;
  bool verbose = false;  // completions carry __verbose (the prompt as text, ...) unless a request says otherwise
  std::string alias;  // the model id clients see (default: the file name)
  std::string chat_template_file;
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

// Runs until SIGTERM or SIGINT, then stops taking requests, lets those in flight finish and
// returns 0. Throws okapi::Error when the address cannot be bound or the model cannot be loaded.
int serve(const ServeOptions& options);

}  // namespace okapi::server
