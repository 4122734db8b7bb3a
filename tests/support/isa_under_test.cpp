#include "support/isa_under_test.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/cpu.hpp"

namespace okapi::test {

bool select_isa_under_test() {
  const char* wanted = std::getenv("OKAPI_TEST_ISA");
  if (wanted == nullptr || *wanted == '\0') return false;
  Isa tier = parse_isa(wanted);
  const Isa best = detected_cpu_features().best_isa();
  if (tier > best) {
    std::fprintf(stderr, "note: this CPU has no %s tier; running at %s\n", wanted, std::string(isa_name(best)).c_str());
    tier = best;
  }
  setenv("OKAPI_ISA", std::string(isa_name(tier)).c_str(), 1);
  return true;
}

std::string tier_mismatch() {
  const char* asked = std::getenv("OKAPI_ISA");
  const std::string expected = asked != nullptr && *asked != '\0' ? std::string(asked)
                                                                   : std::string(isa_name(detected_cpu_features().best_isa()));
  const std::string used(isa_name(isa()));
  return used == expected ? "" : "running at " + used + ", expected " + expected;
}

}  // namespace okapi::test
