// kernels::matmul_experts (a MoE layer's experts, each over its own input rows, as one parallel
// loop): with a glu, each expert's output is the bits of matmul_group then glu() of that expert
// alone; without, the bits of matmul(). For the formats with row-group kernels, 1 or 2 threads,
// experts of 1, 5 and 70 tokens side by side; a set it cannot run is refused untouched.
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

// One expert: its gate/up pair and its own input rows.
struct Expert : Pair {
  std::vector<float> x;
  int64_t n_tokens = 0;
};

Expert expert(Pair p) {
  Expert e;
  static_cast<Pair&>(e) = std::move(p);
  return e;
}

// One expert alone: glu(gate·x, up·x) when glu is set, else gate·x.
std::vector<float> alone(const Expert& p, GluKernel glu, ThreadPool* pool) {
  if (glu != nullptr) return two_steps(p, glu, p.x, p.n_tokens, pool);
  std::vector<float> y(static_cast<size_t>(p.n_out * p.n_tokens));
  const MatmulOutput out = p.gate(y.data());
  matmul(isa(), out.w_type, out.w, kIn, out.n_out, p.x.data(), p.n_tokens, y.data(), pool, out.packed);
  return y;
}

// All experts through matmul_experts; empty vectors when it refused (outputs then untouched).
std::vector<std::vector<float>> together(const std::vector<Expert>& experts, GluKernel glu, ThreadPool* pool) {
  std::vector<std::vector<float>> ys, ups;
  std::vector<ExpertMatmul> jobs;
  for (const Expert& p : experts) {
    ys.emplace_back(static_cast<size_t>(p.n_out * p.n_tokens), -7.0f);
    ups.emplace_back(ys.back().size(), -7.0f);
  }
  for (size_t e = 0; e < experts.size(); ++e)
    jobs.push_back({experts[e].gate(ys[e].data()), experts[e].up(ups[e].data()), experts[e].x.data(), experts[e].n_tokens});
  if (!matmul_experts(isa(), jobs, kIn, glu, pool)) {
    for (const auto& y : ys) EXPECT_EQ(y, std::vector<float>(y.size(), -7.0f)) << "a refused set must be left untouched";
    return {};
  }
  return ys;
}

TEST(MatmulExperts, IsTheBitsOfEachExpertAlone) {
  ThreadPool pool(2);
  for (const DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::F16, DType::F32}) {
    SCOPED_TRACE(dtype_name(type));
    std::vector<Expert> experts;
    uint32_t seed = 3;
    for (const int64_t n_tokens : {int64_t{1}, int64_t{5}, int64_t{70}, int64_t{2}}) {
      experts.push_back(expert(make_pair(type, type, 192, seed)));
      seed += 2;
      experts.back().pack();
      experts.back().x = gaussian(static_cast<size_t>(kIn * n_tokens), seed++);
      experts.back().n_tokens = n_tokens;
    }
    for (const GluKernel glu : {swiglu, static_cast<GluKernel>(nullptr)}) {
      for (ThreadPool* threads : {&pool, static_cast<ThreadPool*>(nullptr)}) {
        const auto got = together(experts, glu, threads);
        if (isa() == Isa::avx512) {
          EXPECT_FALSE(got.empty()) << (glu ? "glu" : "plain");
        }
        for (size_t e = 0; e < got.size(); ++e) EXPECT_EQ(got[e], alone(experts[e], glu, &pool)) << "expert " << e;
      }
    }
  }
}

TEST(MatmulExperts, RefusesSetsItCannotRun) {
  ThreadPool pool(2);
  std::vector<Expert> experts;
  experts.push_back(expert(make_pair(DType::Q8_0, DType::Q8_0, 192, 1)));
  experts.push_back(expert(make_pair(DType::Q4_K, DType::Q4_K, 192, 5)));  // Q8_K activations beside Q8_0's
  for (Expert& p : experts) {
    p.pack();
    p.x = gaussian(static_cast<size_t>(kIn * 3), 9);
    p.n_tokens = 3;
  }
  EXPECT_TRUE(together(experts, swiglu, &pool).empty());
  EXPECT_TRUE(together(experts, nullptr, &pool).empty());
}

}  // namespace
}  // namespace okapi::kernels
