// Where tests find their data: the repo's own small files, and ../shared when present.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/shared_dir.hpp"

namespace okapi::test {

inline std::filesystem::path repo_dir() { return OKAPI_REPO_DIR; }
inline std::filesystem::path cli_path() { return OKAPI_CLI_PATH; }
inline bool have_shared() { return std::filesystem::is_directory(okapi::shared_dir() / "golden"); }
// A fresh empty directory under the system temp dir, removed at process exit is not needed:
// tests clean up what they create.
std::filesystem::path make_temp_dir(const std::string& tag);
// The exact bytes of a file (empty if it cannot be read).
std::string read_file(const std::filesystem::path& path);

}  // namespace okapi::test

// Skips the current test when ../shared (golden data) is absent, as in a user's fresh clone.
#define OKAPI_REQUIRE_SHARED()                                                        \
  do {                                                                                \
    if (!okapi::test::have_shared()) GTEST_SKIP() << "no shared data at " << okapi::shared_dir(); \
  } while (0)
