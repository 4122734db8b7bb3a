// Where tests find their data: the repo's own small files, and ../shared when present.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/shared_dir.hpp"

namespace okapi::test {

inline std::filesystem::path repo_dir() { return OKAPI_REPO_DIR; }
inline std::filesystem::path cli_path() { return OKAPI_CLI_PATH; }
inline bool have_shared() { return std::filesystem::is_directory(okapi::shared_dir() / "golden"); }
// OKAPI_REQUIRE_GOLDEN=1 (CI sets it): data a test needs must be there; missing, the test fails
// instead of skipping, so a broken ../shared cannot turn the golden checks into silent skips.
inline bool golden_required() {
  const char* v = std::getenv("OKAPI_REQUIRE_GOLDEN");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}
// The suite's second run under ASan/UBSan at -O1 (scripts/test_sanitized.sh sets OKAPI_SANITIZED):
// the slowest checks run a representative subset there, the Release run keeps the whole of them.
inline bool sanitized_run() {
  const char* v = std::getenv("OKAPI_SANITIZED");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}
// A fresh empty directory under the system temp dir, removed at process exit is not needed:
// tests clean up what they create.
std::filesystem::path make_temp_dir(const std::string& tag);
// The exact bytes of a file (empty if it cannot be read).
std::string read_file(const std::filesystem::path& path);

}  // namespace okapi::test

// Skips the current test when ../shared (golden data) is absent, as in a user's fresh clone; fails
// it under OKAPI_REQUIRE_GOLDEN.
#define OKAPI_REQUIRE_SHARED() OKAPI_REQUIRE_DATA(::okapi::shared_dir() / "golden")

// The same for one file or directory the test reads.
#define OKAPI_REQUIRE_DATA(needed)                                                                    \
  do {                                                                                                \
    const std::filesystem::path okapi_required_path_{needed};                                         \
    if (!std::filesystem::exists(okapi_required_path_)) {                                             \
      if (::okapi::test::golden_required()) GTEST_FAIL() << "OKAPI_REQUIRE_GOLDEN: absent: " << okapi_required_path_; \
      GTEST_SKIP() << "absent: " << okapi_required_path_;                                            \
    }                                                                                                 \
  } while (0)
