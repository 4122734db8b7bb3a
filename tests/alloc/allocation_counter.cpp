// Replaces the global operator new/delete of the test binaries that compile it (see
// allocation_counter.hpp): every replaceable form, so that each allocation is counted and freed
// by the same allocator.
#include "alloc/allocation_counter.hpp"

#include <cstdlib>
#include <new>

namespace okapi::test {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};

void run_on_each_worker(ThreadPool& pool, const std::function<void()>& work) {
  // Every thread claims one chunk and waits in it until all have, so no thread can take two.
  std::atomic<int> arrived{0};
  pool.parallel_for(pool.size(), [&](int64_t, int64_t, int thread) {
    arrived.fetch_add(1);
    while (arrived.load() < pool.size()) {
    }
    if (thread != 0) work();
  });
}
}  // namespace okapi::test

namespace {

void* counted_alloc(std::size_t n) {
  if (okapi::test::g_counting.load(std::memory_order_relaxed))
    okapi::test::g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}

void* counted_aligned_alloc(std::size_t n, std::align_val_t align) {
  if (okapi::test::g_counting.load(std::memory_order_relaxed))
    okapi::test::g_allocations.fetch_add(1, std::memory_order_relaxed);
  const auto a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a + (n == 0 ? a : 0))) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& tag) noexcept { return operator new(n, tag); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_aligned_alloc(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_aligned_alloc(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
