// okapi serve [-m MODEL] [--host H] [--port P] [-np N] [-c CTX] [-t T] [-b B] [--api-key KEY ...]
//             [--api-key-file F] [--cors-origins LIST] [--cors-methods M] [--cors-headers H]
//             [--[no-]cors-credentials] [--metrics] [--alias NAME] [--chat-template-file F | --chat-template NAME|JINJA]
//             [--[no-]jinja] [--chat-template-kwargs JSON] [--reasoning on|off|auto] [-ctk/-ctv TYPE] [--draft-model F | --lookup N | --draft-skip LIST] [--draft-max N]
//             [--draft-min N] [--draft-p-min P] [sampling defaults]
//             [--embeddings | --rerank] [--pooling P] [-ub N] [--embd-normalize N] [--embd-max-inputs N]
//             [--tools LIST] [--tools-runtime R] [--mcp-servers-json J | --mcp-servers-config F] [--ui-mcp-proxy]
//             [--models-dir DIR] [--models-preset FILE] [--models-max N] [--no-models-autoload] [--drain-delay S]
// An OpenAI-compatible HTTP server (src/server/server.hpp) until SIGTERM or Ctrl-C, which let the
// requests in flight finish. -c is the context of all slots together, as llama-server's.
// --embeddings / --rerank serve /v1/embeddings and /v1/rerank instead of generation (as
// llama-server's); an embedding model that does not generate text is served so without them.
// --tools, MCP servers and --ui-mcp-proxy (/tools, /cors-proxy) touch the host: off unless given.
// Without -m, with --models-dir, --models-preset, --models-max or --[no-]models-autoload, it is a
// router (server/router.hpp) serving every model found, each in a child `okapi serve` that gets
// the flags given here; without -m and without those, it serves the bundled stories260K.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "common_flags.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "exact_flags.hpp"
#include "hub/hub.hpp"
#include "model/embedding.hpp"
#include "runtime/default_model.hpp"
#include "runtime/pipeline.hpp"
#include "server/cors.hpp"
#include "server/router.hpp"
#include "server/server.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct ServeArgs {
  server::ServeOptions options;
  std::string model;
  ModelSourceFlags source;  // --hf-repo / --model-url when -m is not given
  std::string api_key_file;
  std::optional<std::string> cors_origins;
  int64_t seed = -1;
  int64_t max_queue = 64;
  bool rerank = false;
  std::string pooling;
  int64_t embd_max_inputs = 2048;
  std::string models_dir;
  std::string models_preset;
  int models_max = 4;
  bool models_autoload = true;
  std::string tags;
  bool no_effect = false;  // llama-server flags accepted for compatibility, with nothing to do here
  int64_t cache_ram_mib = 0;
};

// One key a line; blank lines and lines starting with # are skipped.
std::vector<std::string> read_api_keys(const std::string& path) {
  const std::string text = read_input_file(path, "API key file");
  std::vector<std::string> keys;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] != '#') keys.push_back(line.substr(first));
    begin = end + 1;
  }
  if (keys.empty()) throw_error("API key file {}: no keys in it", path);
  return keys;
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(begin, end - begin);
    if (!item.empty()) out.push_back(item);
    begin = end + 1;
  }
  return out;
}

// Without --cors-origins, llama-server's default: any origin; localhost only while server tools are on.
server::CorsPolicy cors_policy(const ServeArgs& args) {
  const auto& o = args.options;
  server::CorsPolicy policy = o.cors;
  const bool host_tools = !o.tools.empty() || !o.mcp_servers_json.empty() || !o.mcp_servers_config.empty();
  policy.origins = args.cors_origins ? split_list(*args.cors_origins) : server::default_cors_origins(host_tools);
  return policy;
}

// Flags of the router itself, never passed on to its children (the router sets -m, --host,
// --port and --alias of each, and checks API keys and CORS in front of them).
bool router_only_flag(const std::string& name) {
  static const char* const names[] = {"--model",         "--host",          "--port",       "--api-key",
                                      "--api-key-file",  "--alias",         "--cors-origins", "--cors-methods",
                                      "--cors-headers",  "--cors-credentials", "--models-dir",
                                      "--models-preset", "--models-max",    "--models-autoload", "--help"};
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

// The flag's canonical spelling: its first long name, else its short one.
std::string canonical_name(const CLI::Option& option) {
  if (!option.get_lnames().empty()) return "--" + option.get_lnames().front();
  if (!option.get_snames().empty()) return "-" + option.get_snames().front();
  return {};
}

// The router's children get every flag given on the command line but the router's own.
server::RouterOptions router_options(ServeArgs& args, CLI::App& cmd) {
  server::RouterOptions r;
  const auto& o = args.options;
  r.host = o.host;
  r.port = o.port;
  r.models_dir = args.models_dir;
  r.models_preset = args.models_preset;
  r.models_max = args.models_max;
  r.models_autoload = args.models_autoload;
  r.api_keys = o.api_keys;
  if (!args.api_key_file.empty())
    for (auto& key : read_api_keys(args.api_key_file)) r.api_keys.push_back(std::move(key));
  r.cors = cors_policy(args);
  r.max_body_bytes = o.max_body_bytes;
  for (const CLI::Option* option : cmd.get_options()) {
    if (option->count() == 0) continue;
    const std::string name = canonical_name(*option);
    if (name.empty() || router_only_flag(name)) continue;
    std::vector<std::string> values;
    if (option->get_expected_min() == 0) {  // a switch: --flag, or --flag=false when negated
      const auto& results = option->results();
      if (!results.empty() && (results.back() == "false" || results.back() == "0")) values.push_back("false");
      r.child_flags.push_back({values.empty() ? name : name + "=false", {}});
      continue;
    }
    r.child_flags.push_back({name, option->results()});
  }
  r.canonical_flag = [&cmd](const std::string& key) -> std::string {
    std::string bare = key;
    while (!bare.empty() && bare.front() == '-') bare.erase(0, 1);
    if (bare.empty()) return {};
    const CLI::Option* option = cmd.get_option_no_throw(bare.size() == 1 ? "-" + bare : "--" + bare);
    return option ? canonical_name(*option) : std::string();
  };
  r.flag_takes_value = [&cmd](const std::string& flag) {
    const CLI::Option* option = cmd.get_option_no_throw(flag);
    return option == nullptr || option->get_expected_min() > 0;
  };
  // Models downloaded with -hf / -mu are the router's too ("owner/repo:QUANT"), and a preset's
  // hf-repo is fetched into that cache (from the cache only with --offline).
  r.list_cache = [] {
    std::vector<server::RouterModel> models;
    for (const auto& cached : hub::list_cached_models()) {
      server::RouterModel m;
      m.id = cached.quant.empty() ? cached.repo : cached.repo + ":" + cached.quant;
      m.path = cached.path.string();
      models.push_back(std::move(m));
    }
    return models;
  };
  r.resolve_hf = [source = args.source](const std::string& hf_repo) {
    hub::HubOptions hub_options;
    hub_options.offline = source.offline;
    hub_options.token = source.hf_token.empty() ? hub::default_token() : source.hf_token;
    return hub::resolve_hf_model(hf_repo, "", hub_options).string();
  };
  return r;
}

int serve(ServeArgs args) {
  auto& o = args.options;
  args.model = resolve_model_source(args.model, args.source);
  // As llama-server: a model from the hub is named by its repo spec (USER/REPO[:QUANT]).
  if (o.alias.empty() && !args.source.hf_repo.empty()) o.alias = args.source.hf_repo;
  o.model_path = args.model.empty() ? runtime::default_model_path().string() : args.model;
  if (!args.api_key_file.empty())
    for (auto& key : read_api_keys(args.api_key_file)) o.api_keys.push_back(std::move(key));
  o.cors = cors_policy(args);
  o.tags = split_list(args.tags);
  if (!o.slot_save_path.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(o.slot_save_path, ec))
      throw_usage_error("--slot-save-path {}: not a folder", o.slot_save_path);
  }
  if (args.seed >= 0) o.sampling.seed = static_cast<uint32_t>(args.seed);
  o.sampling.validate();
  o.max_queue = static_cast<size_t>(args.max_queue);
  o.embd_max_inputs = static_cast<size_t>(args.embd_max_inputs);
  if (!args.pooling.empty()) o.pooling = model::parse_pooling(args.pooling);
  if (args.rerank) {
    // As llama-server's --reranking: embeddings with rank pooling.
    if (o.pooling && *o.pooling != model::Pooling::Rank)
      throw_usage_error("--rerank ranks with rank pooling; --pooling {} asks for another", args.pooling);
    o.embeddings = true;
    o.pooling = model::Pooling::Rank;
  }

  // The other ranks of `mpirun ... --pipeline` serve their stages; rank 0 serves HTTP.
  if (runtime::serve_if_pipeline_worker(o.model_path, o.engine)) return 0;
  return server::serve(o);
}

}  // namespace

void register_serve(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<ServeArgs>();
  auto& o = args->options;
  o.engine.threads = default_threads();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching and a chat page");
  add_model_source_flags(
      cmd, args->source,
      cmd->add_option("-m,--model", args->model,
                      "GGUF model (default: a router over --models-dir / --models-preset when given, else the bundled "
                      "stories260K)"));
  cmd->add_option("--models-dir", args->models_dir,
                  "router mode: serve every GGUF in this folder (FILE.gguf is model FILE; a folder is one model)")
      ->check(non_empty());
  cmd->add_option("--models-preset", args->models_preset,
                  "router mode: INI file of models ([NAME] sections: model = FILE and okapi serve flags; [*] for all)")
      ->check(non_empty());
  cmd->add_option("--models-max", args->models_max,
                  "router mode: models loaded at once, least recently used unloaded beyond (0: no limit)")
      ->capture_default_str()
      ->check(in_range(0, 1024));
  cmd->add_flag("--models-autoload,!--no-models-autoload", args->models_autoload,
                "router mode: load a model on its first request (default), or only by POST /models/load");
  cmd->add_option("--host", o.host, "address to listen on")->capture_default_str()->check(non_empty());
  cmd->add_option("--port", o.port, "port (0: any free port)")->capture_default_str()->check(in_range(0, 65535));
  cmd->add_option("--parallel", o.n_slots, "slots: requests decoded together (also -np)")
      ->capture_default_str()
      ->check(in_range(1, 256));
  add_ctx_flag(cmd, o.n_ctx,
               "context of all slots together, each gets CTX / np (0: the model's trained context; default: that, at "
               "most 4096)");
  add_threads_flag(cmd, o.engine.threads);
  add_batch_flag(cmd, o.batch_size, "tokens per forward pass (prompt chunks fill what decoding slots leave)");
  cmd->add_option("--api-key", o.api_keys, "accept only requests with this key (Authorization: Bearer KEY); repeatable")
      ->check(non_empty());
  cmd->add_option("--api-key-file", args->api_key_file, "file of API keys, one a line")->check(non_empty());
  cmd->add_option("--cors-origins", args->cors_origins,
                  "comma-separated origins allowed to call the API from a browser: * any (the default), localhost "
                  "(http(s) pages on localhost, 127.0.0.1 or [::1]), or exact origins");
  cmd->add_option("--cors-methods", o.cors.methods, "Access-Control-Allow-Methods of a preflight")->capture_default_str();
  cmd->add_option("--cors-headers", o.cors.headers, "Access-Control-Allow-Headers of a preflight")->capture_default_str();
  cmd->add_flag("--cors-credentials,!--no-cors-credentials", o.cors.credentials,
                "allow credentials (with --cors-origins *, the origin is reflected; default on, as llama-server)");
  cmd->add_flag("--metrics", o.metrics, "serve Prometheus metrics at /metrics");
  cmd->add_flag("--verbose,-v", o.verbose,
                "log each request (method, path, status, time) on stderr and add llama-server's __verbose debug "
                "object (the prompt as text, ...) to every completion; a request's \"verbose\" overrides it");
  cmd->add_option("--alias,-a", o.alias, "the model id clients see (default: the file name, or the --hf-repo)")
      ->check(non_empty());
  cmd->add_option("--chat-template-file", o.chat_template_file, "Jinja chat template to use instead of the model's")
      ->check(non_empty());
  cmd->add_option("--chat-template", o.chat_template,
                  "one of llama.cpp's built-in chat templates (chatml, llama3, mistral-v7, gemma, command-r, ...; "
                  "see README) or Jinja source, instead of the model's")
      ->check(non_empty());
  cmd->add_flag("--jinja,!--no-jinja", o.jinja,
                "render the model's Jinja chat template (default); --no-jinja uses llama.cpp's built-in template it "
                "resembles instead, as llama-server");
  cmd->add_option_function<std::string>(
      "--chat-template-kwargs",
      [&o](const std::string& text) { o.template_defaults.kwargs = server::parse_template_kwargs_flag(text); },
      "JSON object of extra chat template variables for every request (a request's chat_template_kwargs "
      "override them)");
  cmd->add_option_function<std::string>(
         "--reasoning",
         [&o](const std::string& mode) { o.template_defaults.reasoning = server::parse_reasoning_mode(mode); },
         "thinking in the prompt: on, off (enable_thinking false: the template closes the thinking block) or "
         "auto (default: on where the template supports it)")
      ->check(CLI::IsMember({"on", "off", "auto", "true", "false", "enabled", "disabled", "1", "0", "-1"}));
  cmd->add_flag("--allow-special-in-content", o.allow_special_in_content,
                "read control tokens (<|im_start|>, </s>, ...) inside message text too, as before; lets a user forge turns");
  cmd->add_option("--queue", args->max_queue, "requests that may wait for a slot (more: 503)")
      ->capture_default_str()
      ->check(in_range(0, 4096));
  cmd->add_option_function<std::string>(
         "--reasoning-format",
         [&o](const std::string& name) { o.reasoning_format = chat::parse_reasoning_format(name); },
         "where a thinking model's reasoning goes: none (left in content), deepseek or auto (reasoning_content; "
         "default auto)")
      ->check(CLI::IsMember({"none", "deepseek", "deepseek-legacy", "auto"}));
  cmd->add_option("--reasoning-budget", o.reasoning_budget,
                  "reasoning tokens before the end of the reasoning is forced: -1 no limit (default), 0 thinking off")
      ->check(in_range(-1, kUnbounded));
  cmd->add_option("--reasoning-budget-message", o.reasoning_budget_message,
                  "text written before the forced end of the reasoning when the budget runs out");
  cmd->add_flag("--embeddings,--embedding", o.embeddings,
                "serve /v1/embeddings and /embeddings (no chat or completions, as llama-server)");
  cmd->add_flag("--rerank,--reranking", args->rerank,
                "serve /v1/rerank with a cross-encoder reranker (embeddings with rank pooling)");
  cmd->add_option("--pooling", args->pooling,
                  "how an input's token vectors become one: none (per token, /embeddings only), mean, cls, last, rank "
                  "(default: the model file's)")
      ->check(CLI::IsMember({"none", "mean", "cls", "last", "rank"}));
  cmd->add_option("--ubatch-size", o.ubatch_size,
                  "(also -ub) embeddings: a forward pass holds the smaller of -b and -ub tokens; a bert-like input must "
                  "fit one")
      ->capture_default_str()
      ->check(in_range(1, 2147483647.0));
  cmd->add_option("--embd-normalize", o.embd_normalize,
                  "pooled embeddings' normalization: -1 none, 0 max-abs to int16, 1 taxicab, 2 euclidean (default), >2 "
                  "p-norm; a request's embd_normalize overrides it")
      ->capture_default_str()
      ->check(in_range(-1, 1000));
  cmd->add_option("--embd-max-inputs", args->embd_max_inputs, "inputs (or rerank documents) one request may send")
      ->capture_default_str()
      ->check(in_range(1, 1'000'000));
  cmd->add_option("-n,--n-predict", o.n_predict,
                  "tokens a request generates at most when it sets no limit (-1: no limit)")
      ->capture_default_str()
      ->check(in_range(-1, 1'000'000'000));
  cmd->add_flag("--context-shift,!--no-context-shift", o.context_shift,
                "when a generation fills its slot's context, drop the older half after the prompt's first token "
                "and go on (the kept tokens are run again); default: stop, truncated");
  cmd->add_flag("--kv-unified", o.kv_unified,
                "each slot may use the whole -c (llama-server's unified cache): every slot gets a cache of -c cells, "
                "n_slots times the memory of -c / np each");
  // Opt-in tools that touch the host (README: "Server tools, MCP servers and the CORS proxy").
  cmd->add_option_function<std::string>(
         "--tools", [&o](const std::string& list) { o.tools = split_list(list); },
         "serve /tools with these built-in tools (comma-separated, or all): read_file, file_glob_search, grep_search, "
         "exec_shell_command, write_file, edit_file, get_info. They read, write and run anything this user may: "
         "expose the server only to those you would give a shell")
      ->check(non_empty());
  cmd->add_option("--tools-runtime", o.tools_runtime,
                  "where the tools run: docker:IMAGE / podman:IMAGE (a container the server starts), "
                  "docker-container:ID / podman-container:ID, ssh:TARGET (default: this host)")
      ->check(non_empty());
  cmd->add_option("--mcp-servers-json", o.mcp_servers_json,
                  "MCP servers to run as child processes, as JSON {\"mcpServers\": {NAME: {command, args, env, cwd, "
                  "timeout_ms}}}; their tools join /tools as NAME_TOOL")
      ->check(non_empty());
  cmd->add_option("--mcp-servers-config", o.mcp_servers_config, "a file holding such an MCP servers config")
      ->check(non_empty());
  cmd->add_flag("--ui-mcp-proxy", o.ui_mcp_proxy,
                "serve /cors-proxy?url=URL, which fetches any http:// URL this server can reach for the caller");
  cmd->add_option("--tags", args->tags, "comma-separated tags /v1/models lists for the model");
  cmd->add_flag("!--no-ui", o.ui, "no chat page: GET / answers 404");
  cmd->add_flag("--slots,!--no-slots", o.endpoint_slots, "GET /slots: the slots' state (default on; --no-slots: 501)");
  cmd->add_option("--slot-save-path", o.slot_save_path,
                  "folder of slot files: POST /slots/ID?action=save|restore with {\"filename\": NAME} saves a slot's "
                  "tokens and KV cache there and restores them (f32/f16 caches)")
      ->check(non_empty());
  cmd->add_option("--slot-prompt-similarity", o.slot_prompt_similarity,
                  "a request goes to the idle slot whose cache holds the largest share of its prompt, if that share "
                  "exceeds this fraction; otherwise to the least recently used slot, so that a new conversation does "
                  "not evict another's cache (0: always the least recently used; also -sps)")
      ->capture_default_str()
      ->check(in_range(0.0, 1.0));
  cmd->add_option("--sleep-idle-seconds", o.sleep_idle_seconds,
                  "unload the model after this many seconds without a request that needs it; the next one loads it "
                  "again (-1: never)")
      ->capture_default_str()
      ->check(in_range(-1, 2147483647.0));
  cmd->add_option("--drain-delay", o.drain_delay_seconds,
                  "seconds between SIGTERM and the drain: /health says 503 at once (a load balancer's health check "
                  "takes the server out) while requests are still served; then new ones are refused and those in "
                  "flight finish. A second signal cuts it short (0: drain at once)")
      ->capture_default_str()
      ->check(in_range(0, 86400));
  // llama-server's flags with nothing to do here: accepted so its command lines work unchanged.
  cmd->add_flag("--cont-batching", args->no_effect, "(no effect: okapi always batches the slots together; also -cb)");
  cmd->add_flag("--no-mmproj", args->no_effect, "(no effect: okapi serves no multimodal projector)");
  cmd->add_flag("--backend-sampling,--backend_sampling", args->no_effect,
                "(no effect: okapi samples on the CPU beside the model; a request's backend_sampling is ignored)");
  cmd->add_flag("--no-cache-idle-slots", args->no_effect,
                "(no effect: idle slots keep their prompt's KV cache for the next request with the same prefix)");
  cmd->add_option("--cache-ram", args->cache_ram_mib,
                  "(no effect: okapi keeps no prompt cache beyond the slots' own KV caches; MiB, -1 no limit)")
      ->check(in_range(-1, 2147483647.0));
  add_drafting_flags(cmd, o.drafting);  // in every slot; a draft model gets a cache per slot
  add_sampling_flags(cmd, o.sampling);
  add_seed_flag(cmd, args->seed);
  add_cache_type_flags(cmd, o.engine.cache);
  add_exact_flags(cmd, o.engine.exact, o.engine.exact_attention, o.engine.exact_ring);
  add_pipeline_flag(cmd, o.engine.pipeline);
  cmd->callback([args, cmd, &result] {
    check_exact_flags(cmd, args->options.engine.exact);
    check_drafting_flags(args->options.drafting);
    check_pipeline_flags(args->options.engine.pipeline, args->options.drafting);
    if (args->options.engine.pipeline && !args->options.slot_save_path.empty())
      throw_usage_error("--slot-save-path saves a slot's KV cache, which --pipeline splits across the ranks: use one "
                        "or the other");
    const bool router = !cmd->get_option("--models-dir")->empty() || !cmd->get_option("--models-preset")->empty() ||
                        !cmd->get_option("--models-max")->empty() || !cmd->get_option("--models-autoload")->empty();
    if (router && (!args->model.empty() || !args->source.hf_repo.empty() || !args->source.model_url.empty()))
      throw_usage_error("-m (or --hf-repo, --model-url) serves one model; --models-dir, --models-preset, --models-max and --[no-]models-autoload "
                        "are for a router over many: give one or the other");
    if (result.dry_run) return;
    if (router) {
      const auto options = router_options(*args, *cmd);
      result.exit_code = server::serve_router(options);
      return;
    }
    result.exit_code = serve(*args);
  });
}

}  // namespace okapi::cli
