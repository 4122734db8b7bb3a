// okapi::Error — the one exception type for bad input and failed operations.
// Messages say what went wrong, where (file, field, offset) and the offending value. The library
// states facts in its own words ("the context holds 256 tokens"); an error caused by a setting the
// caller chose carries that setting as a tag, and the edge that took the setting adds its name: the
// CLI its flag (tools/okapi/cli_app.cpp), the server its flag or request field (server/api_error).
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace okapi {

// The caller's settings that library errors can blame.
enum class Setting {
  None,
  ContextLength,   // cells of the KV cache (the whole context, or one server slot's)
  BatchSize,       // tokens per forward pass
  Threads,
  Slots,           // server slots sharing the context
  CacheTypeK,      // KV cache types and rotation (kv::CacheType)
  CacheTypeV,
  KvRotation,
  ExactAttention,  // exact mode (runtime::ExactOptions)
  ExactRing,
  Frobenius,
  Chunks,          // perplexity / kv-eval chunks
  BenchDepth,      // bench: cells filled before a test
  Repetitions,     // bench: runs of each test
  DraftSkip,       // speculative decoding
  DraftLength,
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, Setting setting = Setting::None)
      : std::runtime_error(message), setting_(setting) {}
  // The setting to change to avoid this error, if one is to blame.
  Setting setting() const noexcept { return setting_; }

 private:
  Setting setting_;
};

// A command line that cannot be valid (unknown flag, missing value, value out of range): the CLI
// prints it like any Error but exits with code 2, as usage errors do.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message, Setting setting = Setting::None) : Error(message, setting) {}
};

// throw_error("tensor '{}': offset {} past end of file ({} bytes)", name, off, size);
template <typename... Args>
[[noreturn]] void throw_error(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void throw_usage_error(fmt::format_string<Args...> format, Args&&... args) {
  throw UsageError(fmt::format(format, std::forward<Args>(args)...));
}

// throw_error_for(Setting::ContextLength, "the prompt has {} tokens but the context holds only {}", n, n_ctx);
template <typename... Args>
[[noreturn]] void throw_error_for(Setting setting, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...), setting);
}

template <typename... Args>
[[noreturn]] void throw_usage_error_for(Setting setting, fmt::format_string<Args...> format, Args&&... args) {
  throw UsageError(fmt::format(format, std::forward<Args>(args)...), setting);
}

}  // namespace okapi
