#include "core/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/error.hpp"

namespace okapi {

TEST(ThreadPool, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 5, 100, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 3; ++rep) {
        pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
          EXPECT_GE(t, 0);
          EXPECT_LT(t, threads);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
      }
      for (auto& h : hits) EXPECT_EQ(h.load(), 3);
    }
  }
}

// Many small back-to-back jobs: the spin/claim hand-off must neither lose nor repeat a chunk.
TEST(ThreadPool, ManySmallJobsBackToBack) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(64);
    std::vector<int> expected(64, 0);
    for (int rep = 0; rep < 20000; ++rep) {
      const int64_t n = 1 + rep % 64;
      for (int64_t i = 0; i < n; ++i) ++expected[static_cast<size_t>(i)];
      pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
    }
    for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), expected[i]) << i;
  }
}

TEST(ThreadPool, RethrowsWorkerErrors) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(10, [](int64_t b, int64_t, int) {
    if (b > 0) throw Error("boom");
  }),
               Error);
  int calls = 0;
  pool.parallel_for(1, [&](int64_t, int64_t, int) { ++calls; });  // still usable
  EXPECT_EQ(calls, 1);
  EXPECT_THROW(ThreadPool(0), Error);
}

}  // namespace okapi
