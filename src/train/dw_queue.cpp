#include "train/dw_queue.hpp"

namespace okapi::train {

WeightGradientQueue::~WeightGradientQueue() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_ready_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void WeightGradientQueue::submit(std::function<void(bool)> job) {
  if (!overlap_) {
    job(false);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
    jobs_.push_back(std::move(job));
  }
  work_ready_.notify_one();
}

void WeightGradientQueue::wait() {
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [&] { return jobs_.empty() && running_ == 0; });
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void WeightGradientQueue::worker_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stop requested and nothing left
    std::function<void(bool)> job = std::move(jobs_.front());
    jobs_.pop_front();
    ++running_;
    lock.unlock();
    try {
      job(true);
    } catch (...) {
      std::lock_guard error_lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    lock.lock();
    --running_;
    if (jobs_.empty() && running_ == 0) work_done_.notify_all();
  }
}

}  // namespace okapi::train
