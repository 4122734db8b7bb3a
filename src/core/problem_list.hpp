// Problems found while checking an input, reported together in one error. Only the first few are
// kept as text (a hostile file can produce millions), the rest are only counted, so both memory
// and the printed message stay bounded: "a; b; c; ... and 1234 more".
#pragma once
#include <fmt/format.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace okapi {

class ProblemList {
 public:
  static constexpr size_t kDefaultShown = 10;
  explicit ProblemList(size_t max_shown = kDefaultShown) : max_shown_(max_shown) {}

  void add(std::string problem);
  template <typename... Args>
    requires(sizeof...(Args) > 0)
  void add(fmt::format_string<Args...> format, Args&&... args) {
    // Formatting is skipped once the kept list is full: only the count grows.
    if (shown_.size() < max_shown_) {
      add(fmt::format(format, std::forward<Args>(args)...));
    } else {
      ++count_;
    }
  }

  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  const std::vector<std::string>& shown() const { return shown_; }
  // The kept problems joined with "; ", then "; ... and N more" when some were only counted.
  std::string summary() const;

 private:
  size_t max_shown_;
  size_t count_ = 0;
  std::vector<std::string> shown_;
};

}  // namespace okapi
