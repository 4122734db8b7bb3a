// The float GEMM (kernels/float_gemm.hpp) on every ISA tier against a double triple loop, for the
// stride forms training uses (x W^T, dy W, dy^T x) at sizes that cross the tile, micro-kernel and
// k-block edges, with and without accumulation; bit-identical results for any pool size; and the
// same bits on every SIMD tier (each element is the same FMA chain whatever the micro-kernel).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cpu.hpp"
#include "core/thread_pool.hpp"
#include "kernels/float_gemm.hpp"

namespace okapi::test {
namespace {

using okapi::kernels::gemm;
using okapi::kernels::StridedMatrix;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Form {
  const char* name;
  bool a_transposed, b_transposed;
};

void check_form(Isa tier, const Form& form, int64_t m, int64_t n, int64_t k, bool accumulate, ThreadPool* pool) {
  // Storage: A is m x k (or k x m when transposed), B is k x n (or n x k).
  const std::vector<float> a = random_floats(static_cast<size_t>(m * k), 1), b = random_floats(static_cast<size_t>(k * n), 2);
  const StridedMatrix<float> av = form.a_transposed ? StridedMatrix<float>{a.data(), 1, m}
                                                    : StridedMatrix<float>{a.data(), k, 1};
  const StridedMatrix<float> bv = form.b_transposed ? StridedMatrix<float>{b.data(), 1, k}
                                                    : StridedMatrix<float>{b.data(), n, 1};
  const int64_t ldc = n + 3;  // C rows padded: the routine must honour ldc
  std::vector<float> c = random_floats(static_cast<size_t>(m * ldc), 3);
  const std::vector<float> c0 = c;
  gemm(tier, m, n, k, av, bv, c.data(), ldc, accumulate, pool);
  double worst = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = accumulate ? static_cast<double>(c0[i * ldc + j]) : 0.0;
      double mag = std::fabs(ref);
      for (int64_t p = 0; p < k; ++p) {
        const double prod = static_cast<double>(av.data[i * av.row_stride + p * av.col_stride]) *
                            static_cast<double>(bv.data[p * bv.row_stride + j * bv.col_stride]);
        ref += prod;
        mag += std::fabs(prod);
      }
      worst = std::max(worst, std::fabs(static_cast<double>(c[i * ldc + j]) - ref) / mag);
    }
    for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]) << "wrote past n";
  }
  // float sums of k products: relative to sum |products|, within a few k * 2^-24
  EXPECT_LE(worst, 4e-7 * std::sqrt(static_cast<double>(k)) + 1e-6)
      << isa_name(tier) << " " << form.name << " " << m << "x" << n << "x" << k << (accumulate ? " accumulate" : "");
}

const Form kForms[] = {{"x W^T", false, true}, {"dy W", false, false}, {"dy^T x", true, false}, {"A^T B^T", true, true}};

TEST(FloatGemm, MatchesDoubleReference) {
  ThreadPool pool(2);
  for (Isa tier : available_isas()) {
    for (const Form& form : kForms) {
      for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 5, 3}, {97, 193, 300},
                                    {200, 40, 513}, {6, 16, 256}, {8, 32, 256}, {13, 400, 17}}) {
        check_form(tier, form, m, n, k, false, &pool);
        check_form(tier, form, m, n, k, true, nullptr);
      }
    }
  }
}

TEST(FloatGemm, ZeroDepthClearsOrKeeps) {
  std::vector<float> c = {1, 2, 3, 4};
  const float dummy = 0;
  gemm<float>(2, 2, 0, {&dummy, 0, 0}, {&dummy, 0, 0}, c.data(), 2, true, nullptr);
  EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 4}));
  gemm<float>(2, 2, 0, {&dummy, 0, 0}, {&dummy, 0, 0}, c.data(), 2, false, nullptr);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

TEST(FloatGemm, BitIdenticalForAnyPoolSize) {
  const int64_t m = 250, n = 530, k = 600;
  const std::vector<float> a = random_floats(static_cast<size_t>(m * k), 4), b = random_floats(static_cast<size_t>(k * n), 5);
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> c = random_floats(static_cast<size_t>(m * n), 6);
    gemm<float>(m, n, k, {a.data(), k, 1}, {b.data(), 1, k}, c.data(), n, true, &pool);
    if (first.empty()) {
      first = c;
    } else {
      EXPECT_EQ(c, first) << threads << " threads";
    }
  }
  std::vector<float> serial = random_floats(static_cast<size_t>(m * n), 6);
  gemm<float>(m, n, k, {a.data(), k, 1}, {b.data(), 1, k}, serial.data(), n, true, nullptr);
  EXPECT_EQ(serial, first) << "no pool";
}

// The trainer's losses do not depend on which SIMD tier the CPU has.
TEST(FloatGemm, SimdTiersGiveTheSameBits) {
  const int64_t m = 101, n = 203, k = 700;
  const std::vector<float> a = random_floats(static_cast<size_t>(m * k), 7), b = random_floats(static_cast<size_t>(k * n), 8);
  std::vector<float> first;
  for (Isa tier : available_isas()) {
    if (tier == Isa::scalar) continue;
    for (const Form& form : kForms) {
      SCOPED_TRACE(::testing::Message() << isa_name(tier) << " " << form.name);
      const StridedMatrix<float> av = form.a_transposed ? StridedMatrix<float>{a.data(), 1, m}
                                                        : StridedMatrix<float>{a.data(), k, 1};
      const StridedMatrix<float> bv = form.b_transposed ? StridedMatrix<float>{b.data(), 1, k}
                                                        : StridedMatrix<float>{b.data(), n, 1};
      std::vector<float> c = random_floats(static_cast<size_t>(m * n), 9);
      gemm(tier, m, n, k, av, bv, c.data(), n, true, nullptr);
      if (first.size() < static_cast<size_t>(4 * m * n)) {
        first.insert(first.end(), c.begin(), c.end());
      } else {
        const size_t at = static_cast<size_t>(&form - kForms) * static_cast<size_t>(m * n);
        ASSERT_TRUE(std::equal(c.begin(), c.end(), first.begin() + static_cast<std::ptrdiff_t>(at)));
      }
    }
  }
}

}  // namespace
}  // namespace okapi::test
