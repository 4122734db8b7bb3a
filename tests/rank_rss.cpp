// okapi_rank_rss DIR PROGRAM ARGS...: runs PROGRAM as a child (it inherits the environment, so
// under `mpirun -np N okapi_rank_rss DIR okapi ...` each child is the MPI rank), waits for it and
// writes its peak resident memory (wait4's ru_maxrss, KiB) to DIR/rank<R>, R from Open MPI's
// OMPI_COMM_WORLD_RANK (0 without mpirun). Exits with the child's status. What the pipeline test
// bounds each rank's memory with (runtime/pipeline_test.cpp).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: okapi_rank_rss DIR PROGRAM [ARGS...]\n");
    return 2;
  }
  const pid_t pid = ::fork();
  if (pid < 0) return 3;
  if (pid == 0) {
    ::execv(argv[2], argv + 2);
    std::perror("okapi_rank_rss: exec");
    std::_Exit(127);
  }
  int status = 0;
  struct rusage usage {};
  while (::wait4(pid, &status, 0, &usage) < 0) {
    if (errno != EINTR) return 4;
  }
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const std::string path = std::string(argv[1]) + "/rank" + (rank != nullptr ? rank : "0");
  if (std::FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%ld\n", usage.ru_maxrss);
    std::fclose(f);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}
