// For tests that a hot path allocates nothing. A test binary that compiles allocation_counter.cpp
// (tests/CMakeLists.txt names them) gets a global operator new/delete of its own that counts heap
// allocations while g_counting is on; other test binaries keep the standard ones.
#pragma once
#include <atomic>

namespace okapi::test {

extern std::atomic<bool> g_counting;   // count allocations now
extern std::atomic<long> g_allocations;  // made while counting

}  // namespace okapi::test
