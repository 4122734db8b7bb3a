// Row primitives of the training ops, overloaded for float (AVX2 kernels when the CPU has them)
// and double (plain loops, for the gradient checks). Internal to src/train.
#pragma once
#include <cstdint>

#include "core/thread_pool.hpp"

namespace okapi::train::detail {

// Sum of squares, accumulated in double.
double sum_squares(const float* x, int64_t n);
double sum_squares(const double* x, int64_t n);
// x[i] = exp(x[i] - shift); returns the sum in double.
double exp_shifted(float* x, int64_t n, float shift);
double exp_shifted(double* x, int64_t n, double shift);
// out = silu(gate) * up
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void swiglu(const double* gate, const double* up, int64_t n, double* out);

// Runs fn(begin, end) over [0, n) on the pool (or inline when pool is null or has one thread).
template <typename Fn>
void for_range(ThreadPool* pool, int64_t n, const Fn& fn) {
  if (n <= 0) return;
  if (pool == nullptr || pool->size() == 1 || n == 1) {
    fn(int64_t{0}, n);
    return;
  }
  pool->parallel_for(n, [&](int64_t begin, int64_t end, int) { fn(begin, end); });
}

}  // namespace okapi::train::detail
