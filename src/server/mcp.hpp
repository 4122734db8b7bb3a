// MCP servers (Model Context Protocol) for okapi serve, as llama-server's --mcp-servers-json /
// --mcp-servers-config: each configured server is a child process speaking JSON-RPC 2.0 as one JSON
// message a line (NDJSON) over its stdin and stdout. At startup each is started once to list its
// tools, then stopped; a tool call starts it again (and again after it died). Its tools appear in
// GET /tools as "<server>_<tool>" and are called through POST /tools (tools_builtin.hpp).
//
// The config is Cursor's shape:
//   {"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}, "cwd": "...",
//                            "timeout_ms": 30000}}}
// Running them runs code on the host: they are off unless the operator passes a config.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace okapi::server {

class ChildProcess;

struct McpServerConfig {
  std::string name;  // the config's key; tools are called "<name>_<tool>"
  std::string command;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;  // set over the server's environment
  std::string cwd;
  int timeout_ms = 30000;  // one tool call, from sending it to its reply
};

// The servers of a config (`source` names it in errors: "--mcp-servers-json", a file name).
// Throws okapi::Error for text that is not JSON or an entry of the wrong shape; an entry without a
// command is skipped (as llama-server), and so is a config without "mcpServers".
std::vector<McpServerConfig> parse_mcp_config(std::string_view text, const std::string& source);

struct McpToolDef {
  std::string server;
  std::string name;  // the tool's own name, without "<server>_"
  std::string description;
  nlohmann::ordered_json input_schema;  // null when the server gave none
};

// One running MCP server: its process and the JSON-RPC session over its pipes. Calls are one at a
// time (a mutex); each waits at most the config's timeout_ms, polling so that `stop` ends it
// within ~50 ms. Lines that are not JSON, notifications and stale replies (of a call that timed
// out) are skipped while waiting for the reply.
class McpSession {
 public:
  // Starts the process; throws okapi::Error when it cannot be run.
  explicit McpSession(const McpServerConfig& config);
  ~McpSession();
  McpSession(const McpSession&) = delete;
  McpSession& operator=(const McpSession&) = delete;

  bool alive();
  // The server's tools (initializing the session first); empty on failure (see diagnostics()).
  std::vector<McpToolDef> list_tools(const std::function<bool()>& stop, std::chrono::milliseconds budget);
  // {"plain_text_response": text} (the result's text parts, a line each) or {"error": message}.
  nlohmann::ordered_json call_tool(const std::string& tool, const nlohmann::ordered_json& arguments,
                                   const std::function<bool()>& stop);
  // The last failure and the tail of the server's stderr.
  std::string diagnostics();

 private:
  McpServerConfig config_;
  std::unique_ptr<ChildProcess> process_;
  std::mutex process_mutex_;  // alive() takes only this one: it must not wait behind a slow call
  std::mutex mutex_;          // one call at a time; guards everything below
  int64_t next_id_ = 1;
  bool initialized_ = false;
  std::string out_buffer_;  // stdout bytes not yet split into lines
  std::string err_tail_;    // the last few KB of stderr
  std::string last_error_;
  bool skipping_long_line_ = false;

  bool ensure_initialized(const std::function<bool()>& stop, std::chrono::steady_clock::time_point deadline);
  // The reply to `request` (which has an id), or {"error": {"message": ...}}.
  nlohmann::ordered_json rpc(const nlohmann::ordered_json& request, const std::function<bool()>& stop,
                             std::chrono::steady_clock::time_point deadline);
  bool send(const nlohmann::ordered_json& message, const std::function<bool()>& stop,
            std::chrono::steady_clock::time_point deadline);
  void drain_stderr();
};

// The configured servers: the tools found at startup, and the sessions tool calls (re)start.
class McpManager {
 public:
  // `stopping` is polled by every call in flight: when it says so, the call returns at once.
  McpManager(std::vector<McpServerConfig> configs, std::function<bool()> stopping);
  ~McpManager();

  // Starts each server, lists its tools and stops it; a server that cannot start or answer (in
  // `per_server` at most) is logged and contributes no tools.
  void warm_up(std::chrono::milliseconds per_server = std::chrono::seconds(10));
  bool empty() const { return configs_.empty(); }
  std::vector<McpToolDef> tools() const;
  // Calls `tool` of `server`, starting its session when none runs (or it died). A server that
  // failed to start is not tried again for 5 s. {"plain_text_response"} or {"error"}.
  nlohmann::ordered_json call_tool(const std::string& server, const std::string& tool,
                                   const nlohmann::ordered_json& arguments);

 private:
  std::vector<McpServerConfig> configs_;
  std::function<bool()> stopping_;
  mutable std::mutex mutex_;  // guards the maps and registry_
  std::map<std::string, std::shared_ptr<McpSession>> sessions_;
  std::map<std::string, std::chrono::steady_clock::time_point> cooldown_until_;
  std::vector<McpToolDef> registry_;

  std::shared_ptr<McpSession> session(const std::string& server);
};

}  // namespace okapi::server
