// A fixed pool of worker threads for data-parallel loops. parallel_for cuts [0, n) into a fixed
// set of contiguous chunks (their bounds depend only on n and the pool size) and the threads
// claim chunks until none are left. Callers must make each element's result independent of
// which thread or chunk computes it (each output is computed by exactly one task), so results
// do not depend on the thread count or on scheduling.
//
// A forward pass issues many small parallel_for calls per layer, so the hand-off is a
// spin-then-sleep barrier on atomics: an idle worker spins briefly on a generation counter (a call
// then costs about a microsecond) and only blocks in the kernel after a quiet spell, so an idle
// pool does not burn a shared core. Claiming chunks (rather than one fixed chunk per thread)
// means a worker that the OS has not scheduled yet never holds up the caller, which matters on a
// busy machine with as many threads as cores.
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
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
  // Calls fn(begin, end, thread_index) on disjoint chunks covering [0, n), thread_index being the
  // thread that runs the chunk (0 = the caller). Blocks until done. Exceptions thrown by fn are
  // rethrown here (the first one). Not reentrant: one caller at a time.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker_loop(int index);
  // Claims and runs chunks of the job of `generation` until none are left.
  void run_chunks(uint32_t generation, int index);
  int n_threads_;
  std::vector<std::thread> workers_;
  // Written by the caller before it bumps generation_ (release); read by workers after a
  // successful claim (acquire), and unchanged until every chunk is done.
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  bool stop_ = false;
  std::atomic<uint32_t> generation_{0};  // bumped per job; what idle workers watch
  // generation << 32 | chunk count << 16 | next chunk to claim: one word, so a claim (a CAS)
  // can only succeed for the job it was meant for.
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint32_t> done_{0};        // chunks finished in the current job
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// Below this much work (float operations, roughly) a loop runs faster on the calling thread than
// handed out to the pool.
inline constexpr int64_t kMinParallelWork = int64_t{1} << 15;

// The parallel-for every backend uses: fn(begin, end) over chunks of [0, n) on `pool`, or one
// call fn(0, n) on the calling thread when there is no pool, one thread, one element, or less
// than `min_work` of `work`. A template so that the caller's lambda is called directly; only the
// hand-off to the pool goes through one std::function (of one reference: no allocation).
template <typename Fn>
void parallel_for(ThreadPool* pool, int64_t n, int64_t work, Fn&& fn, int64_t min_work = kMinParallelWork) {
  if (pool != nullptr && pool->size() > 1 && n > 1 && work >= min_work) {
    pool->parallel_for(n, [&fn](int64_t begin, int64_t end, int) { fn(begin, end); });
  } else if (n > 0) {
    fn(int64_t{0}, n);
  }
}

}  // namespace okapi
