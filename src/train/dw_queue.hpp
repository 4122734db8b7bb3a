// Runs weight-gradient jobs (dW += dy^T x) in submission order, either inline or on one worker
// thread beside the backward data path (seed 002 overlaps them the same way with a serial GCD
// queue). A job's result does not depend on where it runs, so both modes are bit-identical.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace okapi::train {

class WeightGradientQueue {
 public:
  WeightGradientQueue() = default;
  ~WeightGradientQueue();
  WeightGradientQueue(const WeightGradientQueue&) = delete;
  WeightGradientQueue& operator=(const WeightGradientQueue&) = delete;

  // overlap: jobs run on the worker thread (started on first use); otherwise submit() runs them.
  void set_overlap(bool on) { overlap_ = on; }
  bool overlap() const { return overlap_; }
  // The job gets `true` when it runs on the worker thread (it must not use the caller's pool).
  void submit(std::function<void(bool on_worker)> job);
  // Blocks until every submitted job has finished; rethrows the first job exception.
  void wait();

 private:
  void worker_loop();
  bool overlap_ = false;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable work_ready_, work_done_;
  std::deque<std::function<void(bool)>> jobs_;
  int running_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace okapi::train
