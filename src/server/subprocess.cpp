#include "server/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "core/error.hpp"

extern char** environ;

namespace okapi::server {
namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw_error("cannot create a pipe for a child process: {}", std::strerror(errno));
    read = fds[0];
    write = fds[1];
  }
  ~Pipe() {
    close_fd(read);
    close_fd(write);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
};

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

int wait_status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

ChildProcess::ChildProcess(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) throw_error("cannot run a child process: no command");
  // The environment: the server's, with the overrides set over it.
  std::map<std::string, std::string> overrides(options.env.begin(), options.env.end());
  std::vector<std::string> env_text;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const std::string key(entry.substr(0, entry.find('=')));
    if (!overrides.count(key)) env_text.emplace_back(entry);
  }
  for (const auto& [key, value] : overrides) env_text.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_text = options.argv;
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);

  Pipe in, out, err;
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attributes);
  posix_spawn_file_actions_adddup2(&actions, in.read, 0);
  posix_spawn_file_actions_adddup2(&actions, out.write, 1);
  posix_spawn_file_actions_adddup2(&actions, options.combine_stderr ? out.write : err.write, 2);
  // Nothing else of the server's (its listening socket, the model file) reaches the child.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, options.cwd.c_str());
  // A session of its own: kill_group() reaches what the child starts. The server ignores SIGPIPE,
  // which a child would inherit; it gets the default back, and no blocked signals.
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setsigmask(&attributes, &empty);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, &attributes, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc != 0) {
    if (!options.cwd.empty() && rc == ENOENT && ::access(options.cwd.c_str(), X_OK) != 0)
      throw_error("cannot run '{}': working directory {}: {}", options.argv[0], options.cwd, std::strerror(rc));
    throw_error("cannot run '{}': {}", options.argv[0], std::strerror(rc));
  }
  pid_ = pid;
  in_fd_ = in.write;
  in.write = -1;
  out_fd_ = out.read;
  out.read = -1;
  if (!options.combine_stderr) {
    err_fd_ = err.read;
    err.read = -1;
  }
  set_nonblocking(in_fd_);
  set_nonblocking(out_fd_);
  if (err_fd_ >= 0) set_nonblocking(err_fd_);
}

ChildProcess::~ChildProcess() {
  finish();
  close_fds();
}

void ChildProcess::close_fds() {
  close_fd(in_fd_);
  close_fd(out_fd_);
  close_fd(err_fd_);
}

bool ChildProcess::write_stdin(std::string_view data, std::chrono::steady_clock::time_point deadline,
                               const std::function<bool()>& stop) {
  size_t written = 0;
  while (written < data.size()) {
    if (in_fd_ < 0) return false;
    const ssize_t n = ::write(in_fd_, data.data() + written, data.size() - written);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;  // EPIPE: the child is gone
    if ((stop && stop()) || std::chrono::steady_clock::now() >= deadline) return false;
    pollfd pfd{in_fd_, POLLOUT, 0};
    ::poll(&pfd, 1, 50);
    if (pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) return false;
  }
  return true;
}

void ChildProcess::close_stdin() { close_fd(in_fd_); }

bool ChildProcess::read_some(int fd, std::string& out, std::chrono::milliseconds wait) {
  if (fd < 0) return false;
  pollfd pfd{fd, POLLIN, 0};
  const int ready = ::poll(&pfd, 1, static_cast<int>(wait.count()));
  if (ready < 0) return errno == EINTR;
  if (ready == 0) return true;
  char buffer[16384];
  for (int round = 0; round < 64; ++round) {  // bounded: a chatty child cannot keep us here
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      out.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;
}

bool ChildProcess::running() {
  if (reaped_) return false;
  // Seen exited but not reaped yet (WNOWAIT): its process group id cannot have been reused, so
  // what it left running is killed before the reap.
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0) return true;
  finish();
  return false;
}

void ChildProcess::kill_group() {
  if (pid_ <= 0 || reaped_) return;  // once reaped, the id may name someone else's group
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
}

int ChildProcess::finish() {
  if (pid_ <= 0 || reaped_) return exit_status_;
  kill_group();
  int status = 0;
  pid_t r;
  do r = ::waitpid(pid_, &status, 0);
  while (r < 0 && errno == EINTR);
  reaped_ = true;
  exit_status_ = r == pid_ ? wait_status_code(status) : -1;
  return exit_status_;
}

}  // namespace okapi::server
