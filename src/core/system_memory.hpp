// How much more memory this process can use, read before large allocations so that a request
// that cannot fit is refused with a clear message instead of ending in std::bad_alloc or the OOM
// killer. Linux only; anything unreadable is treated as no limit.
#pragma once
#include <cstdint>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.hpp"

namespace okapi {

struct MemoryBudget {
  uint64_t bytes = std::numeric_limits<uint64_t>::max();  // max(): no limit found
  std::string source;  // which limit is the smallest: "MemAvailable", "cgroup memory limit", "RLIMIT_AS"
  bool known() const { return bytes != std::numeric_limits<uint64_t>::max(); }
};

// The smallest of /proc/meminfo's MemAvailable, the memory cgroup's limit minus its usage (v1 or
// v2, this process's group and its ancestors) and RLIMIT_AS minus the address space already in use.
MemoryBudget available_memory();

// "37.2 GiB", "512.0 MiB", "3.5 KiB", "100 B" (binary units, one decimal).
std::string format_bytes(double bytes);

// Runs f(). An allocation that no estimate foresaw throws std::bad_alloc: it becomes an
// okapi::Error "out of memory while <what> (... available)" instead of an internal error.
[[noreturn]] void throw_out_of_memory(std::string_view what);
template <typename F>
decltype(auto) out_of_memory_as_error(std::string_view what, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const std::bad_alloc&) {
    throw_out_of_memory(what);
  }
}

}  // namespace okapi
