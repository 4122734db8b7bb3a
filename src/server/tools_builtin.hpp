// llama-server's server tools (--tools), for okapi serve: GET /tools lists them, POST /tools
// {"tool": NAME, "params": {...}, "stream": false} runs one and answers its JSON result (a tool's
// own failure is {"error": "..."} with 200, as llama-server). The built-in tools are read_file,
// file_glob_search, grep_search, exec_shell_command (streams with "stream": true), write_file,
// edit_file and get_info; MCP servers' tools (mcp.hpp) join them as "<server>_<tool>".
//
// They read, write and run anything the server's user may, on the host or in the isolate a
// runtime names ("docker-container:ID", "podman-container:ID", "ssh:TARGET"; --tools-runtime or the
// x-tool-runtime header). So nothing here is on unless the operator passes --tools (or an MCP
// config); without, /tools answers 403 as llama-server's. Headers: x-tool-cwd (relative paths and
// commands start there; it overrides a "cwd" param), x-tool-runtime, x-resp-type: base64
// (read_file answers the bytes in base64).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/http_server.hpp"

namespace okapi::server {

class McpManager;
class Tool;
struct ToolsRuntime;

// Matches `text` against a glob: '*' any run of characters but '/', '**' any run at all, "**/" any
// number of whole directories (none too: "src/**/*.c" matches "src/a.c", where llama-server's does
// not), '?' one character but '/', [abc] / [a-z] / [!abc] a class. Pattern x text steps (no
// backtracking blow-up on hostile patterns).
bool glob_match(std::string_view pattern, std::string_view text);

class ServerTools {
 public:
  // `enabled`: tool names, or "all". `runtime`: --tools-runtime ("" runs on the host; a container
  // or ssh target checked now; "docker:IMAGE" / "podman:IMAGE" starts a container the server owns
  // until it stops). `mcp` may be null. `stopping` is polled by long calls (the server is
  // stopping: they end at once). Throws okapi::UsageError for an unknown tool or runtime.
  ServerTools(const std::vector<std::string>& enabled, const std::string& runtime, McpManager* mcp,
              std::function<bool()> stopping);
  ~ServerTools();

  // The names --tools accepts (besides "all").
  static std::vector<std::string> builtin_names();
  // GET /tools: each tool's {display_name, tool, type, permissions, uses_cwd, definition}.
  nlohmann::ordered_json list() const;
  // POST /tools.
  void handle_call(const http::Request& req, http::Response& res) const;

 private:
  std::vector<std::unique_ptr<Tool>> tools_;
  std::unique_ptr<ToolsRuntime> runtime_;
  std::function<bool()> stopping_;
};

}  // namespace okapi::server
