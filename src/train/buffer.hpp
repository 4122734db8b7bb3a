// Activation buffers of the trainer: std::vector with an allocator that puts large blocks
// (>= 4 MiB) on 2 MiB boundaries and asks for transparent huge pages, so that the GEMM's
// strided reads (dy^T in dW = dy^T x walks a 32 MB logit gradient column-wise) miss the TLB less.
#pragma once
#include <sys/mman.h>

#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

namespace okapi::train {

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHuge = size_t{2} << 20, kThreshold = size_t{4} << 20;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT(google-explicit-constructor)
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kThreshold) return std::allocator<T>().allocate(n);
    const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, rounded);
    if (p == nullptr) throw std::bad_alloc();
    madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure only costs speed
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kThreshold) {
      std::allocator<T>().deallocate(p, n);
    } else {
      std::free(p);
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using Buffer = std::vector<T, HugePageAllocator<T>>;

}  // namespace okapi::train
