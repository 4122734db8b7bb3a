// Runs the okapi binary and reports, besides its exit code and output, the child's peak resident
// memory (wait4's ru_maxrss): what the memory tests bound. RSS rather than an RLIMIT_AS, because
// sanitizer builds reserve terabytes of address space they never touch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace okapi::test {

struct MeasuredRun {
  int exit_code = -1;      // -1 when the process did not exit normally (crash, signal)
  std::string output;      // stdout and stderr interleaved
  int64_t peak_rss_kb = 0;  // the child's maximum resident set size, KiB
  // peak_rss_kb less what `okapi --version` peaks at: the memory the run's work took. The memory
  // tests bound this, since the binary's own pages differ by build (an ASan binary maps
  // ~320 MB of code and data, most of it touched at startup; a Release one ~18 MB).
  int64_t work_rss_kb = 0;
};

// Runs okapi with `args` (no shell: each element is one argument).
MeasuredRun run_okapi_measured(const std::vector<std::string>& args);

// The peak RSS of `okapi --version` (measured once per test process), KiB.
int64_t okapi_startup_rss_kb();

}  // namespace okapi::test
