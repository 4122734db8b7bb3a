// kernels::matmul_group (Q/K/V, gate/up: one input, several weights): every output is the same
// bits as matmul() of that weight alone, whether the group is run as one loop (weights packed by
// pack_weight, one activation layout), or falls back to one matmul per weight (weights packed per
// call, or formats with different activation layouts); a batched token equals it alone.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/format_table.hpp"
#include "kernels/kernels.hpp"
#include "kernels/weight_packs.hpp"
#include "support/random_data.hpp"

namespace okapi::kernels {
namespace {

using test::gaussian;

constexpr int64_t kIn = 512;
constexpr std::array<int64_t, 3> kOut = {72, 40, 24};  // Q, K, V widths: not whole unit multiples

// Three weights of the given formats stored back to back in one buffer (as in a GGUF file).
struct Group {
  std::vector<uint8_t> bytes;
  std::array<size_t, 3> offset{};
  std::array<DType, 3> type{};
  std::array<PackedWeight, 3> packed;  // filled by pack()

  void pack() {
    for (size_t i = 0; i < 3; ++i) packed[i] = pack_weight(isa(), type[i], bytes.data() + offset[i], kIn, kOut[i], nullptr, false);
  }
};

Group make_group(std::array<DType, 3> types, uint32_t seed) {
  Group g;
  g.type = types;
  for (size_t i = 0; i < 3; ++i) {
    const auto w = gaussian(static_cast<size_t>(kIn * kOut[i]), seed + static_cast<uint32_t>(i));
    const auto q = quant::quantize_tensor(types[i], w.data(), std::array<int64_t, 2>{kIn, kOut[i]});
    g.offset[i] = g.bytes.size();
    g.bytes.insert(g.bytes.end(), q.begin(), q.end());
    g.bytes.resize((g.bytes.size() + 63) / 64 * 64);  // GGUF-style alignment between tensors
  }
  return g;
}

std::array<std::vector<float>, 3> one_by_one(const Group& g, const std::vector<float>& x, int64_t n_tokens,
                                             ThreadPool* pool) {
  std::array<std::vector<float>, 3> y;
  for (size_t i = 0; i < 3; ++i) {
    y[i].resize(static_cast<size_t>(kOut[i] * n_tokens));
    matmul(isa(), g.type[i], g.bytes.data() + g.offset[i], kIn, kOut[i], x.data(), n_tokens, y[i].data(), pool);
  }
  return y;
}

std::array<std::vector<float>, 3> grouped(const Group& g, const std::vector<float>& x, int64_t n_tokens,
                                          ThreadPool* pool) {
  std::array<std::vector<float>, 3> y;
  std::array<MatmulOutput, 3> outputs;
  for (size_t i = 0; i < 3; ++i) {
    y[i].assign(static_cast<size_t>(kOut[i] * n_tokens), -1.0f);
    outputs[i] = {g.type[i], g.bytes.data() + g.offset[i], kOut[i], y[i].data(), &g.packed[i]};
  }
  matmul_group(isa(), outputs, kIn, x.data(), n_tokens, pool);
  return y;
}

const std::array<std::array<DType, 3>, 5> kGroups = {{
    {DType::Q8_0, DType::Q8_0, DType::Q8_0},
    {DType::Q4_0, DType::Q4_0, DType::Q4_0},
    {DType::Q4_K, DType::Q4_K, DType::Q6_K},  // Q4_K_M's attn_v is Q6_K: one Q8_K layout
    {DType::Q4_0, DType::Q8_0, DType::Q4_0},
    {DType::Q4_K, DType::Q8_0, DType::Q5_K},  // different activation layouts: one by one
}};

TEST(MatmulGroup, EveryOutputIsTheSameBitsAsItsOwnMatmul) {
  ThreadPool pool(2);
  for (const auto& types : kGroups) {
    SCOPED_TRACE(::testing::Message() << dtype_name(types[0]) << "/" << dtype_name(types[1]) << "/"
                                      << dtype_name(types[2]));
    Group g = make_group(types, 7);
    for (const int64_t n_tokens : {int64_t{1}, int64_t{9}, int64_t{70}}) {
      SCOPED_TRACE(::testing::Message() << n_tokens << " tokens");
      const auto x = gaussian(static_cast<size_t>(kIn * n_tokens), 11);
      const auto expected = one_by_one(g, x, n_tokens, &pool);
      EXPECT_EQ(grouped(g, x, n_tokens, &pool), expected) << "packed per call";
      g.pack();
      EXPECT_EQ(grouped(g, x, n_tokens, &pool), expected) << "packed, 2 threads";
      EXPECT_EQ(grouped(g, x, n_tokens, nullptr), expected) << "packed, 1 thread";
      g.packed = {};
    }
  }
}

TEST(MatmulGroup, ABatchedTokenEqualsItAlone) {
  ThreadPool pool(2);
  for (const auto& types : kGroups) {
    Group g = make_group(types, 3);
    g.pack();
    const int64_t n_tokens = 67;
    const auto x = gaussian(static_cast<size_t>(kIn * n_tokens), 5);
    const auto batch = grouped(g, x, n_tokens, &pool);
    for (const int64_t t : {int64_t{0}, int64_t{33}, int64_t{66}}) {
      const std::vector<float> token(x.begin() + t * kIn, x.begin() + (t + 1) * kIn);
      const auto alone = grouped(g, token, 1, &pool);
      for (size_t i = 0; i < 3; ++i) {
        const std::vector<float> row(batch[i].begin() + t * kOut[i], batch[i].begin() + (t + 1) * kOut[i]);
        EXPECT_EQ(row, alone[i]) << dtype_name(types[i]) << " token " << t;
      }
    }
  }
}

}  // namespace
}  // namespace okapi::kernels
