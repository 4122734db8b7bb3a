#include "server/tools_builtin.hpp"

#include <regex.h>
#include <sys/utsname.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "core/error.hpp"
#include "server/api_error.hpp"
#include "server/mcp.hpp"
#include "server/request_params.hpp"
#include "server/responses.hpp"
#include "server/server_state.hpp"
#include "server/subprocess.hpp"

namespace okapi::server {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Glob matching

namespace {

// The end of the [...] class starting at `open` ('['), or npos when it is not closed (then the
// '[' is a literal). A ']' or '-' right after '[' or '[!' is a member.
size_t class_end(std::string_view pattern, size_t open) {
  size_t i = open + 1;
  if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) ++i;
  if (i < pattern.size() && (pattern[i] == ']' || pattern[i] == '-')) ++i;
  while (i < pattern.size() && pattern[i] != ']') ++i;
  return i < pattern.size() ? i : std::string_view::npos;
}

bool class_matches(std::string_view pattern, size_t open, size_t close, char c) {
  size_t i = open + 1;
  bool negated = false;
  if (pattern[i] == '!' || pattern[i] == '^') {
    negated = true;
    ++i;
  }
  bool matched = false;
  bool first = true;
  while (i < close) {
    if (!first && i + 2 < close && pattern[i + 1] == '-') {
      if (c >= pattern[i] && c <= pattern[i + 2]) matched = true;
      i += 3;
    } else if (first && i + 2 < close && pattern[i + 1] == '-' && pattern[i] != ']' && pattern[i] != '-') {
      if (c >= pattern[i] && c <= pattern[i + 2]) matched = true;
      i += 3;
    } else {
      if (pattern[i] == c) matched = true;
      ++i;
    }
    first = false;
  }
  return negated ? !matched : matched;
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view text) {
  // reachable[j]: the pattern so far can match text[0, j). One pass per pattern element.
  std::vector<char> reachable(text.size() + 1, 0), next(text.size() + 1, 0);
  reachable[0] = 1;
  size_t p = 0;
  while (p < pattern.size()) {
    std::fill(next.begin(), next.end(), 0);
    if (pattern.substr(p, 3) == "**/") {
      // Any number of whole directories, none included: "**/x" matches "x" and "a/b/x".
      bool seen = false;
      for (size_t j = 0; j <= text.size(); ++j) {
        if (j > 0 && text[j - 1] == '/' && seen) next[j] = 1;
        if (reachable[j]) next[j] = 1;
        seen = seen || reachable[j];
      }
      p += 3;
    } else if (pattern[p] == '*') {
      const bool any = p + 1 < pattern.size() && pattern[p + 1] == '*';
      for (size_t j = 0; j <= text.size(); ++j) {
        if (!reachable[j] && !(j > 0 && next[j - 1] && (any || text[j - 1] != '/'))) continue;
        next[j] = 1;
      }
      p += any ? 2 : 1;
    } else {
      size_t width = 1;
      size_t close = std::string_view::npos;
      if (pattern[p] == '[') {
        close = class_end(pattern, p);
        if (close != std::string_view::npos) width = close - p + 1;
      }
      for (size_t j = 0; j < text.size(); ++j) {
        if (!reachable[j]) continue;
        const char c = text[j];
        bool ok;
        if (pattern[p] == '?') ok = c != '/';
        else if (close != std::string_view::npos) ok = class_matches(pattern, p, close, c);
        else ok = pattern[p] == c;
        if (ok) next[j + 1] = 1;
      }
      p += width;
    }
    reachable.swap(next);
  }
  return reachable[text.size()] != 0;
}

namespace {

std::string base_name(const std::string& rel) {
  const size_t slash = rel.rfind('/');
  return slash == std::string::npos ? rel : rel.substr(slash + 1);
}

// No '/' in the pattern: it matches the base name at any depth; else the whole relative path,
// anchored with "**/" unless it starts with "**" or '/'.
bool path_glob_match(const std::string& pattern, const std::string& rel) {
  if (pattern.find('/') == std::string::npos) return glob_match(pattern, base_name(rel));
  if (pattern == "**" || pattern.rfind("**/", 0) == 0 || pattern.rfind('/', 0) == 0) return glob_match(pattern, rel);
  return glob_match("**/" + pattern, rel);
}

// ---------------------------------------------------------------------------------------------
// Parameters: a missing or mistyped one is the caller's fault (400), never a crash.

std::string text_param(const Json& params, const char* key) {
  const auto it = params.find(key);
  if (it == params.end() || !it->is_string()) throw_bad_request(key, "'{}' is required and must be a string", key);
  return it->get<std::string>();
}

std::string text_param(const Json& params, const char* key, const std::string& fallback) {
  const auto it = params.find(key);
  if (it == params.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw_bad_request(key, "'{}' must be a string", key);
  return it->get<std::string>();
}

int64_t int_param(const Json& params, const char* key, int64_t fallback) {
  const auto it = params.find(key);
  if (it == params.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) throw_bad_request(key, "'{}' must be an integer", key);
  return it->get<int64_t>();
}

bool bool_param(const Json& params, const char* key, bool fallback) {
  const auto it = params.find(key);
  if (it == params.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw_bad_request(key, "'{}' must be a boolean", key);
  return it->get<bool>();
}

// Bytes of a UTF-8 text that end in the middle of a character: held back from a streamed chunk
// so that no character is split between two JSON events.
size_t incomplete_utf8_tail(std::string_view text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return need > back ? back : 0;
  }
  return 0;
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Running a command: its output (stdout, with stderr unless told), exit status, and whether the
// time ran out. The output past `max_output` is drained (so the child does not block) and dropped.

struct CommandResult {
  std::string output;
  int exit_code = -1;
  bool timed_out = false;
};

struct CommandOptions {
  std::string cwd;
  bool combine_stderr = true;
  const std::string* stdin_data = nullptr;
  size_t max_output = 16 * 1024;
  int timeout_s = 10;
  // Each piece of output as it comes (before the cap); false stops the command (client gone).
  std::function<bool(const std::string&)> on_chunk;
  std::function<bool()> stop;
};

CommandResult run_command(const std::vector<std::string>& argv, const CommandOptions& options) {
  CommandResult result;
  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.cwd = options.cwd;
  spawn.combine_stderr = options.combine_stderr;
  ChildProcess child(spawn);  // throws okapi::Error when it cannot run
  const auto deadline = Clock::now() + std::chrono::seconds(options.timeout_s);
  if (options.stdin_data && !options.stdin_data->empty()) child.write_stdin(*options.stdin_data, deadline, options.stop);
  // Always closed: a child reading its stdin would otherwise wait for ever.
  child.close_stdin();
  std::string pending;  // read, not yet given to on_chunk (a split UTF-8 character)
  bool truncated = false;
  bool stopped = false;
  const auto take = [&](std::string&& data) {
    if (data.empty() || truncated) return;
    if (result.output.size() + data.size() > options.max_output) {
      data.resize(options.max_output - result.output.size());
      truncated = true;
    }
    result.output += data;
    if (options.on_chunk) {
      pending += data;
      const size_t keep = truncated ? 0 : incomplete_utf8_tail(pending);
      std::string chunk = pending.substr(0, pending.size() - keep);
      pending.erase(0, pending.size() - keep);
      if (!chunk.empty() && !options.on_chunk(chunk)) stopped = true;
    }
  };
  bool open = true;
  while (open && !stopped) {
    if (options.stop && options.stop()) {
      stopped = true;
      break;
    }
    if (Clock::now() >= deadline) {
      result.timed_out = true;
      break;
    }
    std::string data;
    open = ChildProcess::read_some(child.stdout_fd(), data, std::chrono::milliseconds(50));
    take(std::move(data));
    if (open && !child.running()) {
      // Exited (what it left in its group is killed): take what is still in the pipe.
      for (int i = 0; i < 64 && open; ++i) {
        std::string rest;
        open = ChildProcess::read_some(child.stdout_fd(), rest, std::chrono::milliseconds(0));
        if (rest.empty()) break;
        take(std::move(rest));
      }
      break;
    }
  }
  if (!pending.empty() && options.on_chunk && !stopped) options.on_chunk(pending);
  // Its output ended: it is exiting; its status, unless it stays past the deadline.
  while (!stopped && !result.timed_out && child.running()) {
    if (Clock::now() >= deadline || (options.stop && options.stop())) {
      result.timed_out = Clock::now() >= deadline;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  result.exit_code = child.finish();
  if (truncated) result.output += "\n[output truncated]";
  return result;
}

// ---------------------------------------------------------------------------------------------
// Where a tool's files and commands are: the host, or an isolate reached by a command.

enum class ListKind { Files, Dirs, All };

struct ListEntry {
  std::string rel;  // '/'-separated, relative to the listed directory
  bool is_dir = false;
};

struct Listing {
  std::vector<ListEntry> entries;
  std::string error;       // the base is not a directory
  bool truncated = false;  // the walk did not see everything (time, unreadable directories)
};

constexpr size_t kGitListMaxOutput = size_t{8} << 20;
constexpr int kListTimeoutSeconds = 15;
constexpr size_t kMaxFileBytes = size_t{64} << 20;  // read_file base64 and grep read at most this

// Directories a listing shows but never walks into: they can be enormous.
const std::unordered_set<std::string>& junk_dirs() {
  static const std::unordered_set<std::string> names = {".git", ".svn", ".hg", "node_modules", "__pycache__",
                                                        ".venv", "venv", "dist", "build", "target", ".cache",
                                                        ".idea", ".vscode"};
  return names;
}

int entry_depth(const std::string& rel) { return 1 + static_cast<int>(std::count(rel.begin(), rel.end(), '/')); }

std::vector<std::string> split_lines(const std::string& text, bool strip_dot_slash) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (strip_dot_slash && line.rfind("./", 0) == 0) line.erase(0, 2);
    lines.push_back(line);
  }
  return lines;
}

class ToolsIo {
 public:
  virtual ~ToolsIo() = default;
  // `path` made absolute against the tool's working directory.
  virtual std::string resolve(const std::string& path) const = 0;
  virtual bool is_directory(const std::string& path) const = 0;
  virtual bool is_regular_file(const std::string& path) const = 0;
  virtual bool file_size(const std::string& path, uint64_t& size) const = 0;
  virtual bool read_file(const std::string& path, std::string& out) const = 0;
  virtual bool write_file(const std::string& path, const std::string& content) const = 0;
  // `base` already resolved; max_depth 0: no limit, 1: its entries only.
  virtual Listing list_entries(const std::string& base, int max_depth, ListKind kind) const = 0;
  virtual CommandResult run(const std::vector<std::string>& argv, CommandOptions options) const = 0;
  virtual bool on_host() const { return false; }
};

class HostIo : public ToolsIo {
 public:
  explicit HostIo(std::string cwd) : cwd_(std::move(cwd)) {}

  std::string resolve(const std::string& path) const override {
    std::string p = path;
    if (!p.empty() && p[0] == '~' && (p.size() == 1 || p[1] == '/')) {
      if (const char* home = std::getenv("HOME")) p = std::string(home) + p.substr(1);
    }
    fs::path full(p);
    if (!full.is_absolute()) {
      std::error_code ec;
      full = (cwd_.empty() ? fs::current_path(ec) : fs::path(cwd_)) / full;
    }
    full = full.lexically_normal();
    if (!full.has_filename() && full != full.root_path()) full = full.parent_path();
    return full.generic_string();
  }
  bool is_directory(const std::string& path) const override {
    std::error_code ec;
    return fs::is_directory(resolve(path), ec);
  }
  bool is_regular_file(const std::string& path) const override {
    std::error_code ec;
    return fs::is_regular_file(resolve(path), ec);
  }
  bool file_size(const std::string& path, uint64_t& size) const override {
    std::error_code ec;
    const fs::path p = resolve(path);
    if (!fs::is_regular_file(p, ec)) return false;
    size = fs::file_size(p, ec);
    return !ec;
  }
  bool read_file(const std::string& path, std::string& out) const override {
    std::ifstream in(resolve(path), std::ios::binary);
    if (!in) return false;
    std::ostringstream text;
    text << in.rdbuf();
    out = text.str();
    return !in.bad();
  }
  bool write_file(const std::string& path, const std::string& content) const override {
    const fs::path p = resolve(path);
    std::error_code ec;
    if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
    if (ec) return false;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out << content;
    out.flush();
    return static_cast<bool>(out);
  }
  Listing list_entries(const std::string& base, int max_depth, ListKind kind) const override {
    Listing out;
    std::error_code ec;
    if (!fs::is_directory(base, ec)) {
      out.error = "path does not exist or is not a directory";
      return out;
    }
    const auto deadline = Clock::now() + std::chrono::seconds(kListTimeoutSeconds);
    // Files only: git knows which are ignored (it cannot list directories).
    if (kind == ListKind::Files) {
      CommandOptions options;
      options.max_output = kGitListMaxOutput;
      options.timeout_s = kListTimeoutSeconds;
      options.combine_stderr = false;
      try {
        const auto res = run_command({"git", "-C", base, "ls-files", "--cached", "--others", "--exclude-standard"}, options);
        if (res.exit_code == 0 && !res.timed_out) {
          for (const auto& rel : split_lines(res.output, false)) {
            if (max_depth > 0 && entry_depth(rel) > max_depth) continue;
            if (fs::is_regular_file(fs::path(base) / rel, ec)) out.entries.push_back({rel, false});
          }
          return out;
        }
      } catch (const Error&) {
        // no git: walk
      }
    }
    walk(base, max_depth, kind, deadline, out);
    return out;
  }
  CommandResult run(const std::vector<std::string>& argv, CommandOptions options) const override {
    options.cwd = cwd_;
    return run_command(argv, options);
  }
  bool on_host() const override { return true; }

 private:
  std::string cwd_;

  static void walk(const std::string& base, int max_depth, ListKind kind, Clock::time_point deadline, Listing& out) {
    struct Pending {
      fs::path dir;
      std::string rel;
      int depth;
    };
    std::vector<Pending> stack{{fs::path(base), "", 0}};
    while (!stack.empty()) {
      if (Clock::now() >= deadline) {
        out.truncated = true;
        return;
      }
      Pending current = std::move(stack.back());
      stack.pop_back();
      std::error_code ec;
      fs::directory_iterator it(current.dir, fs::directory_options::skip_permission_denied, ec);
      if (ec) {
        out.truncated = true;
        continue;
      }
      for (const fs::directory_iterator end; it != end; it.increment(ec)) {
        if (ec) {
          out.truncated = true;
          break;
        }
        const fs::directory_entry& entry = *it;
        const std::string name = entry.path().filename().string();
        const std::string rel = current.rel.empty() ? name : current.rel + "/" + name;
        std::error_code tec;
        // A link is listed as what it points to but never walked: it could loop.
        const bool is_link = entry.is_symlink(tec);
        if (entry.is_directory(tec)) {
          if (kind != ListKind::Files) out.entries.push_back({rel, true});
          if (junk_dirs().count(name) || is_link) continue;
          if (max_depth == 0 || current.depth + 1 < max_depth) stack.push_back({entry.path(), rel, current.depth + 1});
        } else if (entry.is_regular_file(tec) && kind != ListKind::Dirs) {
          out.entries.push_back({rel, false});
        }
      }
    }
  }
};

constexpr int kIsolateTimeoutSeconds = 15;

// Every operation as a command run in an isolate (a container, a remote host) that has a POSIX
// shell, cat, wc, mkdir, dirname, find and timeout. Paths there are POSIX, relative to `cwd`.
class IsolateIo : public ToolsIo {
 public:
  explicit IsolateIo(std::string cwd) : cwd_(std::move(cwd)) {}

  std::string resolve(const std::string& path) const override {
    if (cwd_.empty() || (!path.empty() && path[0] == '/')) return path;
    return cwd_ + "/" + path;
  }
  bool is_directory(const std::string& path) const override { return test("-d", resolve(path)); }
  bool is_regular_file(const std::string& path) const override { return test("-f", resolve(path)); }
  bool file_size(const std::string& path, uint64_t& size) const override {
    const auto res = exec({"sh", "-c", "wc -c < \"$1\"", "_", resolve(path)}, 64, true);
    if (res.exit_code != 0 || res.timed_out) return false;
    try {
      size = std::stoull(res.output);
    } catch (...) {
      return false;
    }
    return true;
  }
  bool read_file(const std::string& path, std::string& out) const override {
    // stderr apart: it must not land in the file's bytes.
    const auto res = exec({"cat", "--", resolve(path)}, kMaxFileBytes, false);
    if (res.exit_code != 0 || res.timed_out) return false;
    out = res.output;
    return true;
  }
  bool write_file(const std::string& path, const std::string& content) const override {
    // The content goes on stdin: no argument for the far side to parse again.
    CommandOptions options;
    options.max_output = 4096;
    options.timeout_s = kIsolateTimeoutSeconds;
    options.stdin_data = &content;
    const auto res = run_command(
        wrap({"sh", "-c", "mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\"", "_", resolve(path)}, true), options);
    return res.exit_code == 0 && !res.timed_out;
  }
  Listing list_entries(const std::string& base, int max_depth, ListKind kind) const override {
    Listing out;
    if (!is_directory(base)) {
      out.error = "path does not exist or is not a directory";
      return out;
    }
    if (kind == ListKind::Files) {
      const auto res = exec({"sh", "-c", "cd \"$1\" && git ls-files --cached --others --exclude-standard", "_", base},
                            kGitListMaxOutput, true);
      if (res.exit_code == 0 && !res.timed_out) {
        for (const auto& rel : split_lines(res.output, false))
          if (max_depth == 0 || entry_depth(rel) <= max_depth) out.entries.push_back({rel, false});
        return out;
      }
    }
    if (kind != ListKind::Files)
      for (auto& rel : find(base, max_depth, true, out.truncated)) out.entries.push_back({std::move(rel), true});
    if (kind != ListKind::Dirs)
      for (auto& rel : find(base, max_depth, false, out.truncated)) out.entries.push_back({std::move(rel), false});
    return out;
  }
  // Wrapped in the isolate's own `timeout`: killing the client here does not stop the command there.
  CommandResult run(const std::vector<std::string>& argv, CommandOptions options) const override {
    std::vector<std::string> inner = {"timeout", std::to_string(options.timeout_s) + "s"};
    inner.insert(inner.end(), argv.begin(), argv.end());
    if (!cwd_.empty()) {
      std::vector<std::string> in_cwd = {"sh", "-c", "cd \"$1\" || exit 127; shift; exec \"$@\"", "_", cwd_};
      in_cwd.insert(in_cwd.end(), inner.begin(), inner.end());
      inner = std::move(in_cwd);
    }
    options.timeout_s += 5;  // the isolate's timeout goes first
    options.cwd.clear();
    return run_command(wrap(inner, true), options);
  }

 protected:
  // The host command that runs `inner` (a whole POSIX argv) in the isolate.
  virtual std::vector<std::string> wrap(const std::vector<std::string>& inner, bool needs_stdin) const = 0;

  // `argv` quoted for a POSIX shell to split back into exactly `argv`.
  static std::string shell_quote(const std::vector<std::string>& argv) {
    std::string out;
    for (const auto& arg : argv) {
      if (!out.empty()) out += ' ';
      out += '\'';
      for (const char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
    return out;
  }

 private:
  std::string cwd_;

  CommandResult exec(const std::vector<std::string>& inner, size_t max_output, bool combine_stderr) const {
    CommandOptions options;
    options.max_output = max_output;
    options.timeout_s = kIsolateTimeoutSeconds;
    options.combine_stderr = combine_stderr;
    return run_command(wrap(inner, false), options);
  }
  bool test(const char* flag, const std::string& path) const {
    const auto res = exec({"sh", "-c", std::string("[ ") + flag + " \"$1\" ]", "_", path}, 4096, true);
    return res.exit_code == 0 && !res.timed_out;
  }
  std::vector<std::string> find(const std::string& base, int max_depth, bool dirs, bool& truncated) const {
    std::string prune;
    for (const auto& name : junk_dirs()) prune += (prune.empty() ? "-name " : " -o -name ") + name;
    std::string command = "cd \"$1\" && find . -mindepth 1";
    if (max_depth > 0) command += " -maxdepth " + std::to_string(max_depth);
    command += " \\( " + prune + " \\) -prune";
    command += dirs ? " -print -o -type d -print" : " -o -type f -print";
    const auto res = exec({"sh", "-c", command, "_", base}, kGitListMaxOutput, true);
    truncated = truncated || res.timed_out;
    return split_lines(res.output, true);
  }
};

// A running container, through `<engine> exec` (docker and podman take the same arguments).
class ContainerIo : public IsolateIo {
 public:
  ContainerIo(std::string engine, std::string id, std::string cwd)
      : IsolateIo(std::move(cwd)), engine_(std::move(engine)), id_(std::move(id)) {}

 protected:
  std::vector<std::string> wrap(const std::vector<std::string>& inner, bool needs_stdin) const override {
    std::vector<std::string> argv = {engine_, "exec"};
    if (needs_stdin) argv.push_back("-i");
    argv.push_back(id_);
    argv.insert(argv.end(), inner.begin(), inner.end());
    return argv;
  }

 private:
  std::string engine_, id_;
};

// A remote host over ssh: not isolation, the tools can do what the account there can.
class SshIo : public IsolateIo {
 public:
  SshIo(std::string target, std::string cwd) : IsolateIo(std::move(cwd)), target_(std::move(target)) {}

  // The target can come from a header, and ssh reads options from its arguments: one starting
  // with '-' (-oProxyCommand=...) would run a command on the host.
  static bool valid_target(const std::string& target) {
    if (target.empty() || target[0] == '-') return false;
    return std::all_of(target.begin(), target.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '.' || c == '-' || c == '_' || c == '@';
    });
  }

 protected:
  std::vector<std::string> wrap(const std::vector<std::string>& inner, bool needs_stdin) const override {
    // No terminal to answer a prompt: keys only, and a host key already trusted.
    std::vector<std::string> argv = {"ssh", "-o", "BatchMode=yes", "-o", "PasswordAuthentication=no",
                                     "-o", "KbdInteractiveAuthentication=no", "-o", "StrictHostKeyChecking=yes"};
    if (!needs_stdin) argv.push_back("-n");
    argv.push_back(target_);
    argv.push_back(shell_quote(inner));  // the remote shell splits the command line again
    return argv;
  }

 private:
  std::string target_;
};

// "<engine>:<image>" (a container the server starts) or "<engine>-container:<id>" (a running one).
struct ContainerSpec {
  std::string engine;
  std::string arg;
  bool attach = false;

  static bool parse(const std::string& spec, ContainerSpec& out) {
    for (const char* engine : {"docker", "podman"}) {
      const std::string attach_prefix = std::string(engine) + "-container:";
      const std::string spawn_prefix = std::string(engine) + ":";
      if (spec.rfind(attach_prefix, 0) == 0) {
        out = {engine, spec.substr(attach_prefix.size()), true};
        return true;
      }
      if (spec.rfind(spawn_prefix, 0) == 0) {
        out = {engine, spec.substr(spawn_prefix.size()), false};
        return true;
      }
    }
    return false;
  }
  // An id starting with '-' would be an option of `<engine> exec` (--privileged).
  static bool valid_id(const std::string& id) {
    if (id.empty() || !std::isalnum(static_cast<unsigned char>(id[0]))) return false;
    return std::all_of(id.begin(), id.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '.' || c == '-' || c == '_';
    });
  }
};

// The IO a call's runtime names; throws okapi::Error (a 500, as llama-server) for one that is
// unknown or malformed: never the host in its place.
std::unique_ptr<ToolsIo> make_io(const Json& params) {
  const std::string cwd = text_param(params, "cwd", "");
  const std::string runtime = text_param(params, "runtime", "");
  if (runtime.empty()) return std::make_unique<HostIo>(cwd);
  ContainerSpec container;
  if (ContainerSpec::parse(runtime, container)) {
    if (!container.attach) throw_error("tool runtime must name a running container: {}", runtime);
    if (!ContainerSpec::valid_id(container.arg)) throw_error("invalid container id: {}", container.arg);
    return std::make_unique<ContainerIo>(container.engine, container.arg, cwd);
  }
  if (runtime.rfind("ssh:", 0) == 0) {
    const std::string target = runtime.substr(4);
    if (!SshIo::valid_target(target)) throw_error("invalid ssh target: {}", target);
    return std::make_unique<SshIo>(target, cwd);
  }
  throw_error("unknown tool runtime: {}", runtime);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The tools

// What a streaming call writes its output to; false: stop (the client has gone).
using ChunkSink = std::function<bool(const std::string&)>;

class Tool {
 public:
  virtual ~Tool() = default;
  std::string name, display_name;
  bool permission_write = false;
  bool supports_stream = false;
  bool uses_cwd = false;

  virtual Json definition() const = 0;
  virtual std::string type() const { return "server"; }
  // The result; with `sink` (a stream) the output goes there and the result is ignored.
  virtual Json invoke(const Json& params, const ChunkSink* sink, const std::function<bool()>& stop) const = 0;

  Json to_json() const {
    return {{"display_name", display_name},
            {"tool", name},
            {"type", type()},
            {"permissions", {{"write", permission_write}}},
            {"uses_cwd", uses_cwd},
            {"definition", definition()}};
  }

 protected:
  static Json function(const std::string& name, const std::string& description, Json properties,
                       std::vector<std::string> required) {
    Json parameters = {{"type", "object"}, {"properties", std::move(properties)}};
    if (!required.empty()) parameters["required"] = required;
    return {{"type", "function"},
            {"function", {{"name", name}, {"description", description}, {"parameters", std::move(parameters)}}}};
  }
  static Json prop(const char* type, const std::string& description) {
    return {{"type", type}, {"description", description}};
  }
};

namespace {

constexpr size_t kReadFileMaxBytes = 16 * 1024;
constexpr int kGlobMaxResults = 100;
constexpr size_t kGrepMaxResults = 100;
constexpr int kGrepTimeoutSeconds = 30;
constexpr size_t kGrepMaxLineBytes = 64 * 1024;  // longer lines (minified, binary) are not searched
constexpr size_t kExecMaxOutput = 16 * 1024;
constexpr int kExecMaxTimeout = 60;

class ReadFileTool : public Tool {
 public:
  ReadFileTool() {
    name = "read_file";
    display_name = "Read file";
    uses_cwd = true;
  }
  Json definition() const override {
    return function(name,
                    "Read the contents of a file. Optionally specify a 1-based line range. If append_loc is true, each "
                    "line is prefixed with its line number (e.g. \"1\u2192...\").",
                    {{"path", prop("string", "Path to the file")},
                     {"start_line", prop("integer", "First line to read, 1-based (default: 1)")},
                     {"end_line", prop("integer", "Last line to read, 1-based inclusive (default: end of file)")},
                     {"append_loc", prop("boolean", "Prefix each line with its line number")}},
                    {"path"});
  }
  Json invoke(const Json& params, const ChunkSink*, const std::function<bool()>&) const override {
    const std::string path = text_param(params, "path");
    const int64_t start_line = int_param(params, "start_line", 1);
    const int64_t end_line = int_param(params, "end_line", -1);
    const bool append_loc = bool_param(params, "append_loc", false);
    const bool as_base64 = text_param(params, "resp_type", "") == "base64";  // x-resp-type, not the model's
    const auto io = make_io(params);
    uint64_t size = 0;
    if (!io->file_size(path, size)) return {{"error", "cannot stat file: " + path}};
    if (as_base64) {
      if (size > kMaxFileBytes) return {{"error", fmt::format("file too large ({} bytes, max {})", size, kMaxFileBytes)}};
      std::string content;
      if (!io->read_file(path, content)) return {{"error", "failed to open file: " + path}};
      return {{"base64", base64_encode(content)}, {"size_bytes", content.size()}};
    }
    if (size > kReadFileMaxBytes && end_line == -1)
      return {{"error", fmt::format("file too large ({} bytes, max {}). Use start_line/end_line to read a portion.",
                                    size, kReadFileMaxBytes)}};
    if (size > kMaxFileBytes) return {{"error", fmt::format("file too large ({} bytes, max {})", size, kMaxFileBytes)}};
    std::string content;
    if (!io->read_file(path, content)) return {{"error", "failed to open file: " + path}};
    std::istringstream in(content);
    std::string result, line;
    int64_t number = 0;
    while (std::getline(in, line)) {
      ++number;
      if (number < start_line) continue;
      if (end_line != -1 && number > end_line) break;
      std::string out = append_loc ? std::to_string(number) + "\u2192" + line + "\n" : line + "\n";
      if (result.size() + out.size() > kReadFileMaxBytes) {
        result += "[output truncated]";
        break;
      }
      result += out;
    }
    return {{"plain_text_response", result}};
  }
};

class FileGlobSearchTool : public Tool {
 public:
  FileGlobSearchTool() {
    name = "file_glob_search";
    display_name = "File search";
    uses_cwd = true;
  }
  Json definition() const override {
    return function(
        name,
        "Recursively search for files matching a glob pattern under a directory. Automatically skips files ignored by "
        ".gitignore (when the directory is inside a git repo) and common junk directories (.git, node_modules, build, "
        "dist, etc.) otherwise. A pattern with no '/' (e.g. \"*.cpp\") matches the file's basename at any depth. A "
        "pattern containing '/' matches the full relative path; unless already anchored with \"**/\" or a leading '/', "
        "it is automatically prefixed with \"**/\". Use type=\"dir\" or \"all\" to also list directories; directory "
        "entries are suffixed with '/' in the output. Note: directory listings do not apply .gitignore filtering.",
        {{"path", prop("string", "Base directory to search in")},
         {"include", prop("string", "Glob pattern for files to include (e.g. \"*.cpp\" or \"src/**/*.cpp\"). Default: **")},
         {"exclude", prop("string", "Glob pattern for files to exclude")},
         {"type", prop("string", "Entry type to return: \"file\" (default), \"dir\" or \"all\"")},
         {"max_depth", prop("integer", "Maximum depth to descend into subdirectories (default: 0 = unlimited; 1 = direct "
                                       "children only)")},
         {"limit", prop("integer", fmt::format("Maximum number of results to return, capped at {} (default {})",
                                               kGlobMaxResults, kGlobMaxResults))}},
        {"path"});
  }
  Json invoke(const Json& params, const ChunkSink*, const std::function<bool()>&) const override {
    const auto io = make_io(params);
    const std::string path = text_param(params, "path");
    const std::string base = io->resolve(path);
    const std::string include = text_param(params, "include", "**");
    const std::string exclude = text_param(params, "exclude", "");
    const std::string type = text_param(params, "type", "file");
    const int max_depth = static_cast<int>(std::clamp<int64_t>(int_param(params, "max_depth", 0), 0, 1 << 20));
    const int64_t limit_asked = int_param(params, "limit", kGlobMaxResults);
    if (limit_asked < 1) return {{"error", fmt::format("invalid limit: {} (expected 1 or more)", limit_asked)}};
    const size_t limit = static_cast<size_t>(std::min<int64_t>(limit_asked, kGlobMaxResults));
    ListKind kind;
    if (type == "file") kind = ListKind::Files;
    else if (type == "dir") kind = ListKind::Dirs;
    else if (type == "all") kind = ListKind::All;
    else return {{"error", "invalid type: " + type + " (expected \"file\", \"dir\" or \"all\")"}};
    const Listing listing = io->list_entries(base, max_depth, kind);
    if (!listing.error.empty()) return {{"error", listing.error + ": " + path}};
    std::vector<const ListEntry*> matches;
    for (const auto& entry : listing.entries) {
      if (!path_glob_match(include, entry.rel)) continue;
      if (!exclude.empty() && path_glob_match(exclude, entry.rel)) continue;
      matches.push_back(&entry);
    }
    const size_t shown = std::min(matches.size(), limit);
    std::string text;
    Json entries = Json::array();
    for (size_t i = 0; i < shown; ++i) {
      text += matches[i]->rel + (matches[i]->is_dir ? "/" : "") + "\n";
      entries.push_back({{"path", matches[i]->rel}, {"type", matches[i]->is_dir ? "dir" : "file"}});
    }
    text += fmt::format("\n---\nTotal matches: {}\n", matches.size());
    if (matches.size() > shown)
      text += fmt::format("[{} results limit reached ({} total matches). Refine the glob pattern to narrow the search.]\n",
                          shown, matches.size());
    if (listing.truncated) text += "[results truncated: time budget or unreadable directory]\n";
    // `base` is absolute, so that a client (the web UI's picker) can join the entries to it.
    return {{"plain_text_response", text}, {"entries", std::move(entries)}, {"base", base}};
  }
};

// POSIX extended regular expressions (glibc's: \w \s \b too; \d is taken as [0-9]). Not
// std::regex: it recurses per character and can overflow the stack on a long line.
class Regex {
 public:
  Regex(const std::string& pattern, bool literal, bool ignore_case) {
    std::string source;
    if (literal) {
      for (const char c : pattern) {
        if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) source += '\\';
        source += c;
      }
    } else {
      for (size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] == '\\' && i + 1 < pattern.size() && (pattern[i + 1] == 'd' || pattern[i + 1] == 'D')) {
          source += pattern[i + 1] == 'd' ? "[0-9]" : "[^0-9]";
          ++i;
        } else if (pattern[i] == '\\' && i + 1 < pattern.size()) {
          source += pattern.substr(i, 2);
          ++i;
        } else {
          source += pattern[i];
        }
      }
    }
    const int rc = ::regcomp(&regex_, source.c_str(), REG_EXTENDED | REG_NOSUB | (ignore_case ? REG_ICASE : 0));
    if (rc != 0) {
      char message[256];
      ::regerror(rc, &regex_, message, sizeof(message));
      error_ = message;
    }
  }
  ~Regex() {
    if (error_.empty()) ::regfree(&regex_);
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  const std::string& error() const { return error_; }
  bool search(const std::string& line) const { return ::regexec(&regex_, line.c_str(), 0, nullptr, 0) == 0; }

 private:
  regex_t regex_{};
  std::string error_;
};

class GrepSearchTool : public Tool {
 public:
  GrepSearchTool() {
    name = "grep_search";
    display_name = "Grep search";
    uses_cwd = true;
  }
  Json definition() const override {
    return function(
        name,
        "Search for a pattern in files under a path. Returns matching lines with file paths (and, unless searching a "
        "single file, paths relative to the given directory). Automatically skips files ignored by .gitignore (when "
        "the directory is inside a git repo) and common junk directories (.git, node_modules, build, dist, etc.) "
        "otherwise. include/exclude: a pattern with no '/' matches the basename at any depth; a pattern containing '/' "
        "matches the full relative path (auto-anchored with \"**/\" unless already anchored).",
        {{"path", prop("string", "File or directory to search in")},
         {"pattern", prop("string", "Pattern to search for (POSIX extended regular expression unless literal is true)")},
         {"include", prop("string", "Glob pattern to filter files (default: **)")},
         {"exclude", prop("string", "Glob pattern to exclude files")},
         {"return_line_numbers", prop("boolean", "If true, include line numbers in results")},
         {"literal", prop("boolean", "Treat pattern as a literal string instead of a regular expression (default: false)")},
         {"ignore_case", prop("boolean", "Case-insensitive search (default: false)")},
         {"context_lines", prop("integer", "Number of lines of context to show before and after each match (default: 0)")}},
        {"path", "pattern"});
  }
  Json invoke(const Json& params, const ChunkSink*, const std::function<bool()>& stop) const override {
    const std::string path = text_param(params, "path");
    const std::string pattern = text_param(params, "pattern");
    const std::string include = text_param(params, "include", "**");
    const std::string exclude = text_param(params, "exclude", "");
    const bool show_numbers = bool_param(params, "return_line_numbers", false);
    const bool literal = bool_param(params, "literal", false);
    const bool ignore_case = bool_param(params, "ignore_case", false);
    const int64_t context = std::clamp<int64_t>(int_param(params, "context_lines", 0), 0, 1000);
    const Regex regex(pattern, literal, ignore_case);
    if (!regex.error().empty()) return {{"error", "invalid regex: " + regex.error()}};
    const auto io = make_io(params);
    const auto deadline = Clock::now() + std::chrono::seconds(kGrepTimeoutSeconds);
    std::vector<std::pair<std::string, std::string>> files;  // absolute path, shown path
    const std::string absolute = io->resolve(path);
    if (io->is_regular_file(absolute)) {
      files.emplace_back(absolute, path);
    } else if (io->is_directory(absolute)) {
      const Listing listing = io->list_entries(absolute, 0, ListKind::Files);
      if (!listing.error.empty()) return {{"error", listing.error + ": " + path}};
      for (const auto& entry : listing.entries) {
        if (!path_glob_match(include, entry.rel)) continue;
        if (!exclude.empty() && path_glob_match(exclude, entry.rel)) continue;
        files.emplace_back(absolute + (absolute.ends_with('/') ? "" : "/") + entry.rel, entry.rel);
      }
    } else {
      return {{"error", "path does not exist: " + path}};
    }
    std::string text;
    size_t total = 0;
    bool limit_reached = false, out_of_time = false;
    const bool numbers = show_numbers || context > 0;
    for (const auto& [file, shown] : files) {
      if (limit_reached || out_of_time) break;
      if ((stop && stop()) || Clock::now() >= deadline) {
        out_of_time = true;
        break;
      }
      uint64_t size = 0;
      if (io->on_host() && (!io->file_size(file, size) || size > kMaxFileBytes)) continue;
      std::string content;
      if (!io->read_file(file, content)) continue;
      std::vector<std::string> lines;
      std::istringstream in(content);
      for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
      for (size_t i = 0; i < lines.size(); ++i) {
        if (total >= kGrepMaxResults) {
          limit_reached = true;
          break;
        }
        if (lines[i].size() > kGrepMaxLineBytes || !regex.search(lines[i])) continue;
        const size_t first = i >= static_cast<size_t>(context) ? i - static_cast<size_t>(context) : 0;
        const size_t last = std::min(lines.size() - 1, i + static_cast<size_t>(context));
        for (size_t j = first; j <= last; ++j) {
          const bool match = j == i;
          text += shown + (match ? ":" : "-");
          if (numbers) text += std::to_string(j + 1) + (match ? ":" : "-");
          text += lines[j] + "\n";
        }
        if (context > 0) text += "--\n";
        ++total;
      }
    }
    text += fmt::format("\n---\nTotal matches: {}\n", total);
    if (limit_reached)
      text += fmt::format("[{} matches limit reached. Narrow the path/pattern/include to see more.]\n", kGrepMaxResults);
    if (out_of_time) text += "[search stopped: time budget]\n";
    return {{"plain_text_response", text}};
  }
};

class ExecShellCommandTool : public Tool {
 public:
  ExecShellCommandTool() {
    name = "exec_shell_command";
    display_name = "Execute shell command";
    uses_cwd = true;
    permission_write = true;
    supports_stream = true;
  }
  Json definition() const override {
    return function(name, "Execute a shell command and return its output (stdout and stderr combined).",
                    {{"command", prop("string", "Shell command to execute")},
                     {"timeout", prop("integer", fmt::format("Timeout in seconds (default 10, max {})", kExecMaxTimeout))},
                     {"max_output_size",
                      prop("integer", fmt::format("Maximum output size in bytes (default {})", kExecMaxOutput))}},
                    {"command"});
  }
  Json invoke(const Json& params, const ChunkSink* sink, const std::function<bool()>& stop) const override {
    const std::string command = text_param(params, "command");
    CommandOptions options;
    options.timeout_s = static_cast<int>(std::clamp<int64_t>(int_param(params, "timeout", 10), 1, kExecMaxTimeout));
    options.max_output = static_cast<size_t>(
        std::clamp<int64_t>(int_param(params, "max_output_size", kExecMaxOutput), 1, kExecMaxOutput));
    options.stop = stop;
    const auto io = make_io(params);
    if (sink) options.on_chunk = *sink;
    const auto res = io->run({"sh", "-c", command}, options);
    std::string tail = fmt::format("\n[exit code: {}]", res.exit_code);
    if (res.timed_out) tail += " [exit due to timed out]";
    if (sink) {
      (*sink)(tail);
      return Json();
    }
    return {{"plain_text_response", res.output + tail}};
  }
};

class WriteFileTool : public Tool {
 public:
  WriteFileTool() {
    name = "write_file";
    display_name = "Write file";
    uses_cwd = true;
    permission_write = true;
  }
  Json definition() const override {
    return function(name,
                    "Write content to a file, creating it (including parent directories) if it does not exist. May use "
                    "with edit_file for more complex edits.",
                    {{"path", prop("string", "Path of the file to write")}, {"content", prop("string", "Content to write")}},
                    {"path", "content"});
  }
  Json invoke(const Json& params, const ChunkSink*, const std::function<bool()>&) const override {
    const std::string path = text_param(params, "path");
    const std::string content = text_param(params, "content");
    const auto io = make_io(params);
    if (!io->write_file(path, content)) return {{"error", "failed to write file: " + path}};
    return {{"result", "file written successfully"}, {"path", path}, {"bytes", content.size()}};
  }
};

class EditFileTool : public Tool {
 public:
  EditFileTool() {
    name = "edit_file";
    display_name = "Edit file";
    uses_cwd = true;
    permission_write = true;
  }
  Json definition() const override {
    Json edit = {{"type", "object"},
                 {"properties",
                  {{"old_text", prop("string", "Exact text to find; must be unique in the file and must not overlap "
                                               "with other edits")},
                   {"new_text", prop("string", "Text to replace old_text with")}}},
                 {"required", {"old_text", "new_text"}}};
    return function(name,
                    "Edit a file using exact text replacement. Each edits[].old_text must be unique in the file and is "
                    "matched against the original content, not incrementally. Merge nearby changes into one edit "
                    "instead of overlapping edits. Use write_file to replace the whole file.",
                    {{"path", prop("string", "Path to the file to edit")},
                     {"edits", {{"type", "array"},
                                {"description", "One or more exact text replacements to apply"},
                                {"items", std::move(edit)}}}},
                    {"path", "edits"});
  }
  Json invoke(const Json& params, const ChunkSink*, const std::function<bool()>&) const override {
    const std::string path = text_param(params, "path");
    const auto edits_it = params.find("edits");
    if (edits_it == params.end() || !edits_it->is_array() || edits_it->empty())
      return {{"error", "\"edits\" must be a non-empty array"}};
    struct Edit {
      std::string old_text, new_text;
    };
    std::vector<Edit> edits;
    for (const auto& e : *edits_it) {
      if (!e.is_object()) throw_bad_request("edits", "each of 'edits' must be an object {{old_text, new_text}}");
      Edit edit{text_param(e, "old_text"), text_param(e, "new_text")};
      if (edit.old_text.empty()) return {{"error", fmt::format("edits[{}].old_text must not be empty", edits.size())}};
      edits.push_back(std::move(edit));
    }
    const auto io = make_io(params);
    uint64_t size = 0;
    if (!io->file_size(path, size)) return {{"error", "cannot stat file: " + path}};
    if (size > kMaxFileBytes) return {{"error", fmt::format("file too large ({} bytes, max {})", size, kMaxFileBytes)}};
    std::string original;
    if (!io->read_file(path, original)) return {{"error", "failed to open file: " + path}};
    // An old_text not found exactly may still match once whitespace and typographic quotes,
    // dashes and spaces are normalized (a model often writes them so).
    const std::string fuzzy_original = normalize(original);
    bool any_fuzzy = false;
    for (size_t i = 0; i < edits.size(); ++i) {
      if (original.find(edits[i].old_text) != std::string::npos) continue;
      if (fuzzy_original.find(normalize(edits[i].old_text)) == std::string::npos)
        return {{"error", fmt::format("could not find edits[{}].old_text in {}, it must match the file's current content "
                                      "exactly",
                                      i, path)}};
      any_fuzzy = true;
    }
    const std::string& base = any_fuzzy ? fuzzy_original : original;
    std::vector<Match> matches;
    for (size_t i = 0; i < edits.size(); ++i) {
      // Uniqueness on the normalized text: a duplicate that differs only in whitespace counts.
      const size_t occurrences = count(fuzzy_original, normalize(edits[i].old_text));
      if (occurrences > 1)
        return {{"error", fmt::format("found {} occurrences of edits[{}].old_text in {}, it must be unique", occurrences,
                                      i, path)}};
      const std::string needle = any_fuzzy ? normalize(edits[i].old_text) : edits[i].old_text;
      const size_t at = base.find(needle);
      if (at == std::string::npos)
        return {{"error", fmt::format("could not find edits[{}].old_text in {}, it must match the file's current content "
                                      "exactly",
                                      i, path)}};
      matches.push_back({i, at, needle.size(), edits[i].new_text});
    }
    std::sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) { return a.at < b.at; });
    for (size_t i = 1; i < matches.size(); ++i)
      if (matches[i - 1].at + matches[i - 1].length > matches[i].at)
        return {{"error", fmt::format("edits[{}] and edits[{}] overlap in {}; merge them into one edit or target "
                                      "disjoint regions",
                                      matches[i - 1].edit, matches[i].edit, path)}};
    const std::string updated = any_fuzzy ? replace_keeping_lines(original, base, matches) : replace(base, matches, 0);
    if (updated == original) return {{"error", "no changes made: the replacement(s) produced identical content"}};
    if (!io->write_file(path, updated)) return {{"error", "failed to write file: " + path}};
    return {{"result", "file edited successfully"}, {"path", path}, {"edits_applied", matches.size()}};
  }

 private:
  struct Match {
    size_t edit, at, length;
    std::string new_text;
  };

  // Trailing whitespace dropped; typographic quotes, dashes and spaces made ASCII.
  static std::string normalize_line(std::string_view s) {
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    std::string out;
    out.reserve(s.size());
    const auto byte = [&](size_t i) { return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u; };
    for (size_t i = 0; i < s.size();) {
      const unsigned c = byte(i), b1 = byte(i + 1), b2 = byte(i + 2);
      char ascii = 0;
      size_t width = 3;
      if (c == 0xE2 && b1 == 0x80) {
        if (b2 >= 0x98 && b2 <= 0x9B) ascii = '\'';                                  // single quotes
        else if (b2 >= 0x9C && b2 <= 0x9F) ascii = '"';                               // double quotes
        else if (b2 >= 0x90 && b2 <= 0x95) ascii = '-';                               // dashes
        else if ((b2 >= 0x82 && b2 <= 0x8A) || b2 == 0xAF) ascii = ' ';               // spaces
      } else if (c == 0xE2 && b1 == 0x88 && b2 == 0x92) {
        ascii = '-';  // minus sign
      } else if ((c == 0xE2 && b1 == 0x81 && b2 == 0x9F) || (c == 0xE3 && b1 == 0x80 && b2 == 0x80)) {
        ascii = ' ';
      } else if (c == 0xC2 && b1 == 0xA0) {
        ascii = ' ';  // no-break space
        width = 2;
      }
      if (ascii) {
        out += ascii;
        i += width;
      } else {
        out += s[i++];
      }
    }
    return out;
  }
  // Line by line: the normalized text has the same lines as the original.
  static std::string normalize(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    size_t start = 0;
    for (;;) {
      const size_t newline = text.find('\n', start);
      out += normalize_line(text.substr(start, newline == std::string::npos ? std::string::npos : newline - start));
      if (newline == std::string::npos) break;
      out += '\n';
      start = newline + 1;
    }
    return out;
  }
  static size_t count(const std::string& text, const std::string& needle) {
    if (needle.empty()) return 0;
    size_t n = 0;
    for (size_t pos = 0; (pos = text.find(needle, pos)) != std::string::npos; pos += needle.size()) ++n;
    return n;
  }
  // `matches` sorted and disjoint; their offsets are `offset` past the start of `text`.
  static std::string replace(const std::string& text, const std::vector<Match>& matches, size_t offset) {
    std::string out = text;
    for (auto it = matches.rbegin(); it != matches.rend(); ++it)
      out = out.substr(0, it->at - offset) + it->new_text + out.substr(it->at - offset + it->length);
    return out;
  }
  static std::vector<std::string> lines_with_endings(const std::string& text) {
    std::vector<std::string> lines;
    for (size_t start = 0; start < text.size();) {
      const size_t newline = text.find('\n', start);
      if (newline == std::string::npos) {
        lines.push_back(text.substr(start));
        break;
      }
      lines.push_back(text.substr(start, newline - start + 1));
      start = newline + 1;
    }
    return lines;
  }
  // Replacements made in the normalized text; the lines they do not touch come from the original
  // (whose whitespace and quotes stay as they were).
  static std::string replace_keeping_lines(const std::string& original, const std::string& base,
                                           const std::vector<Match>& matches) {
    const auto original_lines = lines_with_endings(original);
    struct Span {
      size_t start, end;
    };
    std::vector<Span> spans;
    size_t offset = 0;
    for (const auto& line : lines_with_endings(base)) {
      spans.push_back({offset, offset + line.size()});
      offset += line.size();
    }
    struct Group {
      size_t first, end;  // lines [first, end)
      std::vector<Match> matches;
    };
    std::vector<Group> groups;
    for (const auto& m : matches) {
      size_t first = spans.size();
      for (size_t i = 0; i < spans.size(); ++i)
        if (m.at >= spans[i].start && m.at < spans[i].end) {
          first = i;
          break;
        }
      if (first == spans.size()) first = spans.empty() ? 0 : spans.size() - 1;
      size_t last = first;
      while (last + 1 < spans.size() && spans[last].end < m.at + m.length) ++last;
      if (!groups.empty() && first < groups.back().end) {
        groups.back().end = std::max(groups.back().end, last + 1);
        groups.back().matches.push_back(m);
      } else {
        groups.push_back({first, last + 1, {m}});
      }
    }
    std::string out;
    size_t next_line = 0;
    for (const auto& g : groups) {
      for (size_t i = next_line; i < g.first && i < original_lines.size(); ++i) out += original_lines[i];
      if (spans.empty()) {
        out += replace(base, g.matches, 0);
      } else {
        const size_t from = spans[g.first].start, to = spans[g.end - 1].end;
        out += replace(base.substr(from, to - from), g.matches, from);
      }
      next_line = g.end;
    }
    for (size_t i = next_line; i < original_lines.size(); ++i) out += original_lines[i];
    return out;
  }
};

class GetInfoTool : public Tool {
 public:
  GetInfoTool() {
    name = "get_info";
    display_name = "Get Runtime Info";
    uses_cwd = true;
  }
  Json definition() const override {
    return function(name, "Returns runtime info: the OS name/version and the current working directory", Json::object(),
                    {});
  }
  Json invoke(const Json& params, const ChunkSink*, const std::function<bool()>&) const override {
    const auto io = make_io(params);
    CommandOptions options;
    options.max_output = 4096;
    options.timeout_s = 5;
    const auto uname = io->run({"uname", "-a"}, options);
    std::string os = uname.exit_code == 0 && !uname.timed_out ? uname.output : "unknown";
    while (!os.empty() && std::isspace(static_cast<unsigned char>(os.back()))) os.pop_back();
    std::string cwd = text_param(params, "cwd", "");
    if (cwd.empty()) {
      if (io->on_host()) {
        std::error_code ec;
        cwd = fs::current_path(ec).generic_string();
      } else {
        const auto pwd = io->run({"pwd"}, options);
        cwd = pwd.exit_code == 0 && !pwd.timed_out ? pwd.output : "unknown";
        while (!cwd.empty() && std::isspace(static_cast<unsigned char>(cwd.back()))) cwd.pop_back();
      }
    }
    return {{"os", os}, {"cwd", cwd}};
  }
};

// A tool of an MCP server, called through the manager (which starts the server when needed).
class McpTool : public Tool {
 public:
  McpTool(McpToolDef def, McpManager& manager) : def_(std::move(def)), manager_(manager) {
    name = def_.server + "_" + def_.name;
    display_name = name;
  }
  std::string type() const override { return "mcp"; }
  Json definition() const override {
    return {{"type", "function"},
            {"function",
             {{"name", name},
              {"description", def_.description},
              {"parameters", def_.input_schema.is_object() ? def_.input_schema : Json::object()}}}};
  }
  Json invoke(const Json& params, const ChunkSink*, const std::function<bool()>&) const override {
    // The server's own arguments: what /tools added from headers is not for it.
    Json arguments = params;
    for (const char* key : {"cwd", "runtime", "resp_type"}) arguments.erase(key);
    return manager_.call_tool(def_.server, def_.name, arguments);
  }

 private:
  McpToolDef def_;
  McpManager& manager_;
};

std::vector<std::unique_ptr<Tool>> builtin_tools() {
  // Only minimal file and shell tools belong here, as llama-server keeps them; anything higher
  // level comes through MCP.
  std::vector<std::unique_ptr<Tool>> tools;
  tools.push_back(std::make_unique<ReadFileTool>());
  tools.push_back(std::make_unique<FileGlobSearchTool>());
  tools.push_back(std::make_unique<GrepSearchTool>());
  tools.push_back(std::make_unique<ExecShellCommandTool>());
  tools.push_back(std::make_unique<WriteFileTool>());
  tools.push_back(std::make_unique<EditFileTool>());
  tools.push_back(std::make_unique<GetInfoTool>());
  return tools;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// --tools-runtime

struct ToolsRuntime {
  virtual ~ToolsRuntime() = default;
  // The runtime spec of one call (make_io's "runtime").
  virtual std::string spec() = 0;
};

namespace {

// A container or host that exists already: checked once, then named in every call.
struct StaticRuntime : ToolsRuntime {
  explicit StaticRuntime(std::string s) : spec_(std::move(s)) {}
  std::string spec() override { return spec_; }
  std::string spec_;
};

// "<engine>:<image>": a container the server starts (`<engine> run --rm -i IMAGE sh`, its shell
// waiting on stdin) and stops when it exits (closing that stdin; --rm removes it). One that died
// is started again.
struct ContainerRuntime : ToolsRuntime {
  ContainerRuntime(std::string engine, std::string image) : engine_(std::move(engine)), image_(std::move(image)) {
    if (image_.empty()) throw_usage_error("--tools-runtime {}:IMAGE needs an image name", engine_);
    start();
  }
  ~ContainerRuntime() override { stop(); }

  std::string spec() override {
    std::lock_guard lock(mutex_);
    if (!client_ || !client_->running()) {
      std::fprintf(stderr, "okapi: warning: tools runtime container %s exited; starting another\n", id_.c_str());
      stop();
      start();
    }
    return engine_ + "-container:" + id_;
  }

 private:
  std::string engine_, image_, id_;
  std::unique_ptr<ChildProcess> client_;
  std::mutex mutex_;

  void start() {
    static std::atomic<int> counter{0};
    std::error_code ec;
    const fs::path cidfile =
        fs::temp_directory_path(ec) / fmt::format("okapi-tools-runtime-{}-{}.cid", ::getpid(), counter.fetch_add(1));
    fs::remove(cidfile, ec);
    SpawnOptions options;
    options.argv = {engine_, "run", "--rm", "-i", "--cidfile", cidfile.string(), image_, "sh"};
    client_ = std::make_unique<ChildProcess>(options);
    std::string id;
    for (int i = 0; i < 300 && id.empty(); ++i) {
      std::ifstream in(cidfile);
      if (in) std::getline(in, id);
      if (id.empty()) {
        if (!client_->running()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    fs::remove(cidfile, ec);
    if (id.empty() || !ContainerSpec::valid_id(id)) {
      std::string err;
      if (client_->stderr_fd() >= 0) ChildProcess::read_some(client_->stderr_fd(), err, std::chrono::milliseconds(0));
      client_.reset();
      throw_error("--tools-runtime {}:{}: the container did not start{}{}", engine_, image_, err.empty() ? "" : ": ", err);
    }
    id_ = id;
  }
  void stop() {
    if (!client_) return;
    client_->close_stdin();  // its shell exits; --rm removes the container
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (client_->running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (client_->running() && !id_.empty()) {
      CommandOptions options;
      options.timeout_s = 10;
      try {
        run_command({engine_, "rm", "-f", id_}, options);
      } catch (const Error&) {
      }
    }
    client_.reset();
  }
};

std::unique_ptr<ToolsRuntime> make_runtime(const std::string& spec) {
  ContainerSpec container;
  if (ContainerSpec::parse(spec, container) && !container.attach)
    return std::make_unique<ContainerRuntime>(container.engine, container.arg);
  try {
    make_io({{"runtime", spec}});  // a spec it rejects is rejected now
  } catch (const Error& e) {
    throw_usage_error("--tools-runtime: {}", e.what());
  }
  return std::make_unique<StaticRuntime>(spec);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ServerTools

std::vector<std::string> ServerTools::builtin_names() {
  std::vector<std::string> names;
  for (const auto& t : builtin_tools()) names.push_back(t->name);
  return names;
}

ServerTools::ServerTools(const std::vector<std::string>& enabled, const std::string& runtime, McpManager* mcp,
                         std::function<bool()> stopping)
    : stopping_(std::move(stopping)) {
  if (!enabled.empty()) {
    const auto known = builtin_names();
    for (const auto& name : enabled) {
      if (name != "all" && std::find(known.begin(), known.end(), name) == known.end()) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        throw_usage_error("--tools: unknown tool \"{}\"; the tools are: all, {}", name, list);
      }
    }
    const bool all = std::find(enabled.begin(), enabled.end(), "all") != enabled.end();
    for (auto& t : builtin_tools())
      if (all || std::find(enabled.begin(), enabled.end(), t->name) != enabled.end()) tools_.push_back(std::move(t));
  }
  if (mcp) {
    std::unordered_set<std::string> names;
    for (const auto& t : tools_) names.insert(t->name);
    for (auto& def : mcp->tools()) {
      const std::string full = def.server + "_" + def.name;
      if (!names.insert(full).second) {
        std::fprintf(stderr, "okapi: warning: MCP tool \"%s\" has the name of another tool; skipped\n", full.c_str());
        continue;
      }
      tools_.push_back(std::make_unique<McpTool>(std::move(def), *mcp));
    }
  }
  if (!runtime.empty()) runtime_ = make_runtime(runtime);
}

ServerTools::~ServerTools() = default;

Json ServerTools::list() const {
  Json out = Json::array();
  for (const auto& t : tools_) out.push_back(t->to_json());
  return out;
}

void ServerTools::handle_call(const http::Request& req, http::Response& res) const {
  const Json body = parse_body(req.body);
  if (!body.is_object()) throw_bad_request("", "the request body must be a JSON object {{\"tool\", \"params\"}}");
  const std::string tool_name = text_param(body, "tool");
  Json params = Json::object();
  if (const auto it = body.find("params"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) throw_bad_request("params", "'params' must be an object");
    params = *it;
  }
  const bool stream = bool_param(body, "stream", false);
  // The working directory, runtime and response type come from the client's headers, never from
  // the model's arguments.
  for (const char* key : {"cwd", "runtime", "resp_type"}) params.erase(key);
  if (const auto cwd = req.header("x-tool-cwd"); !cwd.empty()) params["cwd"] = std::string(cwd);
  if (const auto runtime = req.header("x-tool-runtime"); !runtime.empty()) params["runtime"] = std::string(runtime);
  else if (runtime_) params["runtime"] = runtime_->spec();
  if (const auto resp_type = req.header("x-resp-type"); !resp_type.empty()) params["resp_type"] = std::string(resp_type);

  const Tool* tool = nullptr;
  for (const auto& t : tools_)
    if (t->name == tool_name) tool = t.get();
  if (!tool) throw ApiError(404, "invalid_request_error", fmt::format("unknown tool \"{}\"", tool_name), "tool");
  if (stream && !tool->supports_stream)
    throw_bad_request("stream", "tool \"{}\" does not support stream = true", tool_name);

  if (!stream) {
    Json result;
    try {
      result = tool->invoke(params, nullptr, stopping_);
    } catch (const ApiError&) {
      throw;
    } catch (const std::exception& e) {  // an unknown runtime, a command that cannot run
      throw ApiError(500, "server_error", e.what());
    }
    send_json(res, 200, result);
    return;
  }
  // Streamed: each piece of output as {"chunk"}, then {"done": true} (with "error" when it failed),
  // as server-sent events. The call runs inside the first write; a client that leaves stops it.
  res.status = 200;
  res.content_type = "text/event-stream";
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  const auto stopping = stopping_;
  res.stream = [tool, params = std::move(params), stopping](http::StreamSink& sink) {
    bool connected = true;
    const ChunkSink write_chunk = [&](const std::string& chunk) {
      if (chunk.empty()) return connected;
      connected = connected && sink.write("data: " + to_text(Json{{"chunk", chunk}}) + "\n\n");
      return connected;
    };
    const auto stop = [&] { return !connected || (stopping && stopping()); };
    Json done = {{"done", true}};
    try {
      tool->invoke(params, &write_chunk, stop);
    } catch (const ApiError& e) {
      done["error"] = e.what();
    } catch (const std::exception& e) {
      done["error"] = e.what();
    }
    if (!connected) return false;
    if (!sink.write("data: " + to_text(done) + "\n\n")) return false;
    sink.done();
    return true;
  };
}

}  // namespace okapi::server

// ---------------------------------------------------------------------------------------------
// Routes (from ServerState::build_routes, before the server listens: a bad MCP config or an
// unknown tool stops the start, and MCP servers list their tools first)

namespace okapi::server {

void ServerState::add_tool_routes() {
  std::vector<McpServerConfig> servers;
  if (!options_.mcp_servers_config.empty()) {
    std::ifstream in(options_.mcp_servers_config, std::ios::binary);
    if (!in) throw_usage_error("--mcp-servers-config {}: cannot open: {}", options_.mcp_servers_config, std::strerror(errno));
    std::ostringstream text;
    text << in.rdbuf();
    servers = parse_mcp_config(text.str(), "--mcp-servers-config " + options_.mcp_servers_config);
  }
  if (!options_.mcp_servers_json.empty()) {
    for (auto& server : parse_mcp_config(options_.mcp_servers_json, "--mcp-servers-json")) {
      const bool duplicate = std::any_of(servers.begin(), servers.end(), [&](const auto& s) { return s.name == server.name; });
      if (duplicate) {
        std::fprintf(stderr, "okapi: warning: MCP server '%s' is configured twice; the first is used\n", server.name.c_str());
        continue;
      }
      servers.push_back(std::move(server));
    }
  }
  const auto stopping = [this] { return draining(); };
  if (!servers.empty()) {
    mcp_ = std::make_unique<McpManager>(std::move(servers), stopping);
    mcp_->warm_up();
  }
  if (!options_.tools.empty() || mcp_) {
    tools_ = std::make_unique<ServerTools>(options_.tools, options_.tools_runtime, mcp_.get(), stopping);
    std::fprintf(stderr,
                 "okapi: warning: /tools is on (%s%s%s): whoever can call this server can read and write files and run "
                 "commands as its user\n",
                 options_.tools.empty() ? "" : "--tools", !options_.tools.empty() && mcp_ ? ", " : "",
                 mcp_ ? "MCP servers" : "");
  } else if (!options_.tools_runtime.empty()) {
    throw_usage_error("--tools-runtime needs --tools (or an MCP servers config)");
  }
  const auto disabled = [] { throw ApiError(403, "feature_disabled", "this feature is disabled"); };
  add_route("GET", "/tools", [this, disabled](const Request&, Response& res) {
    if (!tools_) disabled();
    send_json(res, 200, tools_->list());
  });
  add_route("POST", "/tools", [this, disabled](const Request& req, Response& res) {
    if (!tools_) disabled();
    tools_->handle_call(req, res);
  });
}

}  // namespace okapi::server
