#include "server/mcp.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "server/subprocess.hpp"

namespace okapi::server {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kProtocolVersion = "2024-11-05";
constexpr size_t kMaxLineBytes = size_t{8} << 20;  // a reply longer than this is dropped
constexpr size_t kStderrTailBytes = 4096;
constexpr auto kCooldown = std::chrono::seconds(5);
constexpr auto kPoll = std::chrono::milliseconds(50);

std::string rpc_error_message(const Json& reply) {
  const auto it = reply.find("error");
  if (it == reply.end()) return "unknown error";
  if (it->is_object()) {
    const auto message = it->find("message");
    if (message != it->end() && message->is_string()) return message->get<std::string>();
    return "unknown error";
  }
  if (it->is_string()) return it->get<std::string>();
  return "unknown error";
}

// An MCP tools/call result as /tools answers: its text parts joined by newlines, or an error
// when the server flagged one (isError).
Json result_to_response(const Json& result) {
  std::string text;
  if (result.is_object()) {
    const auto content = result.find("content");
    if (content != result.end() && content->is_array()) {
      for (const auto& part : *content) {
        if (!part.is_object()) continue;
        const auto type = part.find("type");
        const auto part_text = part.find("text");
        if (type == part.end() || *type != "text" || part_text == part.end() || !part_text->is_string()) continue;
        if (!text.empty()) text += "\n";
        text += part_text->get<std::string>();
      }
    }
    const auto is_error = result.find("isError");
    if (is_error != result.end() && is_error->is_boolean() && is_error->get<bool>())
      return {{"error", text.empty() ? std::string("MCP tool returned an error") : text}};
  }
  return {{"plain_text_response", text}};
}

Json error_reply(const std::string& message) { return {{"error", {{"code", -32603}, {"message", message}}}}; }

}  // namespace

std::vector<McpServerConfig> parse_mcp_config(std::string_view text, const std::string& source) {
  Json config;
  try {
    config = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_error("{}: the MCP servers config is not JSON: {}", source, e.what());
  }
  std::vector<McpServerConfig> servers;
  if (!config.is_object()) throw_error("{}: the MCP servers config must be a JSON object", source);
  const auto list = config.find("mcpServers");
  if (list == config.end()) return servers;
  if (!list->is_object()) throw_error("{}: \"mcpServers\" must be an object of servers by name", source);
  for (const auto& item : list->items()) {
    // Not a structured binding: clang 14 cannot capture one in the lambda below.
    const std::string& name = item.key();
    const Json& entry = item.value();
    if (!entry.is_object()) throw_error("{}: MCP server '{}' must be an object", source, name);
    if (name.empty()) throw_error("{}: an MCP server needs a non-empty name", source);
    McpServerConfig server;
    server.name = name;
    const auto text_field = [&](const char* key) {
      const auto it = entry.find(key);
      if (it == entry.end() || it->is_null()) return std::string();
      if (!it->is_string()) throw_error("{}: MCP server '{}': \"{}\" must be a string", source, name, key);
      return it->get<std::string>();
    };
    server.command = text_field("command");
    server.cwd = text_field("cwd");
    if (const auto it = entry.find("args"); it != entry.end() && !it->is_null()) {
      if (!it->is_array()) throw_error("{}: MCP server '{}': \"args\" must be an array of strings", source, name);
      for (const auto& arg : *it) {
        if (!arg.is_string()) throw_error("{}: MCP server '{}': \"args\" must be an array of strings", source, name);
        server.args.push_back(arg.get<std::string>());
      }
    }
    if (const auto it = entry.find("env"); it != entry.end() && !it->is_null()) {
      if (!it->is_object()) throw_error("{}: MCP server '{}': \"env\" must be an object of strings", source, name);
      for (const auto& [key, value] : it->items()) {
        if (!value.is_string() || key.empty() || key.find('=') != std::string::npos)
          throw_error("{}: MCP server '{}': \"env\" must map variable names to strings", source, name);
        server.env.emplace_back(key, value.get<std::string>());
      }
    }
    if (const auto it = entry.find("timeout_ms"); it != entry.end() && !it->is_null()) {
      if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 3'600'000)
        throw_error("{}: MCP server '{}': \"timeout_ms\" must be an integer in [1, 3600000]", source, name);
      server.timeout_ms = static_cast<int>(it->get<int64_t>());
    }
    if (server.command.empty()) {
      std::fprintf(stderr, "okapi: warning: MCP server '%s' has no command, skipped\n", name.c_str());
      continue;
    }
    servers.push_back(std::move(server));
  }
  return servers;
}

// --- McpSession ---

McpSession::McpSession(const McpServerConfig& config) : config_(config) {
  SpawnOptions options;
  options.argv.push_back(config.command);
  options.argv.insert(options.argv.end(), config.args.begin(), config.args.end());
  options.cwd = config.cwd;
  options.env = config.env;
  process_ = std::make_unique<ChildProcess>(options);
}

McpSession::~McpSession() {
  std::lock_guard lock(process_mutex_);
  process_.reset();  // kills the server's process group and reaps it
}

bool McpSession::alive() {
  std::lock_guard lock(process_mutex_);
  return process_ && process_->running();
}

std::string McpSession::diagnostics() {
  std::lock_guard lock(mutex_);
  std::string out = last_error_;
  if (!err_tail_.empty()) out += (out.empty() ? "" : "; ") + std::string("last stderr: ") + err_tail_;
  return out;
}

void McpSession::drain_stderr() {
  // An undrained stderr pipe would block the server once full: keep only a tail, for diagnostics.
  if (process_->stderr_fd() < 0) return;
  ChildProcess::read_some(process_->stderr_fd(), err_tail_, std::chrono::milliseconds(0));
  if (err_tail_.size() > kStderrTailBytes) err_tail_.erase(0, err_tail_.size() - kStderrTailBytes);
}

bool McpSession::send(const Json& message, const std::function<bool()>& stop, Clock::time_point deadline) {
  const std::string line = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return process_->write_stdin(line, deadline, stop);
}

Json McpSession::rpc(const Json& request, const std::function<bool()>& stop, Clock::time_point deadline) {
  if (!send(request, stop, deadline)) return error_reply("transport closed");
  const Json& id = request.at("id");
  bool open = true;
  for (;;) {
    // Whole lines first: a notification and the reply may come in one read.
    size_t newline;
    while ((newline = out_buffer_.find('\n')) != std::string::npos) {
      std::string line = out_buffer_.substr(0, newline);
      out_buffer_.erase(0, newline + 1);
      if (skipping_long_line_) {
        skipping_long_line_ = false;
        continue;
      }
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      Json reply = Json::parse(line, nullptr, false);
      if (reply.is_discarded() || !reply.is_object()) continue;  // not JSON-RPC: skipped
      // No id: a notification. Another id: the late reply of a call that timed out.
      const auto reply_id = reply.find("id");
      if (reply_id != reply.end() && *reply_id == id) return reply;
    }
    if (out_buffer_.size() > kMaxLineBytes) {
      out_buffer_.clear();
      skipping_long_line_ = true;
    }
    if (stop && stop()) return error_reply("cancelled");
    if (Clock::now() >= deadline) return error_reply("request timed out");
    if (!open) return error_reply("transport closed");
    open = ChildProcess::read_some(process_->stdout_fd(), out_buffer_, kPoll);
    drain_stderr();
  }
}

bool McpSession::ensure_initialized(const std::function<bool()>& stop, Clock::time_point deadline) {
  if (initialized_) return true;
  const Json request = {{"jsonrpc", "2.0"},
                        {"id", next_id_++},
                        {"method", "initialize"},
                        {"params",
                         {{"protocolVersion", kProtocolVersion},
                          {"capabilities", Json::object()},
                          {"clientInfo", {{"name", "okapi"}, {"version", "1.0"}}}}}};
  const Json reply = rpc(request, stop, deadline);
  if (!reply.contains("result")) {
    last_error_ = "initialize failed: " + rpc_error_message(reply);
    return false;
  }
  send({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}, stop, deadline);
  initialized_ = true;
  return true;
}

std::vector<McpToolDef> McpSession::list_tools(const std::function<bool()>& stop, std::chrono::milliseconds budget) {
  std::lock_guard lock(mutex_);
  const auto deadline = Clock::now() + budget;
  std::vector<McpToolDef> tools;
  if (!ensure_initialized(stop, deadline)) return tools;
  const Json reply = rpc({{"jsonrpc", "2.0"}, {"id", next_id_++}, {"method", "tools/list"}}, stop, deadline);
  const auto result = reply.find("result");
  if (result == reply.end()) {
    last_error_ = "tools/list failed: " + rpc_error_message(reply);
    return tools;
  }
  if (!result->is_object()) return tools;
  const auto list = result->find("tools");
  if (list == result->end() || !list->is_array()) return tools;
  for (const auto& t : *list) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || t["name"].get<std::string>().empty())
      continue;
    McpToolDef def;
    def.server = config_.name;
    def.name = t["name"].get<std::string>();
    if (const auto d = t.find("description"); d != t.end() && d->is_string()) def.description = d->get<std::string>();
    if (const auto s = t.find("inputSchema"); s != t.end() && s->is_object()) def.input_schema = *s;
    tools.push_back(std::move(def));
  }
  return tools;
}

Json McpSession::call_tool(const std::string& tool, const Json& arguments, const std::function<bool()>& stop) {
  std::lock_guard lock(mutex_);
  const auto deadline = Clock::now() + std::chrono::milliseconds(config_.timeout_ms);
  if (!ensure_initialized(stop, deadline)) return {{"error", last_error_}};
  const Json request = {{"jsonrpc", "2.0"},
                        {"id", next_id_++},
                        {"method", "tools/call"},
                        {"params", {{"name", tool}, {"arguments", arguments}}}};
  const Json reply = rpc(request, stop, deadline);
  if (reply.contains("error")) return {{"error", rpc_error_message(reply)}};
  if (const auto result = reply.find("result"); result != reply.end()) return result_to_response(*result);
  return {{"error", "invalid response from MCP server"}};
}

// --- McpManager ---

McpManager::McpManager(std::vector<McpServerConfig> configs, std::function<bool()> stopping)
    : configs_(std::move(configs)), stopping_(std::move(stopping)) {}

McpManager::~McpManager() {
  std::map<std::string, std::shared_ptr<McpSession>> sessions;
  {
    std::lock_guard lock(mutex_);
    sessions.swap(sessions_);
  }
  sessions.clear();  // each session kills and reaps its server
}

void McpManager::warm_up(std::chrono::milliseconds per_server) {
  std::vector<McpToolDef> found;
  for (const auto& config : configs_) {
    try {
      McpSession session(config);
      auto tools = session.list_tools(stopping_, per_server);
      if (tools.empty() && !session.diagnostics().empty())
        std::fprintf(stderr, "okapi: warning: MCP server '%s': %s\n", config.name.c_str(), session.diagnostics().c_str());
      std::fprintf(stderr, "okapi: MCP server '%s': %zu tools\n", config.name.c_str(), tools.size());
      for (auto& t : tools) found.push_back(std::move(t));
    } catch (const Error& e) {
      std::fprintf(stderr, "okapi: warning: MCP server '%s' did not start: %s\n", config.name.c_str(), e.what());
    }
  }
  std::lock_guard lock(mutex_);
  registry_ = std::move(found);
}

std::vector<McpToolDef> McpManager::tools() const {
  std::lock_guard lock(mutex_);
  return registry_;
}

std::shared_ptr<McpSession> McpManager::session(const std::string& server) {
  std::shared_ptr<McpSession> dead;  // destroyed (killed, reaped) outside the lock
  std::lock_guard lock(mutex_);
  if (stopping_ && stopping_()) return nullptr;
  const auto now = Clock::now();
  if (const auto it = cooldown_until_.find(server); it != cooldown_until_.end()) {
    if (now < it->second) return nullptr;
    cooldown_until_.erase(it);
  }
  if (const auto it = sessions_.find(server); it != sessions_.end()) {
    if (it->second->alive()) return it->second;
    std::fprintf(stderr, "okapi: warning: MCP server '%s' exited (%s); starting it again\n", server.c_str(),
                 it->second->diagnostics().c_str());
    dead = std::move(it->second);
    sessions_.erase(it);
  }
  const McpServerConfig* config = nullptr;
  for (const auto& c : configs_)
    if (c.name == server) config = &c;
  if (!config) return nullptr;
  try {
    auto fresh = std::make_shared<McpSession>(*config);
    sessions_[server] = fresh;
    return fresh;
  } catch (const Error& e) {
    std::fprintf(stderr, "okapi: warning: MCP server '%s' did not start: %s\n", server.c_str(), e.what());
    cooldown_until_[server] = now + kCooldown;
    return nullptr;
  }
}

Json McpManager::call_tool(const std::string& server, const std::string& tool, const Json& arguments) {
  const auto s = session(server);
  if (!s) return {{"error", "MCP server unavailable: " + server}};
  return s->call_tool(tool, arguments, stopping_);
}

}  // namespace okapi::server
