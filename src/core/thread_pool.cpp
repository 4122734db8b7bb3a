#include "core/thread_pool.hpp"

#include <exception>

#include "core/error.hpp"

namespace okapi {
namespace {

void chunk_of(int64_t n, int n_threads, int index, int64_t* begin, int64_t* end) {
  const int64_t per = n / n_threads, extra = n % n_threads;
  *begin = index * per + (index < extra ? index : extra);
  *end = *begin + per + (index < extra ? 1 : 0);
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  if (n_threads < 1 || n_threads > 1024) throw_error("thread count {} is out of range (1..1024)", n_threads);
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t, int)>* job = nullptr;
    int64_t n = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
    }
    int64_t begin = 0, end = 0;
    chunk_of(n, n_threads_, index, &begin, &end);
    try {
      if (begin < end) (*job)(begin, end, index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    pending_ = n_threads_ - 1;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  int64_t begin = 0, end = 0;
  chunk_of(n, n_threads_, 0, &begin, &end);
  std::exception_ptr own_error;
  try {
    if (begin < end) fn(begin, end, 0);
  } catch (...) {
    own_error = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (own_error) std::rethrow_exception(own_error);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace okapi
