#include "support/measured_run.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include "support/paths.hpp"

namespace okapi::test {

namespace {

MeasuredRun run_child(const std::vector<std::string>& args) {
  MeasuredRun result;
  const std::string binary = cli_path().string();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int fds[2];
  if (::pipe(fds) != 0) return result;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return result;
  }
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::array<char, 4096> buffer{};
  while (true) {
    const ssize_t n = ::read(fds[0], buffer.data(), buffer.size());
    if (n > 0) {
      result.output.append(buffer.data(), static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  rusage usage{};
  while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.peak_rss_kb = usage.ru_maxrss;
  return result;
}

}  // namespace

int64_t okapi_startup_rss_kb() {
  static const int64_t startup = run_child({"--version"}).peak_rss_kb;
  return startup;
}

MeasuredRun run_okapi_measured(const std::vector<std::string>& args) {
  MeasuredRun result = run_child(args);
  result.work_rss_kb = result.peak_rss_kb - okapi_startup_rss_kb();
  return result;
}

}  // namespace okapi::test
