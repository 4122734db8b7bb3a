// kernels::matmul_glu (a gated FFN's gate and up projections with the activation applied in the
// same pass): its output is the bits of matmul_group followed by one glu() over the whole
// buffer, for every format with row-group kernels, 1 or 2 threads, one token or a batch; pairs
// it cannot fuse are refused untouched so the caller runs the two steps.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "core/cpu.hpp"
#include "core/thread_pool.hpp"
#include "kernels/format_table.hpp"
#include "kernels/kernels.hpp"
#include "kernels/weight_packs.hpp"
#include "kernels/glu_pairs.hpp"
#include "support/random_data.hpp"

namespace okapi::kernels {
namespace {

using test::gaussian;
using namespace test_pairs;

// The fused result, or an empty vector when matmul_glu refused the pair.
std::vector<float> fused(const Pair& p, GluKernel glu, const std::vector<float>& x, int64_t n_tokens,
                         ThreadPool* pool) {
  std::vector<float> gate(static_cast<size_t>(p.n_out * n_tokens), -7.0f), up(gate.size(), -7.0f);
  if (!matmul_glu(isa(), p.gate(gate.data()), p.up(up.data()), kIn, x.data(), n_tokens, glu, gate.data(), pool)) {
    EXPECT_EQ(gate, std::vector<float>(gate.size(), -7.0f)) << "a refused pair must be left untouched";
    return {};
  }
  return gate;
}

TEST(MatmulGlu, IsTheBitsOfMatmulGroupThenGlu) {
  ThreadPool pool(2);
  const std::array<GluKernel, 3> glus = {swiglu, relu2_glu, geglu_tanh};
  for (const DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::TQ2_0, DType::TQ1_0,
                           DType::I2_S, DType::F16, DType::F32}) {
    SCOPED_TRACE(dtype_name(type));
    Pair p = make_pair(type, type, 200, 3);  // 200 rows: not a whole number of units
    p.pack();
    for (const int64_t n_tokens : {int64_t{1}, int64_t{5}, int64_t{70}}) {
      SCOPED_TRACE(::testing::Message() << n_tokens << " tokens");
      const auto x = gaussian(static_cast<size_t>(kIn * n_tokens), 11);
      for (size_t g = 0; g < glus.size(); ++g) {
        const auto expected = two_steps(p, glus[g], x, n_tokens, &pool);
        for (ThreadPool* threads : {&pool, static_cast<ThreadPool*>(nullptr)}) {
          const auto got = fused(p, glus[g], x, n_tokens, threads);
          // Every format above has row groups on AVX-512; below it some fall back.
          if (isa() == Isa::avx512) {
            EXPECT_FALSE(got.empty()) << "glu " << g;
          }
          if (!got.empty()) {
            EXPECT_EQ(got, expected) << "glu " << g;
          }
        }
      }
    }
  }
}

TEST(MatmulGlu, RefusesPairsItCannotFuse) {
  ThreadPool pool(2);
  const auto x = gaussian(static_cast<size_t>(kIn * 3), 5);
  {
    const Pair p = make_pair(DType::Q8_0, DType::Q8_0, 200, 1);  // not packed: packed per call
    EXPECT_TRUE(fused(p, relu2_glu, x, 3, &pool).empty());
  }
  {
    Pair p = make_pair(DType::Q4_K, DType::Q8_0, 200, 1);  // Q8_K and Q8_0 activations
    p.pack();
    EXPECT_TRUE(fused(p, relu2_glu, x, 3, &pool).empty());
  }
  {
    Pair p = make_pair(DType::Q8_0, DType::Q8_0, 100, 1);  // 100 rows: not runs of 8
    p.pack();
    EXPECT_TRUE(fused(p, relu2_glu, x, 3, &pool).empty());
  }
}

}  // namespace
}  // namespace okapi::kernels
