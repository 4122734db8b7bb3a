// Golden tests that run once per ISA tier. tests/CMakeLists.txt registers extra copies of a test
// binary with OKAPI_TEST_ISA=scalar|avx2; the binary calls select_isa_under_test() during static
// initialization, before any kernel is chosen, and it sets OKAPI_ISA to that tier, or to the best
// tier this CPU has when it lacks the one asked for (said on stderr), so the copies pass anywhere.
#pragma once
#include <string>

namespace okapi::test {

// True when OKAPI_TEST_ISA asked for a tier. Throws okapi::Error for an unknown tier name.
bool select_isa_under_test();
// The tier in use is the one OKAPI_ISA names (set by select_isa_under_test in a per-tier copy), or
// the CPU's best without it: "" when so, else what differs.
std::string tier_mismatch();

}  // namespace okapi::test
