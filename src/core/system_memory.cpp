#include "core/system_memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <string_view>

namespace okapi {

namespace {

void lower_to(MemoryBudget& budget, uint64_t bytes, const char* source) {
  if (bytes < budget.bytes) {
    budget.bytes = bytes;
    budget.source = source;
  }
}

// The first unsigned number in a file ("max" and the like read as nothing).
bool read_number(const std::string& path, uint64_t& value) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  try {
    value = std::stoull(text);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::numeric_limits<uint64_t>::max();
}

// cgroup v1 and v2: the limit minus the usage of this process's memory group and of each ancestor
// (a limit may be set anywhere up the tree). v1 reports "no limit" as a huge page-rounded number.
void lower_to_cgroup(MemoryBudget& budget) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // "0::/path" (v2) or "4:memory:/path" (v1).
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string_view controllers = std::string_view(line).substr(first + 1, second - first - 1);
    const bool v2 = controllers.empty();
    if (!v2 && controllers.find("memory") == std::string_view::npos) continue;
    const std::string root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    const std::string limit_file = v2 ? "memory.max" : "memory.limit_in_bytes";
    const std::string usage_file = v2 ? "memory.current" : "memory.usage_in_bytes";
    std::string path = line.substr(second + 1);
    while (true) {
      const std::string dir = root + (path == "/" ? "" : path) + "/";
      uint64_t limit = 0, usage = 0;
      if (read_number(dir + limit_file, limit) && limit < (uint64_t{1} << 62) && read_number(dir + usage_file, usage))
        lower_to(budget, limit > usage ? limit - usage : 0, "cgroup memory limit");
      if (path.empty() || path == "/") break;
      const size_t slash = path.find_last_of('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
}

void lower_to_rlimit(MemoryBudget& budget) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
  // Address space in use now (the mapped model included): /proc/self/statm's first field, pages.
  std::ifstream in("/proc/self/statm");
  uint64_t pages = 0;
  if (!(in >> pages)) return;
  const uint64_t used = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto cap = static_cast<uint64_t>(limit.rlim_cur);
  lower_to(budget, cap > used ? cap - used : 0, "RLIMIT_AS");
}

}  // namespace

MemoryBudget available_memory() {
  MemoryBudget budget;
  lower_to(budget, mem_available(), "MemAvailable");
  lower_to_cgroup(budget);
  lower_to_rlimit(budget);
  return budget;
}

std::string format_bytes(double bytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024.0) return fmt::format("{:.0f} B", bytes);
  double value = bytes / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

void throw_out_of_memory(std::string_view what) {
  const MemoryBudget budget = available_memory();
  if (!budget.known()) throw_error("out of memory while {}", what);
  throw_error("out of memory while {} ({} available, {})", what, format_bytes(static_cast<double>(budget.bytes)),
              budget.source);
}

}  // namespace okapi
