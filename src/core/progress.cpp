#include "core/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <utility>

namespace okapi {

ProgressBar::ProgressBar(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total == 0 ? 1 : total), tty_(::isatty(STDERR_FILENO) != 0) {}

void ProgressBar::update(uint64_t done, const std::string& detail) {
  if (!tty_) return;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * (done > total_ ? total_ : done) / total_);
  std::fprintf(stderr, "\r%s [", label_.c_str());
  for (int i = 0; i < kWidth; ++i) std::fputc(i < filled ? '#' : '.', stderr);
  std::fprintf(stderr, "] %llu/%llu %-40.40s", static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total_), detail.c_str());
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (tty_) std::fputc('\n', stderr);
}

}  // namespace okapi
