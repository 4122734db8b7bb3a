// okapi::Error — the one exception type for bad input and failed operations.
// Messages say what went wrong, where (file, field, offset) and the offending value.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace okapi {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A command line that cannot be valid (unknown flag, missing value, value out of range): the CLI
// prints it like any Error but exits with code 2, as usage errors do.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(message) {}
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

}  // namespace okapi
