#include "support/paths.hpp"

#include <unistd.h>

#include <atomic>
#include <string>

namespace okapi::test {

std::filesystem::path make_temp_dir(const std::string& tag) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() /
             ("okapi-test-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace okapi::test
