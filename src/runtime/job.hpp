// A sequence submitted to the Scheduler, as its caller holds it: the request, and the channel its
// events come back through (a caller's thread waits for them while the scheduler's runs the
// passes; one job per `okapi run`, chat turn or HTTP request).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "runtime/generation.hpp"

namespace okapi::runtime {

class Job {
 public:
  explicit Job(SequenceRequest request) : request_(std::move(request)) {}
  const SequenceRequest& request() const { return request_; }

  // Moves the events produced so far into `out`, waiting up to `timeout` for one. False once the
  // last event (the one with the stop) has been taken.
  bool take_events(std::vector<SequenceEvent>& out, std::chrono::milliseconds timeout);
  // Asks the scheduler to stop this job (Ctrl-C, client gone); it ends at the scheduler's next
  // step with StopReason::Interrupted.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  GenerationStats stats() const;

  // Scheduler side: events (nothing after the one with the stop) and the stats so far.
  void push(std::vector<SequenceEvent>& events, const GenerationStats& stats);

 private:
  SequenceRequest request_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<SequenceEvent> events_;
  bool finished_ = false;  // the last event was pushed
  bool drained_ = false;   // ... and taken
  GenerationStats stats_;
};

}  // namespace okapi::runtime
