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

  void pack() {
    packed_gate = pack_weight(isa(), gate_type, bytes.data(), kIn, n_out, nullptr, false);
    packed_up = pack_weight(isa(), up_type, bytes.data() + up_offset, kIn, n_out, nullptr, false);
  }
};

Pair make_pair(DType gate_type, DType up_type, int64_t n_out, uint32_t seed) {
  Pair p{{}, 0, gate_type, up_type, n_out, {}, {}};
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
