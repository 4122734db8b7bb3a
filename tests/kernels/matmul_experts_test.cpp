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
#include "support/random_data.hpp"

namespace okapi::kernels {
namespace {

using test::gaussian;

constexpr int64_t kIn = 512;

// Gate and up stored back to back in one buffer, as in a GGUF file.
struct Pair {
  std::vector<uint8_t> bytes;
  size_t up_offset = 0;
  DType gate_type{}, up_type{};
  int64_t n_out = 0;
  PackedWeight packed_gate, packed_up;  // filled by pack()
  MatmulOutput gate(float* y) const { return {gate_type, bytes.data(), n_out, y, &packed_gate}; }
  MatmulOutput up(float* y) const { return {up_type, bytes.data() + up_offset, n_out, y, &packed_up}; }
  std::vector<float> x;  // this expert's input rows
  int64_t n_tokens = 0;

  void pack() {
    packed_gate = pack_weight(isa(), gate_type, bytes.data(), kIn, n_out, nullptr, false);
    packed_up = pack_weight(isa(), up_type, bytes.data() + up_offset, kIn, n_out, nullptr, false);
  }
};

Pair make_pair(DType gate_type, DType up_type, int64_t n_out, uint32_t seed) {
  Pair p{{}, 0, gate_type, up_type, n_out, {}, {}, {}, 0};
  for (const DType type : {gate_type, up_type}) {
    const auto w = gaussian(static_cast<size_t>(kIn * n_out), seed++);
    const auto q = quant::quantize_tensor(type, w.data(), std::array<int64_t, 2>{kIn, n_out});
    p.up_offset = p.bytes.size();
    p.bytes.insert(p.bytes.end(), q.begin(), q.end());
    p.bytes.resize((p.bytes.size() + 63) / 64 * 64);
  }
  return p;
}

std::vector<float> two_steps(const Pair& p, GluKernel glu, const std::vector<float>& x, int64_t n_tokens,
                             ThreadPool* pool) {
  std::vector<float> gate(static_cast<size_t>(p.n_out * n_tokens)), up(gate.size());
  const MatmulOutput outputs[] = {p.gate(gate.data()), p.up(up.data())};
  matmul_group(isa(), outputs, kIn, x.data(), n_tokens, pool);
  glu(gate.data(), up.data(), static_cast<int64_t>(gate.size()), gate.data());
  return gate;
}

// One expert alone: glu(gate·x, up·x) when glu is set, else gate·x.
std::vector<float> alone(const Pair& p, GluKernel glu, ThreadPool* pool) {
  if (glu != nullptr) return two_steps(p, glu, p.x, p.n_tokens, pool);
  std::vector<float> y(static_cast<size_t>(p.n_out * p.n_tokens));
  const MatmulOutput out = p.gate(y.data());
  matmul(isa(), out.w_type, out.w, kIn, out.n_out, p.x.data(), p.n_tokens, y.data(), pool, out.packed);
  return y;
}

// All experts through matmul_experts; empty vectors when it refused (outputs then untouched).
std::vector<std::vector<float>> together(const std::vector<Pair>& experts, GluKernel glu, ThreadPool* pool) {
  std::vector<std::vector<float>> ys, ups;
  std::vector<ExpertMatmul> jobs;
  for (const Pair& p : experts) {
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
    std::vector<Pair> experts;
    uint32_t seed = 3;
    for (const int64_t n_tokens : {int64_t{1}, int64_t{5}, int64_t{70}, int64_t{2}}) {
      experts.push_back(make_pair(type, type, 192, seed));
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
  std::vector<Pair> experts;
  experts.push_back(make_pair(DType::Q8_0, DType::Q8_0, 192, 1));
  experts.push_back(make_pair(DType::Q4_K, DType::Q4_K, 192, 5));  // Q8_K activations beside Q8_0's
  for (Pair& p : experts) {
    p.pack();
    p.x = gaussian(static_cast<size_t>(kIn * 3), 9);
    p.n_tokens = 3;
  }
  EXPECT_TRUE(together(experts, swiglu, &pool).empty());
  EXPECT_TRUE(together(experts, nullptr, &pool).empty());
}

}  // namespace
}  // namespace okapi::kernels
