// okapi serve's router mode (llama-server's, tools/server/server-models.cpp): one front server that
// serves many models, each in a child `okapi serve -m FILE` process on a loopback port, started on
// first use (or POST /models/load) and stopped least recently used beyond --models-max (or by POST
// /models/unload). Requests are routed by their `model` (the JSON body's field for POST, ?model= for
// GET) and proxied to the child, streams passed on as they arrive. When every instance is taken by
// requests in flight, a request for another model waits in a FIFO queue (one entry per model, so
// the requests for one model share one eviction); a client that leaves the queue gives up its place.
//
// Models come from --models-dir (FILE.gguf is model FILE; a folder of GGUFs is one model, its first
// shard, mmproj and draft files skipped), --models-preset (an INI file: a section per model with
// llama-server's flag names as keys, [*] for every model) and the download cache (a callback).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace okapi::server {

// A model the router can start.
struct RouterModel {
  std::string id;          // what requests name in `model`
  std::string path;        // the GGUF (empty: resolved from hf_repo when loaded)
  std::string source;      // "models_dir", "preset" or "cache"
  std::string hf_repo;     // a preset's hf-repo (resolved through the cache when loaded)
  // Flags of this model's child, preset keys as written ("c" -> "4096"; "jinja" -> "true").
  std::vector<std::pair<std::string, std::string>> options;
  std::string preset_ini;  // the preset's section as INI text (GET /models shows it)
  bool load_on_startup = false;
  int stop_timeout_s = 10;  // after SIGTERM, SIGKILL
  bool hidden = false;      // a cache entry a preset with dedup-cache-models hides from the list
  bool operator==(const RouterModel&) const = default;
};

// One section of an INI preset file: its name and its keys in order. Lines "key = value"; ';' and
// '#' start comments; keys before the first section are global ("version") and go to section "".
struct IniSection {
  std::string name;
  std::vector<std::pair<std::string, std::string>> keys;
};
// Throws okapi::Error naming the file and line for a line that is none of those.
std::vector<IniSection> parse_ini(const std::string& text, const std::string& file_name);

// The models of a --models-dir folder, sorted by id. Throws when it is not a folder.
std::vector<RouterModel> scan_models_dir(const std::string& dir);
// The models of a preset file. `[*]`'s keys are every model's defaults; a section whose name is
// a model of `known` (a models-dir or cache model) configures that model.
std::vector<RouterModel> read_preset(const std::string& path, const std::vector<RouterModel>& known);

struct RouterOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string models_dir;
  std::string models_preset;
  int models_max = 4;  // instances at once; 0: no limit
  bool models_autoload = true;
  std::vector<std::string> api_keys;
  std::vector<std::string> cors_origins;
  size_t max_body_bytes = size_t{8} << 20;
  // The okapi binary a child runs (empty: this process's executable).
  std::string executable;
  // Flags every child gets, from the router's own command line (router-only flags left out):
  // canonical flag ("--ctx-size") and its values (none for a switch; several for a repeated one).
  std::vector<std::pair<std::string, std::vector<std::string>>> child_flags;
  // A preset key ("c", "ctx-size", "--ctx-size") as the canonical flag okapi serve knows, and
  // whether it takes a value; empty when okapi serve has no such flag.
  std::function<std::string(const std::string& key)> canonical_flag;
  std::function<bool(const std::string& flag)> flag_takes_value;
  // The download cache's models ("owner/repo:QUANT" -> file), and an hf-repo's file in the cache;
  // either may be empty (no cache support). resolve_hf throws okapi::Error when not cached.
  std::function<std::vector<RouterModel>()> list_cache;
  std::function<std::string(const std::string& hf_repo)> resolve_hf;
  // Called once the socket listens, with the port (tests).
  std::function<void(int port)> on_listening;
};

// Every model the sources list now (models-dir, cache, preset), preset entries last; throws
// okapi::Error for an unreadable preset or a missing models-dir.
std::vector<RouterModel> discover_models(const RouterOptions& options);

// Runs the router until SIGTERM or SIGINT, then stops the children and returns 0.
int serve_router(const RouterOptions& options);

}  // namespace okapi::server
