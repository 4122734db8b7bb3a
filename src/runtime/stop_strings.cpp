#include "runtime/stop_strings.hpp"

#include <algorithm>

namespace okapi::runtime {

StopStrings::StopStrings(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopStrings::push(std::string_view text) {
  if (matched_) return {};
  held_.append(text);
  // The earliest complete stop string wins (ties: the longest, as it was found first by position).
  size_t first = std::string::npos;
  for (const auto& stop : stops_) {
    const size_t at = held_.find(stop);
    if (at != std::string::npos && (first == std::string::npos || at < first)) {
      first = at;
      matched_stop_ = stop;
    }
  }
  if (first != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, held_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopStrings::flush() {
  if (matched_) return {};
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace okapi::runtime
