#include "server/router.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "server/api_error.hpp"
#include "server/api_key.hpp"
#include "server/build_info.hpp"
#include "server/http_client.hpp"
#include "server/http_server.hpp"
#include "server/request_params.hpp"
#include "server/responses.hpp"
#include "server/server_state.hpp"

namespace okapi::server {

namespace fs = std::filesystem;
using http::Request;
using http::Response;

// ---------------------------------------------------------------------------------------------
// Sources: INI presets and the models folder.

namespace {

std::string_view trim_view(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_true(std::string_view value) {
  const std::string v = lower(trim_view(value));
  return v == "1" || v == "true" || v == "on" || v == "yes" || v == "enabled";
}

bool is_false(std::string_view value) {
  const std::string v = lower(trim_view(value));
  return v == "0" || v == "false" || v == "off" || v == "no" || v == "disabled";
}

// Companion files of a model folder that are not models themselves.
bool is_mmproj(std::string_view name) { return lower(name).rfind("mmproj", 0) == 0; }
bool is_draft(std::string_view name) {
  const std::string n = lower(name);
  return n.rfind("draft", 0) == 0 || n.find("-draft") != std::string::npos || n.find("_draft") != std::string::npos;
}

// Keys of a preset that the router itself acts on or owns: never passed to a child as flags.
bool router_key(const std::string& key) {
  static const char* const keys[] = {"model", "m", "hf-repo", "hf", "hfr", "hf-file", "hff", "host", "port",
                                     "api-key", "api-key-file", "alias", "a", "models-dir", "models-preset",
                                     "models-max", "models-autoload", "no-models-autoload", "load-on-startup",
                                     "stop-timeout", "dedup-cache-models", "version", "cors-origins"};
  for (const char* k : keys)
    if (key == k) return true;
  return false;
}

std::string section_ini(const std::string& name, const std::vector<std::pair<std::string, std::string>>& keys) {
  std::string out = fmt::format("[{}]\n", name);
  for (const auto& [k, v] : keys) out += fmt::format("{} = {}\n", k, v);
  return out;
}

void set_key(std::vector<std::pair<std::string, std::string>>& keys, const std::string& key, const std::string& value) {
  for (auto& [k, v] : keys)
    if (k == key) {
      v = value;
      return;
    }
  keys.emplace_back(key, value);
}

const std::string* find_key(const std::vector<std::pair<std::string, std::string>>& keys, const std::string& key) {
  for (const auto& [k, v] : keys)
    if (k == key) return &v;
  return nullptr;
}

RouterModel dir_model(std::string id, std::string path) {
  RouterModel m;
  m.id = std::move(id);
  m.path = std::move(path);
  m.source = "models_dir";
  return m;
}

}  // namespace

std::vector<IniSection> parse_ini(const std::string& text, const std::string& file_name) {
  std::vector<IniSection> sections(1);  // keys before the first section: ""
  size_t begin = 0;
  int line_number = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    ++line_number;
    std::string_view line = trim_view(std::string_view(text).substr(begin, end - begin));
    begin = end + 1;
    if (line.empty() || line.front() == ';' || line.front() == '#') continue;
    if (line.front() == '[') {
      if (line.back() != ']' || line.size() < 3)
        throw_error("{} line {}: a section is [NAME], got '{}'", file_name, line_number, line.substr(0, 80));
      sections.push_back({std::string(trim_view(line.substr(1, line.size() - 2))), {}});
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos || trim_view(line.substr(0, eq)).empty())
      throw_error("{} line {}: expected KEY = VALUE, got '{}'", file_name, line_number, line.substr(0, 80));
    std::string value(trim_view(line.substr(eq + 1)));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front())
      value = value.substr(1, value.size() - 2);
    set_key(sections.back().keys, std::string(trim_view(line.substr(0, eq))), value);
  }
  return sections;
}

std::vector<RouterModel> scan_models_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw_error("--models-dir {}: not a folder", dir);
  std::vector<RouterModel> models;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.front() == '.') continue;
    if (entry.is_directory(ec)) {
      // A folder is one model: its first shard, else its one model file.
      std::string model_file, first_shard;
      std::vector<fs::path> files;
      for (const auto& f : fs::directory_iterator(entry.path(), ec)) files.push_back(f.path());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        const std::string file = f.filename().string();
        if (!ends_with(lower(file), ".gguf") || is_mmproj(file) || is_draft(file)) continue;
        if (file.find("-00001-of-") != std::string::npos) first_shard = f.string();
        else if (model_file.empty()) model_file = f.string();
      }
      const std::string path = first_shard.empty() ? model_file : first_shard;
      if (!path.empty()) models.push_back(dir_model(name, path));
    } else if (ends_with(lower(name), ".gguf") && !is_mmproj(name) && !is_draft(name)) {
      models.push_back(dir_model(name.substr(0, name.size() - 5), entry.path().string()));
    }
  }
  if (ec) throw_error("--models-dir {}: {}", dir, ec.message());
  std::sort(models.begin(), models.end(), [](const RouterModel& a, const RouterModel& b) { return a.id < b.id; });
  return models;
}

std::vector<RouterModel> read_preset(const std::string& path, const std::vector<RouterModel>& known) {
  const auto sections = parse_ini(read_input_file(path, "models preset"), path);
  std::vector<std::pair<std::string, std::string>> global;
  for (const auto& s : sections)
    if (s.name == "*")
      for (const auto& [k, v] : s.keys) set_key(global, k, v);
  std::vector<RouterModel> models;
  for (const auto& s : sections) {
    if (s.name.empty() || s.name == "*") continue;
    auto keys = global;
    for (const auto& [k, v] : s.keys) set_key(keys, k, v);
    RouterModel m;
    m.id = s.name;
    m.source = "preset";
    for (const auto& k : known)
      if (k.id == s.name) {
        m.path = k.path;
        m.source = k.source;
      }
    if (const auto* v = find_key(keys, "model")) m.path = *v;
    else if (const auto* v2 = find_key(keys, "m")) m.path = *v2;
    for (const char* hf : {"hf-repo", "hf", "hfr"})
      if (const auto* v = find_key(keys, hf)) m.hf_repo = *v;
    if (m.path.empty() && m.hf_repo.empty())
      throw_error("{}: preset [{}] names no model: give it `model = FILE` or `hf-repo = OWNER/REPO`", path, s.name);
    if (const auto* v = find_key(keys, "load-on-startup")) m.load_on_startup = is_true(*v);
    if (const auto* v = find_key(keys, "stop-timeout")) {
      try {
        m.stop_timeout_s = std::clamp(std::stoi(*v), 0, 3600);
      } catch (const std::exception&) {
        throw_error("{}: preset [{}]: stop-timeout must be a number of seconds, got '{}'", path, s.name, *v);
      }
    }
    for (const auto& [k, v] : keys)
      if (!router_key(k)) m.options.emplace_back(k, v);
    m.preset_ini = section_ini(s.name, s.keys);
    models.push_back(std::move(m));
  }
  return models;
}

std::vector<RouterModel> discover_models(const RouterOptions& options) {
  std::vector<RouterModel> found;
  if (!options.models_dir.empty()) found = scan_models_dir(options.models_dir);
  if (options.list_cache)
    for (auto& m : options.list_cache()) {
      m.source = "cache";
      found.push_back(std::move(m));
    }
  if (options.models_preset.empty()) return found;
  auto presets = read_preset(options.models_preset, found);
  // dedup-cache-models (in a section or [*]): the cache entry behind a preset's hf-repo is not listed.
  const auto sections = parse_ini(read_input_file(options.models_preset, "models preset"), options.models_preset);
  bool global_dedup = false;
  for (const auto& s : sections)
    if (s.name == "*")
      if (const auto* v = find_key(s.keys, "dedup-cache-models")) global_dedup = is_true(*v);
  for (const auto& s : sections) {
    if (s.name.empty() || s.name == "*") continue;
    const auto* v = find_key(s.keys, "dedup-cache-models");
    if (!(v ? is_true(*v) : global_dedup)) continue;
    for (const char* key : {"hf-repo", "spec-draft-hf", "hf-repo-draft"}) {
      const auto* repo = find_key(s.keys, key);
      if (!repo) continue;
      for (auto& m : found)
        if (m.source == "cache" && (m.id == *repo || m.id.rfind(*repo + ":", 0) == 0)) m.hidden = true;
    }
  }
  // A preset section named like a found model configures it instead of adding another.
  for (auto& p : presets) {
    auto same = std::find_if(found.begin(), found.end(), [&](const RouterModel& m) { return m.id == p.id; });
    if (same != found.end()) *same = std::move(p);
    else found.push_back(std::move(p));
  }
  return found;
}

// ---------------------------------------------------------------------------------------------
// The router.

namespace {

std::atomic<int> g_router_signals{0};
extern "C" void on_router_signal(int) { g_router_signals.fetch_add(1); }

using Clock = std::chrono::steady_clock;

int percent_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The value of `name` in a query string, percent-decoded ('+' is a space); empty when absent.
std::string query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    const std::string_view raw = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '+') {
        out += ' ';
      } else if (raw[i] == '%' && i + 2 < raw.size() + 0 && percent_value(raw[i + 1]) >= 0 &&
                 percent_value(raw[i + 2]) >= 0) {
        out += static_cast<char>(percent_value(raw[i + 1]) * 16 + percent_value(raw[i + 2]));
        i += 2;
      } else {
        out += raw[i];
      }
    }
    return out;
  }
  return {};
}

bool query_has(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.substr(0, pair.find('=')) == name) return true;
  }
  return false;
}

[[noreturn]] void throw_router_error(int status, const std::string& message) {
  throw ApiError(status, status_type(status), message);
}

}  // namespace

// A model the router knows, and its child process when one runs.
struct Instance {
  enum class Status { Unloaded, Loading, Loaded };
  RouterModel model;
  Status status = Status::Unloaded;
  pid_t pid = 0;            // > 0 while the child runs (loading, loaded, or stopping)
  int port = 0;
  bool stopping = false;    // SIGTERM sent; SIGKILL at kill_at
  Clock::time_point kill_at;
  bool failed = false;      // the last child exited without being asked to
  int exit_code = 0;
  std::string failure;      // why, in words
  int active = 0;           // requests holding it (they keep it from eviction)
  uint64_t last_used = 0;
  bool removed = false;     // gone from the sources: forgotten once its child has exited
  Json loaded_info = Json::object();
  std::vector<std::string> args;
  bool running() const { return pid > 0; }
};

// One queue entry: every request waiting for `model` shares it, and so one eviction.
struct Waiter {
  std::string model;
  int clients = 0;
  bool load_requested = false;  // POST /models/load: kept even with no client
  bool granted = false;
  std::shared_ptr<Instance> instance;  // once granted (null: the model went away)
};

class Router;

// A request's hold on a model: first its place in the queue, then a lease that keeps the model
// from being evicted until the response has been written.
class Ticket {
 public:
  enum class State { Pending, Ready, Failed };
  Ticket(Router& router, std::shared_ptr<Waiter> waiter, std::shared_ptr<Instance> instance)
      : router_(router), waiter_(std::move(waiter)), instance_(std::move(instance)) {}
  ~Ticket() { release(); }
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;
  // Waits up to `wait` for the model to be ready: its port, or why it cannot be.
  State wait(std::chrono::milliseconds wait, int& port, std::string& error);
  void release();

 private:
  friend class Router;
  Router& router_;
  std::shared_ptr<Waiter> waiter_;
  std::shared_ptr<Instance> instance_;
  bool released_ = false;
};

// Forks the children from one thread that lives as long as the router: a child's
// PR_SET_PDEATHSIG fires when the *thread* that forked it ends, and it must fire only when the
// router itself is gone (killed without its SIGTERM handler: the children then stop too).
class Launcher {
 public:
  Launcher() : thread_([this] { run(); }) {}
  ~Launcher() {
    {
      std::lock_guard lock(mutex_);
      quit_ = true;
    }
    ready_.notify_all();
    thread_.join();
  }
  // Runs `executable` with `argv` (null-terminated), its stderr into `stderr_fd`; the pid or -1.
  pid_t spawn(const std::string& executable, const std::vector<char*>& argv, int stderr_fd) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return job_ == nullptr; });
    Job job{&executable, &argv, stderr_fd};
    job_ = &job;
    ready_.notify_all();
    done_.wait(lock, [&] { return job.finished; });
    return job.pid;
  }

 private:
  struct Job {
    const std::string* executable;
    const std::vector<char*>* argv;
    int stderr_fd;
    pid_t pid = -1;
    bool finished = false;
  };
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return quit_ || (job_ != nullptr && !job_->finished); });
      if (quit_) return;
      Job& job = *job_;
      const pid_t parent = ::getpid();
      const pid_t pid = ::fork();
      if (pid == 0) {
        // The child: only async-signal-safe calls until exec.
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(1);
        ::dup2(job.stderr_fd, STDERR_FILENO);
        ::execv(job.executable->c_str(), job.argv->data());
        static const char message[] = "okapi: router: cannot run the okapi binary\n";
        [[maybe_unused]] const auto n = ::write(STDERR_FILENO, message, sizeof message - 1);
        ::_exit(127);
      }
      job.pid = pid;
      job.finished = true;
      job_ = nullptr;
      done_.notify_all();
    }
  }
  std::mutex mutex_;
  std::condition_variable ready_, done_;
  Job* job_ = nullptr;
  bool quit_ = false;
  std::thread thread_;
};

class Router {
 public:
  explicit Router(const RouterOptions& options);
  ~Router() { shutdown(); }

  void dispatch(const Request& req, Response& res);
  bool answer_on_loop(const Request& req, Response& res) const;
  void load_startup_models();
  // SIGTERM to every child; waits for them (SIGKILL after their stop timeout).
  void shutdown();
  size_t model_count() {
    std::lock_guard lock(mutex_);
    return catalog_.size();
  }

 private:
  friend class Ticket;
  bool authorized(const Request& req) const;
  void apply_cors(const Request& req, Response& res) const;
  std::shared_ptr<Instance> find(const std::string& id) const;  // under mutex_
  void reload();
  Json list_models();
  Json router_props() const;
  void handle_load(const Request& req, Response& res);
  void handle_unload(const Request& req, Response& res);
  void handle_delete(const Request& req, Response& res);
  void proxy(const Request& req, Response& res, const std::string& model, bool autoload);
  std::shared_ptr<Ticket> acquire(const std::string& model, bool autoload);

  // Under mutex_.
  void pump();
  void grant(Waiter& waiter, const std::shared_ptr<Instance>& instance);
  void start(const std::shared_ptr<Instance>& instance);
  void stop(Instance& instance);
  std::vector<std::string> child_args(const Instance& instance, const std::string& path) const;
  void monitor(std::shared_ptr<Instance> instance, pid_t pid, int fd);

  const RouterOptions& options_;
  std::string executable_;
  Launcher launcher_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::shared_ptr<Instance>> catalog_;
  std::deque<std::shared_ptr<Waiter>> queue_;
  uint64_t clock_ = 0;
  int monitors_ = 0;
  bool shutting_down_ = false;
};

Ticket::State Ticket::wait(std::chrono::milliseconds wait, int& port, std::string& error) {
  std::unique_lock lock(router_.mutex_);
  const auto deadline = Clock::now() + wait;
  for (;;) {
    if (!instance_ && waiter_ && waiter_->granted) {
      instance_ = waiter_->instance;  // the lease was counted when the entry was granted
      waiter_.reset();
      if (!instance_) {
        error = "the model was removed from the router's list";
        return State::Failed;
      }
    }
    if (instance_) {
      const Instance& in = *instance_;
      if (in.status == Instance::Status::Loaded && in.port > 0) {
        port = in.port;
        return State::Ready;
      }
      if (in.status == Instance::Status::Unloaded) {
        error = in.failed ? fmt::format("model '{}' failed to load: {}", in.model.id, in.failure)
                          : fmt::format("model '{}' was unloaded before it could serve the request", in.model.id);
        return State::Failed;
      }
    }
    if (router_.shutting_down_) {
      error = "the server is shutting down";
      return State::Failed;
    }
    if (router_.changed_.wait_until(lock, deadline) == std::cv_status::timeout) return State::Pending;
  }
}

void Ticket::release() {
  std::lock_guard lock(router_.mutex_);
  if (released_) return;
  released_ = true;
  if (instance_) {
    instance_->active -= 1;
    instance_->last_used = ++router_.clock_;
  } else if (waiter_) {
    if (waiter_->granted) {
      if (waiter_->instance) {
        waiter_->instance->active -= 1;
        waiter_->instance->last_used = ++router_.clock_;
      }
    } else {
      waiter_->clients -= 1;  // a client that left the queue gives up its place
    }
  }
  instance_.reset();
  waiter_.reset();
  router_.pump();
}

namespace {

std::string self_executable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw_error("cannot find this program's file (/proc/self/exe): {}", ec.message());
  return self.string();
}

}  // namespace

Router::Router(const RouterOptions& options)
    : options_(options), executable_(options.executable.empty() ? self_executable() : options.executable) {
  for (auto& m : discover_models(options_)) {
    auto instance = std::make_shared<Instance>();
    instance->model = std::move(m);
    catalog_.push_back(std::move(instance));
  }
}

std::shared_ptr<Instance> Router::find(const std::string& id) const {
  for (const auto& in : catalog_)
    if (in->model.id == id && !in->removed) return in;
  return nullptr;
}

bool Router::authorized(const Request& req) const { return api_key_accepted(req, options_.api_keys); }

void Router::apply_cors(const Request& req, Response& res) const {
  for (auto& [name, value] : cors_headers(options_.cors, req.header("origin"), req.method == "OPTIONS"))
    res.set_header(std::move(name), std::move(value));
}

bool Router::answer_on_loop(const Request& req, Response& res) const {
  if (req.path != "/health" && req.path != "/v1/health") return false;
  if (req.method != "GET" && req.method != "HEAD") return false;
  apply_cors(req, res);
  send_json(res, 200, {{"status", "ok"}});
  return true;
}

// ----- the queue and the children (under mutex_) -----

void Router::grant(Waiter& waiter, const std::shared_ptr<Instance>& instance) {
  waiter.granted = true;
  waiter.instance = instance;
  if (instance) {
    instance->active += waiter.clients;
    instance->last_used = ++clock_;
  }
}

void Router::pump() {
  std::erase_if(queue_, [](const auto& w) { return w->clients <= 0 && !w->load_requested; });
  while (!queue_.empty() && !shutting_down_) {
    Waiter& head = *queue_.front();
    const auto instance = find(head.model);
    if (!instance) {
      grant(head, nullptr);
    } else if (instance->running() && !instance->stopping) {
      grant(head, instance);
    } else if (instance->running()) {
      break;  // being stopped: started again once it has exited
    } else {
      const auto running = std::count_if(catalog_.begin(), catalog_.end(), [](const auto& in) { return in->running(); });
      if (options_.models_max > 0 && running >= options_.models_max) {
        // Full: one eviction at a time, of the least recently used model no request holds.
        const bool freeing = std::any_of(catalog_.begin(), catalog_.end(),
                                         [](const auto& in) { return in->running() && in->stopping; });
        if (!freeing) {
          Instance* victim = nullptr;
          for (const auto& in : catalog_)
            if (in->running() && !in->stopping && in->status == Instance::Status::Loaded && in->active == 0 &&
                (!victim || in->last_used < victim->last_used))
              victim = in.get();
          if (victim) {
            std::fprintf(stderr, "okapi: router: unloading '%s' (least recently used) to load '%s'\n",
                         victim->model.id.c_str(), head.model.c_str());
            stop(*victim);
          }
        }
        break;
      }
      start(instance);
      grant(head, instance);
    }
    queue_.pop_front();
  }
  changed_.notify_all();
}

std::vector<std::string> Router::child_args(const Instance& instance, const std::string& path) const {
  // The router's own flags win over the preset's (as llama-server's precedence).
  std::vector<std::pair<std::string, std::vector<std::string>>> flags = options_.child_flags;
  const auto has = [&](const std::string& flag) {
    return std::any_of(flags.begin(), flags.end(), [&](const auto& f) { return f.first == flag; });
  };
  for (const auto& [key, value] : instance.model.options) {
    if (key.rfind("LLAMA_ARG_", 0) == 0) continue;  // llama.cpp's environment names: no okapi meaning
    std::string flag = options_.canonical_flag ? options_.canonical_flag(key) : std::string();
    if (flag.empty()) flag = (key.size() == 1 ? "-" : "--") + key;  // unknown: the child says so and fails
    if (has(flag)) continue;
    const bool takes_value = options_.flag_takes_value ? options_.flag_takes_value(flag) : true;
    if (!takes_value) {
      if (is_false(value)) continue;
      flags.push_back({flag, {}});
    } else {
      flags.push_back({flag, {value}});
    }
  }
  std::vector<std::string> args{"okapi", "serve"};
  for (const auto& [flag, values] : flags) {
    if (values.empty()) args.push_back(flag);
    for (const auto& v : values) {
      args.push_back(flag);
      args.push_back(v);
    }
  }
  for (const std::string& a : {std::string("-m"), path, std::string("--host"), std::string("127.0.0.1"),
                               std::string("--port"), std::string("0"), std::string("--alias"), instance.model.id})
    args.push_back(a);
  return args;
}

void Router::start(const std::shared_ptr<Instance>& instance) {
  Instance& in = *instance;
  in.failed = false;
  in.exit_code = 0;
  in.failure.clear();
  in.loaded_info = Json::object();
  std::string path = in.model.path;
  try {
    if (path.empty()) {
      if (!options_.resolve_hf)
        throw_error("hf-repo {}: this okapi has no download cache to find it in; give the preset `model = FILE`",
                    in.model.hf_repo);
      path = options_.resolve_hf(in.model.hf_repo);
    }
  } catch (const std::exception& e) {
    in.status = Instance::Status::Unloaded;
    in.failed = true;
    in.exit_code = -1;
    in.failure = e.what();
    std::fprintf(stderr, "okapi: router: cannot load '%s': %s\n", in.model.id.c_str(), e.what());
    return;
  }
  in.args = child_args(in, path);
  std::vector<char*> argv;
  for (auto& a : in.args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    in.status = Instance::Status::Unloaded;
    in.failed = true;
    in.exit_code = -1;
    in.failure = fmt::format("cannot make a pipe: {}", std::strerror(errno));
    return;
  }
  const pid_t pid = launcher_.spawn(executable_, argv, pipe_fds[1]);
  ::close(pipe_fds[1]);
  if (pid < 0) {
    ::close(pipe_fds[0]);
    in.status = Instance::Status::Unloaded;
    in.failed = true;
    in.exit_code = -1;
    in.failure = "cannot start a process (fork failed)";
    return;
  }
  in.pid = pid;
  in.port = 0;
  in.stopping = false;
  in.status = Instance::Status::Loading;
  in.last_used = ++clock_;
  std::fprintf(stderr, "okapi: router: loading '%s' (pid %d): %s\n", in.model.id.c_str(), static_cast<int>(pid),
               path.c_str());
  ++monitors_;
  std::thread([this, instance, pid, fd = pipe_fds[0]] { monitor(instance, pid, fd); }).detach();
}

void Router::stop(Instance& in) {
  if (!in.running() || in.stopping) return;
  in.stopping = true;
  in.kill_at = Clock::now() + std::chrono::seconds(in.model.stop_timeout_s);
  ::kill(in.pid, SIGTERM);
}

void Router::monitor(std::shared_ptr<Instance> instance, pid_t pid, int fd) {
  const std::string id = instance->model.id;
  std::string pending;
  bool open = true;
  while (open) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, 200);
    if (ready > 0) {
      char buffer[4096];
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n > 0) pending.append(buffer, static_cast<size_t>(n));
      else if (n == 0 || (errno != EINTR && errno != EAGAIN)) open = false;
    }
    // The child's stderr, line by line, under its model's name; its port and readiness from it.
    size_t end;
    while ((end = pending.find('\n')) != std::string::npos || (!open && !pending.empty())) {
      const std::string line = pending.substr(0, end);
      pending.erase(0, end == std::string::npos ? pending.size() : end + 1);
      std::fprintf(stderr, "[%s] %s\n", id.c_str(), line.c_str());
      constexpr std::string_view listening = "okapi: listening on http://";
      if (line.rfind(listening, 0) == 0) {
        const size_t colon = line.rfind(':');
        int port = 0;
        try {
          port = std::stoi(line.substr(colon + 1));
        } catch (const std::exception&) {
        }
        std::lock_guard lock(mutex_);
        instance->port = port;
      } else if (line.rfind("okapi: model loaded", 0) == 0) {
        int port = 0;
        {
          std::lock_guard lock(mutex_);
          port = instance->port;
        }
        Json info = Json::object();
        try {  // the child's /v1/models entry joins the router's list (n_ctx_train, size, ...)
          const auto r = http::fetch("127.0.0.1", port, "GET", "/v1/models", {}, "", std::chrono::seconds(10));
          const Json models = Json::parse(r.body);
          if (models.contains("data") && models["data"].is_array() && !models["data"].empty())
            info = models["data"][0];
        } catch (const std::exception&) {
        }
        std::lock_guard lock(mutex_);
        if (instance->pid == pid && !instance->stopping) {
          instance->status = Instance::Status::Loaded;
          instance->loaded_info = std::move(info);
          std::fprintf(stderr, "okapi: router: '%s' loaded\n", id.c_str());
        }
        changed_.notify_all();
      }
    }
    if (open) {
      std::lock_guard lock(mutex_);
      if (instance->stopping && instance->pid == pid && Clock::now() > instance->kill_at) {
        ::kill(pid, SIGKILL);
        instance->kill_at = Clock::now() + std::chrono::hours(24);
      }
    }
  }
  ::close(fd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::lock_guard lock(mutex_);
  Instance& in = *instance;
  if (in.pid == pid) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (!in.stopping) {
      in.failed = true;
      in.exit_code = code;
      in.failure = fmt::format("its process exited with code {}; the server log has its last lines", code);
      std::fprintf(stderr, "okapi: router: '%s' exited unexpectedly (code %d)\n", id.c_str(), code);
    } else {
      std::fprintf(stderr, "okapi: router: '%s' unloaded\n", id.c_str());
    }
    in.pid = 0;
    in.port = 0;
    in.stopping = false;
    in.status = Instance::Status::Unloaded;
    if (in.removed) std::erase(catalog_, instance);
  }
  --monitors_;
  pump();
}

void Router::shutdown() {
  std::unique_lock lock(mutex_);
  shutting_down_ = true;
  int longest = 0;
  for (const auto& in : catalog_) {
    if (in->running()) longest = std::max(longest, in->model.stop_timeout_s);
    stop(*in);
  }
  changed_.notify_all();
  // The monitors SIGKILL a child past its stop timeout; wait a little longer than that.
  changed_.wait_for(lock, std::chrono::seconds(longest + 5), [this] { return monitors_ == 0; });
}

void Router::load_startup_models() {
  std::lock_guard lock(mutex_);
  for (const auto& in : catalog_)
    if (in->model.load_on_startup && !in->running()) {
      auto waiter = std::make_shared<Waiter>();
      waiter->model = in->model.id;
      waiter->load_requested = true;
      queue_.push_back(std::move(waiter));
    }
  pump();
}

std::shared_ptr<Ticket> Router::acquire(const std::string& model, bool autoload) {
  std::lock_guard lock(mutex_);
  const auto instance = find(model);
  if (!instance) throw_router_error(400, fmt::format("model '{}' not found", model));
  if (instance->running() && !instance->stopping) {
    instance->active += 1;
    instance->last_used = ++clock_;
    return std::make_shared<Ticket>(*this, nullptr, instance);
  }
  if (!autoload) throw_router_error(400, fmt::format("model '{}' is not loaded (POST /models/load loads it)", model));
  std::shared_ptr<Waiter> waiter;
  for (const auto& w : queue_)
    if (w->model == model && !w->granted) waiter = w;
  if (!waiter) {
    waiter = std::make_shared<Waiter>();
    waiter->model = model;
    queue_.push_back(waiter);
  }
  waiter->clients += 1;
  auto ticket = std::make_shared<Ticket>(*this, waiter, nullptr);
  pump();
  return ticket;
}

namespace {

// Request headers a proxy must not pass on (hop-by-hop, or the router's own business).
bool hop_by_hop(std::string_view name) {
  static const char* const names[] = {"host", "connection", "keep-alive", "content-length", "transfer-encoding",
                                      "te", "trailer", "upgrade", "expect", "proxy-authorization",
                                      "proxy-connection", "authorization", "x-api-key"};
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

// Response headers the router sets itself.
bool skip_response_header(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "transfer-encoding" || name == "content-length" ||
         name == "content-type" || name.rfind("access-control-", 0) == 0 || name == "vary";
}

// One proxied request: waits for its model (in the queue, then while it loads), sends the request
// to the child and passes the response back; a streamed (chunked) one piece by piece. Each step
// waits at most ~100 ms so that the HTTP layer can notice the client leaving between steps.
class ProxyCall : public std::enable_shared_from_this<ProxyCall> {
 public:
  ProxyCall(std::shared_ptr<Ticket> ticket, const Request& req)
      : ticket_(std::move(ticket)), method_(req.method), target_(req.target), body_(req.body) {
    for (const auto& [name, value] : req.headers)
      if (!hop_by_hop(name)) headers_.emplace_back(name, value);
  }

  // Response::await: true once `res` holds the response (or its stream).
  bool step(Response& res) {
    constexpr auto kStep = std::chrono::milliseconds(100);
    if (!connection_) {
      int port = 0;
      std::string error;
      const auto state = ticket_->wait(kStep, port, error);
      if (state == Ticket::State::Pending) return false;
      if (state == Ticket::State::Failed) {
        send_error(res, ApiError(503, status_type(503), error));
        return true;
      }
      // llama-server's debug knob, which its router tests set: a request holds its model 2 s
      // longer, so that the queue's behaviour can be observed.
      if (static const bool fake_timing = std::getenv("LLAMA_SERVER_DEBUG_FAKE_TIMING") != nullptr &&
                                          *std::getenv("LLAMA_SERVER_DEBUG_FAKE_TIMING") != '\0';
          fake_timing)
        std::this_thread::sleep_for(std::chrono::seconds(2));
      try {
        connection_ = std::make_unique<http::ClientConnection>("127.0.0.1", port, std::chrono::seconds(5));
      } catch (const Error& e) {
        send_error(res, ApiError(502, status_type(502), fmt::format("the model's server cannot be reached: {}", e.what())));
        return true;
      }
      std::string request = http::request_head(method_, target_, "127.0.0.1", port, headers_, body_.size());
      request += body_;
      if (!connection_->send_all(request, std::chrono::seconds(30))) {
        send_error(res, ApiError(502, status_type(502), "the model's server did not take the request"));
        return true;
      }
      return false;
    }
    if (!read(kStep)) {
      send_error(res, ApiError(502, status_type(502), fmt::format("the model's server answered badly: {}", parser_.error())));
      return true;
    }
    if (!parser_.head_ready()) return false;
    const auto& head = parser_.head();
    if (!parser_.chunked() && parser_.state() != http::ResponseParser::State::Complete) return false;
    res.status = head.status;
    res.content_type = std::string(head.header("content-type"));
    for (const auto& [name, value] : head.headers)
      if (!skip_response_header(name)) res.set_header(name, value);
    if (!parser_.chunked()) {
      res.body = std::move(body_out_);
      connection_.reset();
      ticket_->release();
      return true;
    }
    res.stream = [self = shared_from_this()](http::StreamSink& sink) { return self->pump(sink); };
    return true;
  }

  // Response::stream: passes on what the child sent; done at its last chunk.
  bool pump(http::StreamSink& sink) {
    if (!body_out_.empty()) {
      const bool ok = sink.write(body_out_);
      body_out_.clear();
      if (!ok) return false;
    }
    if (parser_.state() == http::ResponseParser::State::Complete) {
      sink.done();
      finish();
      return true;
    }
    if (!read(std::chrono::milliseconds(100))) return false;  // cut short: the client sees the stream end
    return true;
  }

  void finish() {
    connection_.reset();  // a child whose client left sees the connection close and stops generating
    ticket_->release();
  }

 private:
  // Reads what arrives within `wait`; false when the response is broken or cut short.
  bool read(std::chrono::milliseconds wait) {
    if (parser_.state() == http::ResponseParser::State::Complete) return true;
    if (!connection_) return false;
    std::string bytes;
    const bool open = connection_->read_some(bytes, wait);
    parser_.feed(bytes, body_out_);
    if (!open) parser_.end_of_input();
    return parser_.state() != http::ResponseParser::State::Error;
  }

  std::shared_ptr<Ticket> ticket_;
  std::string method_, target_, body_;
  std::vector<std::pair<std::string, std::string>> headers_;
  std::unique_ptr<http::ClientConnection> connection_;
  http::ResponseParser parser_;
  std::string body_out_;
};

std::string status_name(const Instance& in) {
  switch (in.status) {
    case Instance::Status::Loading: return "loading";
    case Instance::Status::Loaded: return "loaded";
    default: return "unloaded";
  }
}

// The model a POST body names; 400 when it is not JSON or names none.
std::string body_model(const Request& req) {
  const Json body = parse_body(req.body);
  const auto it = body.find("model");
  if (it == body.end() || !it->is_string() || it->get<std::string>().empty())
    throw_bad_request("model", "model name is missing from the request");
  return it->get<std::string>();
}

}  // namespace

void Router::proxy(const Request& req, Response& res, const std::string& model, bool autoload) {
  auto call = std::make_shared<ProxyCall>(acquire(model, autoload), req);
  res.await = [call](Response& r) { return call->step(r); };
  res.on_stream_end = [call](bool) { call->finish(); };
}

Json Router::router_props() const {
  return {{"role", "router"},
          {"max_instances", options_.models_max},
          {"models_autoload", options_.models_autoload},
          {"model_alias", "okapi"},
          {"model_path", "none"},
          {"default_generation_settings", {{"params", Json::object()}, {"n_ctx", 0}}},
          // llama-server's form is b<build>-<commit>; okapi has no build number.
          {"build_info", std::string(build_info())}};
}

Json Router::list_models() {
  std::lock_guard lock(mutex_);
  Json data = Json::array();
  const auto now = static_cast<int64_t>(std::time(nullptr));
  for (const auto& in : catalog_) {
    if (in->model.hidden || in->removed) continue;
    Json status = {{"value", status_name(*in)}};
    if (!in->args.empty()) status["args"] = in->args;
    if (!in->model.preset_ini.empty()) status["preset"] = in->model.preset_ini;
    if (in->failed) {
      status["failed"] = true;
      status["exit_code"] = in->exit_code;
      status["error"] = in->failure;
    }
    Json item = {{"id", in->model.id},
                 {"aliases", Json::array()},
                 {"tags", Json::array()},
                 {"object", "model"},
                 {"owned_by", "okapi"},
                 {"created", now},
                 {"status", std::move(status)},
                 {"architecture", {{"input_modalities", {"text"}}, {"output_modalities", {"text"}}}},
                 {"source", in->model.source},
                 {"can_remove", in->model.source == "cache"},
                 {"path", in->model.path}};
    if (in->running())
      for (auto it = in->loaded_info.begin(); it != in->loaded_info.end(); ++it)
        if (!item.contains(it.key())) item[it.key()] = it.value();
    data.push_back(std::move(item));
  }
  return {{"data", std::move(data)}, {"object", "list"}};
}

void Router::reload() {
  std::vector<RouterModel> found;
  try {
    found = discover_models(options_);
  } catch (const Error& e) {
    throw_router_error(500, fmt::format("cannot read the model sources again: {}", e.what()));
  }
  std::lock_guard lock(mutex_);
  for (auto& in : catalog_) {
    if (in->removed) continue;
    const auto same = std::find_if(found.begin(), found.end(), [&](const auto& m) { return m.id == in->model.id; });
    if (same == found.end()) {
      in->removed = true;  // a running child is stopped and forgotten when it exits
      stop(*in);
    } else if (!(*same == in->model)) {
      in->model = *same;  // a running child with the old settings is stopped
      stop(*in);
    }
  }
  std::erase_if(catalog_, [](const auto& in) { return in->removed && !in->running(); });
  for (auto& m : found)
    if (!find(m.id)) {
      auto instance = std::make_shared<Instance>();
      instance->model = std::move(m);
      catalog_.push_back(std::move(instance));
    }
  pump();
}

void Router::handle_load(const Request& req, Response& res) {
  const std::string model = body_model(req);
  std::lock_guard lock(mutex_);
  const auto instance = find(model);
  if (!instance) throw ApiError(404, status_type(404), fmt::format("model '{}' not found", model));
  if (instance->running() && !instance->stopping) throw_router_error(400, "model is already running");
  const bool queued =
      std::any_of(queue_.begin(), queue_.end(), [&](const auto& w) { return w->model == model && !w->granted; });
  if (!queued) {
    auto waiter = std::make_shared<Waiter>();
    waiter->model = model;
    waiter->load_requested = true;
    queue_.push_back(std::move(waiter));
  } else {
    for (auto& w : queue_)
      if (w->model == model) w->load_requested = true;
  }
  pump();
  send_json(res, 200, {{"success", true}});
}

void Router::handle_unload(const Request& req, Response& res) {
  const std::string model = body_model(req);
  std::lock_guard lock(mutex_);
  const auto instance = find(model);
  if (!instance) throw_router_error(400, fmt::format("model '{}' not found", model));
  if (!instance->running()) throw_router_error(400, "model is not running");
  stop(*instance);
  send_json(res, 200, {{"success", true}});
}

void Router::handle_delete(const Request& req, Response& res) {
  const std::string model = query_param(req.query, "model");
  if (model.empty()) throw_bad_request("model", "model must be a non-empty string (?model=NAME)");
  std::lock_guard lock(mutex_);
  const auto instance = find(model);
  if (!instance) throw ApiError(404, status_type(404), fmt::format("model '{}' not found", model));
  if (instance->model.source != "cache")
    throw_router_error(400, fmt::format("model '{}' is not in the download cache: only cached models can be deleted", model));
  if (instance->running()) throw_router_error(400, fmt::format("model '{}' is running: unload it first", model));
  std::error_code ec;
  fs::remove(instance->model.path, ec);
  if (ec) throw_router_error(500, fmt::format("cannot delete {}: {}", instance->model.path, ec.message()));
  fs::remove(instance->model.path + ".sha256", ec);
  std::erase(catalog_, instance);
  send_json(res, 200, {{"success", true}});
}

namespace {

// llama-server's media-type rule for POST bodies (server.cpp's dispatch has the same).
std::string media_type(std::string_view content_type) {
  std::string type(content_type.substr(0, content_type.find(';')));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.pop_back();
  return lower(type);
}

}  // namespace

void Router::dispatch(const Request& req, Response& res) {
  apply_cors(req, res);
  if (req.method == "OPTIONS") {  // as llama-server: 200, no body, no API key asked
    res.set_content("", "text/html");
    return;
  }
  try {
    const std::string& path = req.path;
    if (path == "/health" || path == "/v1/health") {
      send_json(res, 200, {{"status", "ok"}});
      return;
    }
    if (!authorized(req)) throw ApiError(401, "authentication_error", "Invalid API key", "", "invalid_api_key");
    const bool post = req.method == "POST";
    if (post && media_type(req.header("content-type")) != "application/json")
      throw ApiError(415, "invalid_request_error",
                     fmt::format("the request body must be JSON sent with 'Content-Type: application/json', got '{}'",
                                 req.header("content-type")));
    const bool get = req.method == "GET" || req.method == "HEAD";
    if (path == "/models" || path == "/v1/models") {
      if (get) {
        if (query_has(req.query, "reload") && !query_param(req.query, "reload").empty() &&
            query_param(req.query, "reload") != "0")
          reload();
        send_json(res, 200, list_models());
      } else if (req.method == "DELETE") {
        handle_delete(req, res);
      } else if (post) {
        throw ApiError(501, "not_supported_error",
                       "this router does not download models: put GGUF files in --models-dir, or list them in "
                       "--models-preset, then GET /models?reload=1");
      } else {
        throw ApiError(405, "invalid_request_error", fmt::format("{} {} is not allowed", req.method, path));
      }
      return;
    }
    if (path == "/models/load" || path == "/models/unload") {
      if (!post) throw ApiError(405, "invalid_request_error", fmt::format("{} {} is not allowed", req.method, path));
      if (path == "/models/load") handle_load(req, res);
      else handle_unload(req, res);
      return;
    }
    std::string autoload_param = query_param(req.query, "autoload");
    const bool autoload = autoload_param.empty() ? options_.models_autoload
                                                 : (autoload_param == "true" || autoload_param == "1");
    if (post) {
      proxy(req, res, body_model(req), autoload);
      return;
    }
    const std::string model = query_param(req.query, "model");
    if (path == "/props" && get && model.empty()) {
      send_json(res, 200, router_props());
      return;
    }
    if (!model.empty()) {
      proxy(req, res, model, autoload);
      return;
    }
    static const char* const model_routes[] = {"/props", "/metrics", "/slots", "/lora-adapters"};
    for (const char* r : model_routes)
      if (path == r) throw_bad_request("model", "model name is missing from the request (?model=NAME)");
    throw ApiError(404, "not_found_error",
                   fmt::format("no endpoint {} {} on the router (a model's endpoints take ?model=NAME)", req.method, path));
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, ApiError(500, status_type(500), client_message(e)));
  }
}

int serve_router(const RouterOptions& options) {
  g_router_signals.store(0);
  struct sigaction action = {};
  action.sa_handler = on_router_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  Router router(options);
  http::ServerOptions http_options;
  http_options.host = options.host;
  http_options.port = options.port;
  // Requests wait for their model on a worker (queued, then loading): room for many.
  http_options.worker_threads = 128;
  http_options.limits.max_body_bytes = options.max_body_bytes;
  http::Application app;
  app.dispatch = [&router](const Request& req, Response& res) { router.dispatch(req, res); };
  app.answer_on_loop = [&router](const Request& req, Response& res) { return router.answer_on_loop(req, res); };
  app.error_response = json_error_response;
  http::Server http(http_options, std::move(app));
  const int port = http.bind();
  std::thread listener([&http] { http.run(); });
  std::fprintf(stderr, "okapi: listening on http://%s:%d\n", options.host.c_str(), port);
  std::fprintf(stderr, "okapi: router mode: %zu models, at most %d loaded at once%s\n", router.model_count(),
               options.models_max, options.models_autoload ? ", loaded on first use" : "");
  if (options.on_listening) options.on_listening(port);
  router.load_startup_models();

  while (g_router_signals.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::fprintf(stderr, "okapi: stopping the router and its models\n");
  http.stop();
  listener.join();
  router.shutdown();
  std::fprintf(stderr, "okapi: stopped\n");
  return 0;
}

}  // namespace okapi::server
