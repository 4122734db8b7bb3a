// Stop strings (OpenAI's `stop`, llama.cpp's --reverse-prompt): generated text is held back while
// its end could still be the start of a stop string, so a client never receives text that a stop
// string later turns out to cover. The text before the first stop string is all that is emitted.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace okapi::runtime {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops = {});

  // Appends generated text and returns the part that is now safe to emit. Once a stop string
  // appears, matched() turns true and what is returned ends just before it; later pushes return "".
  std::string push(std::string_view text);
  // At the end of generation: whatever was held back (nothing after a match).
  std::string flush();
  bool matched() const { return matched_; }
  const std::string& matched_stop() const { return matched_stop_; }

 private:
  std::vector<std::string> stops_;  // non-empty strings only
  std::string held_;
  bool matched_ = false;
  std::string matched_stop_;
};

}  // namespace okapi::runtime
