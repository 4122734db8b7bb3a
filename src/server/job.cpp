#include "server/job.hpp"

namespace okapi::server {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "stop";
}

bool Job::take_events(std::vector<JobEvent>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (drained_) return false;
  ready_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  while (!events_.empty()) {
    if (events_.front().finish) drained_ = true;
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return true;
}

JobStats Job::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Job::push(JobEvent event) {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return;
    if (event.finish) finished_ = true;
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

void Job::update_stats(const JobStats& stats) {
  std::lock_guard lock(mutex_);
  stats_ = stats;
}

}  // namespace okapi::server
