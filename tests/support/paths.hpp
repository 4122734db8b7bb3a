// Where tests find their data: the repo's own small files, and ../shared when present.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
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
// The suite's second run under ASan/UBSan (scripts/test_sanitized.sh sets OKAPI_SANITIZED):
// the slowest checks run a representative subset there, the Release run keeps the whole of them.
inline bool sanitized_run() {
  const char* v = std::getenv("OKAPI_SANITIZED");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}
// The peers in ../shared/peers (llama.cpp, ik_llama.cpp) are built for AVX-512 with VNNI, BF16 and
// VBMI (../shared/peers/README.md) and die with SIGILL elsewhere. Empty when this CPU runs them;
// else the flags it lacks. Read from /proc/cpuinfo: the peers' build, not okapi's detection, decides.
inline std::string cpu_lacks_for_peers() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(cpuinfo, line))
    if (line.rfind("flags", 0) == 0) {
      flags.append(" ").append(line, line.find(':') + 1).append(" ");
      break;
    }
  if (flags.empty()) return {};  // not Linux: let the peer itself say
  std::string missing;
  for (const char* flag : {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512vbmi"})
    if (flags.find(std::string(" ").append(flag).append(" ")) == std::string::npos)
      missing.append(missing.empty() ? "" : " ").append(flag);
  return missing;
}
// Whether `path` is one of the peers' programs or libraries.
inline bool is_peer_path(const std::filesystem::path& path) {
  return path.generic_string().find("/peers/") != std::string::npos;
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
    if (::okapi::test::is_peer_path(okapi_required_path_)) {                                          \
      /* present but unable to run here: a machine without AVX-512, not missing data */              \
      if (const std::string okapi_lacks_ = ::okapi::test::cpu_lacks_for_peers(); !okapi_lacks_.empty()) \
        GTEST_SKIP() << "the peers are built for AVX-512; this CPU lacks " << okapi_lacks_;           \
    }                                                                                                 \
  } while (0)

// For a test that runs the peers (../shared/peers) through a helper: present, and runnable here.
#define OKAPI_REQUIRE_PEERS() OKAPI_REQUIRE_DATA(::okapi::shared_dir() / "peers" / "llama-quantize")
