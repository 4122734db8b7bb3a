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
};

// Runs okapi with `args` (no shell: each element is one argument).
MeasuredRun run_okapi_measured(const std::vector<std::string>& args);

}  // namespace okapi::test
