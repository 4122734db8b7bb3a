// The one setting that locates ../shared (models, golden data, vocabularies):
// $OKAPI_SHARED if set, else the path configured at build time (default <repo>/../shared).
#pragma once
#include <cstdlib>
#include <filesystem>

namespace okapi {

inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("OKAPI_SHARED"); env != nullptr && env[0] != '\0') return env;
#ifdef OKAPI_DEFAULT_SHARED_DIR
  return OKAPI_DEFAULT_SHARED_DIR;
#else
  return "../shared";
#endif
}

}  // namespace okapi
