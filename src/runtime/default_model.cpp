#include "runtime/default_model.hpp"

#include <cstdlib>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.hpp"

namespace okapi::runtime {

namespace fs = std::filesystem;

fs::path default_model_path() {
  if (const char* env = std::getenv("OKAPI_MODEL"); env != nullptr && *env != '\0') {
    if (!fs::is_regular_file(env)) throw_error("OKAPI_MODEL={} is not a file", env);
    return env;
  }
  std::vector<fs::path> tried;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // The executable sits in a build folder of the repository (or an install prefix's bin/).
    for (fs::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
      for (const char* rel : {"models/stories260K.gguf", "share/okapi/stories260K.gguf"}) {
        const fs::path candidate = dir / rel;
        tried.push_back(candidate);
        if (fs::is_regular_file(candidate)) return candidate;
      }
      if (dir == dir.parent_path()) break;
    }
  }
  std::string where;
  for (const auto& path : tried) where += "\n  " + path.string();
  throw_error("no model given and the default model stories260K.gguf was not found; looked in:{}", where);
}

}  // namespace okapi::runtime
