// A one-line progress bar on stderr ("[#####.....] 12/48 blk.3.ffn_up.weight").
// Redraws only when stderr is a terminal; otherwise prints nothing until finish().
#pragma once
#include <cstdint>
#include <string>

namespace okapi {

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total);
  void update(uint64_t done, const std::string& detail = {});
  void finish();

 private:
  std::string label_;
  uint64_t total_;
  bool tty_;
  bool finished_ = false;
};

}  // namespace okapi
