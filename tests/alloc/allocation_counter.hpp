// For tests that a hot path allocates nothing. A test binary that compiles allocation_counter.cpp
// (tests/CMakeLists.txt names them) gets a global operator new/delete of its own that counts heap
// allocations while g_counting is on; other test binaries keep the standard ones.
#pragma once
#include <atomic>
#include <functional>

#include "core/thread_pool.hpp"

namespace okapi::test {

extern std::atomic<bool> g_counting;   // count allocations now
extern std::atomic<long> g_allocations;  // made while counting

// Runs work() once on each of the pool's worker threads (not the caller's). The kernels keep
// thread_local scratch that grows on a thread's first use, and a worker the OS wakes late runs no
// chunk of the first passes, so one warm-up pass on the pool cannot be relied on to have touched
// every worker's scratch: a test warms them with a pass of its own on each worker.
void run_on_each_worker(ThreadPool& pool, const std::function<void()>& work);

}  // namespace okapi::test
