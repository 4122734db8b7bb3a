// A fixed pool of worker threads for data-parallel loops. parallel_for splits [0, n) into
// contiguous chunks, one per thread, so which thread computes which element is deterministic;
// reductions must not depend on the thread count (each output is computed by exactly one task).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace okapi {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1; the caller's thread is worker 0
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Calls fn(begin, end, thread_index) on disjoint chunks covering [0, n). Blocks until done.
  // Exceptions thrown by fn are rethrown here (the first one).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker_loop(int index);
  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace okapi
