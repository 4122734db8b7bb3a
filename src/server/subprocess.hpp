// Child processes for the server's opt-in tools (tools_builtin: exec_shell_command, MCP servers).
// Each child runs in a session (and process group) of its own, so that killing it kills what it
// spawned too: no grandchild keeps a pipe open (which would block a reader waiting for EOF) or
// outlives the server. Every child is reaped, so none stays a zombie. The pipes are non-blocking
// and every read and write here polls with a bound, so no call waits on a child forever.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace okapi::server {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH unless it holds a '/'
  std::string cwd;                // empty: the server's working directory
  // Set over the server's environment.
  std::vector<std::pair<std::string, std::string>> env;
  bool combine_stderr = false;  // stderr goes to stdout's pipe (there is no stderr pipe then)
};

class ChildProcess {
 public:
  // Starts the child. Throws okapi::Error naming the command when it cannot be run (not found,
  // not executable, the working directory missing).
  explicit ChildProcess(const SpawnOptions& options);
  // Kills the child's process group and reaps the child.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  int stdout_fd() const { return out_fd_; }
  int stderr_fd() const { return err_fd_; }  // -1 with combine_stderr

  // Writes all of `data` to the child's stdin, waiting at most until `deadline` or until `stop`
  // says so; false when not all was written (the child closed its stdin, died, or time ran out).
  bool write_stdin(std::string_view data, std::chrono::steady_clock::time_point deadline,
                   const std::function<bool()>& stop = nullptr);
  void close_stdin();

  // Reads what `fd` (stdout_fd or stderr_fd) has, waiting at most `wait` for it; appends it to
  // `out`. Returns false at end of file (or error), true otherwise (even when nothing came).
  static bool read_some(int fd, std::string& out, std::chrono::milliseconds wait);

  // True while the child has not exited; once it has, kills what it left running in its group and
  // reaps it, without blocking.
  bool running();
  // SIGKILL to the child's whole process group (the child and what it started); nothing once reaped.
  void kill_group();
  // Kills the group (the child too when still running) and reaps the child; the exit status: the
  // code, or 128 + the signal.
  int finish();
  // The exit status once reaped (finish(), or running() having seen the exit); -1 before.
  int exit_status() const { return exit_status_; }

 private:
  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1, err_fd_ = -1;
  bool reaped_ = false;
  int exit_status_ = -1;
  void close_fds();
};

}  // namespace okapi::server
