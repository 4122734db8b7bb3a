// The server's slots and lifecycle, as llama-server's: GET /slots (--no-slots: 501,
// ?fail_on_no_slot=1: 503 when none is idle), POST /slots/{id}?action=save|restore|erase under
// --slot-save-path (runtime/slot_file.hpp), and sleep: with --sleep-idle-seconds N the model is
// unloaded after N seconds without a request that needs it, and loaded again by the next one.
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <shared_mutex>

#include "core/error.hpp"
#include "server/server_state.hpp"

namespace okapi::server {

namespace {

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A query parameter's value ("" when absent), percent-decoded.
std::string query_param(std::string_view query, std::string_view name) {
  size_t begin = 0;
  while (begin <= query.size()) {
    size_t end = query.find('&', begin);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view item = query.substr(begin, end - begin);
    const size_t eq = item.find('=');
    if (item.substr(0, eq) == name) {
      const std::string_view raw = eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
      std::string out;
      for (size_t i = 0; i < raw.size(); ++i) {
        const auto hex = [](char c) -> int {
          if (c >= '0' && c <= '9') return c - '0';
          if (c >= 'a' && c <= 'f') return c - 'a' + 10;
          if (c >= 'A' && c <= 'F') return c - 'A' + 10;
          return -1;
        };
        if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
          out.push_back(static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2])));
          i += 2;
        } else {
          out.push_back(raw[i] == '+' ? ' ' : raw[i]);
        }
      }
      return out.empty() && eq == std::string_view::npos ? std::string("1") : out;
    }
    begin = end + 1;
  }
  return {};
}

// A slot file's name: one plain file name inside --slot-save-path, never a path out of it.
void check_slot_file_name(const std::string& name) {
  const auto refuse = [&](const char* why) { throw_bad_request("filename", "Invalid filename: {}", why); };
  if (name.empty()) refuse("it is empty");
  if (name.size() > 255) refuse("it is longer than 255 bytes");
  if (name == "." || name == "..") refuse("it names a folder");
  if (name.front() == '.') refuse("it starts with '.'");
  if (name.find("..") != std::string::npos) refuse("it contains '..'");
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '/' || c == '\\') refuse("it contains a path separator; give a file name inside --slot-save-path");
    if (u < 0x20 || u == 0x7f) refuse("it contains a control character");
    if (c == ':' || c == '*' || c == '?' || c == '"' || c == '<' || c == '>' || c == '|')
      refuse("it contains one of : * ? \" < > |");
  }
  // Valid UTF-8 only (a name the file system and the JSON response can both carry).
  for (size_t i = 0; i < name.size();) {
    const auto c = static_cast<unsigned char>(name[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > name.size()) refuse("it is not valid UTF-8");
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(name[i + k]) >> 6) != 0x2) refuse("it is not valid UTF-8");
    i += n;
  }
}

}  // namespace

void ServerState::add_slot_routes() {
  add_route("GET", "/slots", [this](const Request& req, Response& res) { handle_slots(req, res); });
  add_route("POST", "/slots/*", [this](const Request& req, Response& res) { handle_slot_action(req, res); });
}

void ServerState::handle_slots(const Request& req, Response& res) {
  if (!options_.endpoint_slots)
    throw ApiError(501, "not_supported_error", "This server does not support slots endpoint. Start it with `--slots`");
  // Embeddings mode has no slots: every request's inputs share the passes.
  const Json slots = embeddings_mode() ? Json::array() : scheduler_->slots_json();
  if (!query_param(req.query, "fail_on_no_slot").empty()) {
    bool idle = false;
    for (const auto& slot : slots) idle = idle || !slot.value("is_processing", false);
    if (!idle) throw ApiError(503, "unavailable_error", "no slot available");
  }
  send_json(res, 200, slots);
}

void ServerState::handle_slot_action(const Request& req, Response& res) {
  if (options_.slot_save_path.empty())
    throw ApiError(501, "not_supported_error",
                   "This server does not support slots action. Start it with `--slot-save-path`");
  if (embeddings_mode()) throw ApiError(501, "not_supported_error", "an embeddings server has no slots to save");
  const std::string id_text = req.path.substr(std::string_view("/slots/").size());
  int id = -1;
  const bool digits = !id_text.empty() && id_text.size() <= 6 &&
                      id_text.find_first_not_of("0123456789") == std::string::npos;
  if (digits) id = std::stoi(id_text);
  if (id < 0 || id >= options_.n_slots) throw_bad_request("id_slot", "Invalid slot ID '{}'", id_text);
  const std::string action = query_param(req.query, "action");
  const auto started = std::chrono::steady_clock::now();
  const auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  };
  if (action == "erase") {
    const int64_t erased = scheduler_->erase_slot(id);
    send_json(res, 200, {{"id_slot", id}, {"n_erased", erased}});
    return;
  }
  if (action != "save" && action != "restore")
    throw_bad_request("action", "Invalid action '{}': save, restore or erase", action);
  const Json body = parse_body(req.body);
  const auto it = body.find("filename");
  if (it == body.end() || !it->is_string()) throw_bad_request("filename", "'filename' is required (a string)");
  const std::string filename = it->get<std::string>();
  check_slot_file_name(filename);
  const std::filesystem::path path = std::filesystem::path(options_.slot_save_path) / filename;
  try {
    if (action == "save") {
      const runtime::SlotFileStats saved = scheduler_->save_slot(id, path);
      send_json(res, 200,
                {{"id_slot", id},
                 {"filename", filename},
                 {"n_saved", saved.tokens},
                 {"n_written", saved.bytes},
                 {"timings", {{"save_ms", elapsed_ms()}}}});
    } else {
      const runtime::SlotFileStats restored = scheduler_->restore_slot(id, path);
      send_json(res, 200,
                {{"id_slot", id},
                 {"filename", filename},
                 {"n_restored", restored.tokens},
                 {"n_read", restored.bytes},
                 {"timings", {{"restore_ms", elapsed_ms()}}}});
    }
  } catch (const Error& e) {
    // A file that does not fit the slot is the request's fault; a store that cannot save, the server's.
    if (action == "restore") throw ApiError(400, "invalid_request_error", e.what(), "filename");
    throw ApiError(500, "server_error", e.what());
  }
}

void ServerState::run_route(const Route& route, const Request& req, Response& res) {
  std::shared_lock lock(model_mutex_);
  while (route.wakes && sleeping_.load()) {
    lock.unlock();
    {
      std::unique_lock exclusive(model_mutex_);
      if (sleeping_.load()) wake_up();
    }
    lock.lock();
  }
  // Only requests that need the model keep it awake (polling /props must not).
  struct Running {
    ServerState& state;
    bool counts;
    ~Running() {
      if (!counts) return;
      state.last_activity_ms_.store(steady_ms());
      state.handlers_running_.fetch_sub(1);
    }
  } running{*this, route.wakes};
  if (route.wakes) handlers_running_.fetch_add(1);
  const auto started = std::chrono::steady_clock::now();
  route.handler(req, res);
  if (options_.verbose)
    std::fprintf(stderr, "okapi: %s %s -> %d (%.1f ms)\n", req.method.c_str(), req.target.c_str(), res.status,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
}

void ServerState::fall_asleep() {
  asleep_props_ = props();
  asleep_props_["is_sleeping"] = true;
  asleep_models_ = models_json();
  retire_counters();
  sleeping_.store(true);
  unload();
  malloc_trim(0);  // hand the freed heap back to the system, not only to malloc
  std::fprintf(stderr, "okapi: idle for %lld s: model unloaded until the next request that needs it\n",
               static_cast<long long>(options_.sleep_idle_seconds));
}

void ServerState::wake_up() {
  const auto started = std::chrono::steady_clock::now();
  try {
    load();
  } catch (...) {
    unload();
    throw;
  }
  sleeping_.store(false);
  last_activity_ms_.store(steady_ms());
  std::fprintf(stderr, "okapi: woke up: model loaded in %.0f ms\n",
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
}

void ServerState::start_sleep_watch() {
  if (options_.sleep_idle_seconds <= 0) return;
  last_activity_ms_.store(steady_ms());
  sleep_watch_stop_.store(false);
  sleep_watch_ = std::thread([this] {
    const int64_t idle_ms = options_.sleep_idle_seconds * 1000;
    while (!sleep_watch_stop_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (sleeping_.load() || draining()) continue;
      // A stream being written or a handler running keeps the model awake.
      if (in_flight_.load() > 0 || handlers_running_.load() > 0) {
        last_activity_ms_.store(steady_ms());
        continue;
      }
      if (steady_ms() - last_activity_ms_.load() < idle_ms) continue;
      std::unique_lock exclusive(model_mutex_, std::try_to_lock);
      if (!exclusive.owns_lock() || sleeping_.load() || in_flight_.load() > 0) continue;
      if (!scheduler_ && !embedder_) continue;
      fall_asleep();
    }
  });
}

void ServerState::stop_sleep_watch() {
  sleep_watch_stop_.store(true);
  if (sleep_watch_.joinable()) sleep_watch_.join();
}

}  // namespace okapi::server
