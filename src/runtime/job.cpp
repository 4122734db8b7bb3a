#include "runtime/job.hpp"

namespace okapi::runtime {

bool Job::take_events(std::vector<SequenceEvent>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (drained_) return false;
  ready_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  while (!events_.empty()) {
    if (events_.front().stop) drained_ = true;
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return true;
}

GenerationStats Job::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Job::push(std::vector<SequenceEvent>& events, const GenerationStats& stats) {
  {
    std::lock_guard lock(mutex_);
    stats_ = stats;
    for (auto& event : events) {
      if (finished_) break;
      if (event.stop) finished_ = true;
      events_.push_back(std::move(event));
    }
  }
  events.clear();
  ready_.notify_all();
}

}  // namespace okapi::runtime
