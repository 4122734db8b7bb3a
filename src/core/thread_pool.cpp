#include "core/thread_pool.hpp"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/error.hpp"

namespace okapi {
namespace {

// Pause-spins before blocking: some tens of µs, longer than the serial gaps between the parallel
// loops of one forward pass, far shorter than a scheduler time slice.
constexpr int kSpinIterations = 2000;
// Chunks per thread: a few, so a thread that starts late or is preempted leaves work to others.
// At most 1024 threads x 4 chunks: the chunk count and index each fit the 16 bits of claim_.
constexpr int64_t kChunksPerThread = 4;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins while value == old; false if it still is after kSpinIterations.
bool spin_while_equal(const std::atomic<uint32_t>& value, uint32_t old) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (value.load(std::memory_order_acquire) != old) return true;
    cpu_relax();
  }
  return false;
}

void chunk_of(int64_t n, int64_t n_chunks, int64_t index, int64_t* begin, int64_t* end) {
  const int64_t per = n / n_chunks, extra = n % n_chunks;
  *begin = index * per + std::min(index, extra);
  *end = *begin + per + (index < extra ? 1 : 0);
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  if (n_threads < 1 || n_threads > 1024) throw_error("thread count {} is out of range (1..1024)", n_threads);
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(uint32_t generation, int index) {
  uint64_t state = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(state >> 32) != generation) return;  // a later job: not ours
    const auto n_chunks = static_cast<uint32_t>((state >> 16) & 0xffff), chunk = static_cast<uint32_t>(state & 0xffff);
    if (chunk >= n_chunks) return;
    if (!claim_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;
    // The claim succeeded, so this job is still running and job_ / job_n_ are its own.
    int64_t begin = 0, end = 0;
    chunk_of(job_n_, n_chunks, chunk, &begin, &end);
    try {
      (*job_)(begin, end, index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_chunks) done_.notify_one();
    state = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;
  for (;;) {
    if (!spin_while_equal(generation_, seen)) generation_.wait(seen, std::memory_order_acquire);
    const uint32_t now = generation_.load(std::memory_order_acquire);
    if (now == seen) continue;  // spurious wake-up
    seen = now;
    if (stop_) return;
    run_chunks(seen, index);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n, 0);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  const auto n_chunks = static_cast<uint32_t>(std::min<int64_t>(n, n_threads_ * kChunksPerThread));
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  claim_.store(uint64_t{generation} << 32 | uint64_t{n_chunks} << 16, std::memory_order_release);
  generation_.store(generation, std::memory_order_release);
  generation_.notify_all();
  run_chunks(generation, 0);
  // Wait for chunks other threads are still running: spin first, then block.
  for (;;) {
    const uint32_t finished = done_.load(std::memory_order_acquire);
    if (finished == n_chunks) break;
    if (!spin_while_equal(done_, finished)) done_.wait(finished, std::memory_order_acquire);
  }
  job_ = nullptr;
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

}  // namespace okapi
