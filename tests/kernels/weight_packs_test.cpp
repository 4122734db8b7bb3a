// kernels::PackedWeight: a weight packed by its owner for the row-group kernels gives the same
// bits as one packed per call; a copy is used only for the weight, tier and shape it was packed
// for; a file mapping whose pages are released as they are packed still gives the same results
// (the pages come back from the file).
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/mapped_file.hpp"
#include "core/thread_pool.hpp"
#include "kernels/format_table.hpp"
#include "kernels/kernels.hpp"
#include "kernels/weight_packs.hpp"
#include "support/paths.hpp"
#include "support/random_data.hpp"

namespace okapi::kernels {
namespace {

using test::gaussian;

constexpr int64_t kIn = 256, kOut = 40;

std::vector<uint8_t> weights(DType type, uint32_t seed) {
  const auto w = gaussian(static_cast<size_t>(kIn * kOut), seed);
  return quant::quantize_tensor(type, w.data(), std::array<int64_t, 2>{kIn, kOut});
}

std::vector<float> run(Isa tier, DType type, const uint8_t* w, const std::vector<float>& x, int64_t n_tokens,
                       const PackedWeight* packed = nullptr) {
  std::vector<float> y(static_cast<size_t>(kOut * n_tokens));
  ThreadPool pool(2);
  matmul(tier, type, w, kIn, kOut, x.data(), n_tokens, y.data(), &pool, packed);
  return y;
}

// (tier, format) pairs whose matmul goes through packed weights.
template <typename Fn>
void for_each_packed_format(Fn fn) {
  for (Isa tier : available_isas()) {
    for (DType type : {DType::Q8_0, DType::Q4_0}) {
      if (quant::format(type, tier).row_groups.rows == 0) continue;
      SCOPED_TRACE(::testing::Message() << isa_name(tier) << " " << dtype_name(type));
      fn(tier, type);
    }
  }
}

TEST(PackedWeight, PackedWeightsGiveTheSameBitsAsPackingPerCall) {
  for_each_packed_format([](Isa tier, DType type) {
    const std::vector<uint8_t> w = weights(type, 1);
    const auto x = gaussian(static_cast<size_t>(kIn * 9), 2);
    const std::vector<float> per_call = run(tier, type, w.data(), x, 9);
    ThreadPool pool(2);
    const PackedWeight packed = pack_weight(tier, type, w.data(), kIn, kOut, &pool, false);
    ASSERT_TRUE(packed);
    EXPECT_TRUE(packed.holds(tier, type, w.data(), kIn, kOut));
    EXPECT_GE(packed.bytes(), w.size());
    EXPECT_EQ(run(tier, type, w.data(), x, 9, &packed), per_call);
    EXPECT_EQ(run(tier, type, w.data(), x, 1, &packed), std::vector<float>(per_call.begin(), per_call.begin() + kOut));
  });
}

TEST(PackedWeight, ACopyServesOnlyTheWeightItWasPackedFrom) {
  for_each_packed_format([](Isa tier, DType type) {
    const std::vector<uint8_t> w = weights(type, 3), other = weights(type, 5);
    const auto x = gaussian(static_cast<size_t>(kIn * 4), 4);
    const PackedWeight packed = pack_weight(tier, type, w.data(), kIn, kOut, nullptr, false);
    EXPECT_FALSE(packed.holds(tier, type, other.data(), kIn, kOut));
    EXPECT_FALSE(packed.holds(tier, type, w.data(), kIn, kOut - 8));
    EXPECT_EQ(run(tier, type, other.data(), x, 4, &packed), run(tier, type, other.data(), x, 4));
  });
}

TEST(PackedWeight, FormatsWithoutRowGroupsPackNothing) {
  EXPECT_FALSE(pack_weight(Isa::scalar, DType::Q8_0, weights(DType::Q8_0, 8).data(), kIn, kOut, nullptr, false));
}

TEST(PackedWeight, ReleasedFilePagesComeBackFromTheFile) {
  for_each_packed_format([](Isa tier, DType type) {
    // A file of a few pages: the tensor starts one page in, so whole pages lie inside it.
    std::vector<uint8_t> bytes(4096, 0);
    const std::vector<uint8_t> w = weights(type, 6);
    bytes.insert(bytes.end(), w.begin(), w.end());
    const auto dir = test::make_temp_dir("weight-packs");
    const auto path = dir / "w.bin";
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    const MappedFile file(path);
    const auto x = gaussian(static_cast<size_t>(kIn * 3), 7);
    const std::vector<float> expected = run(tier, type, w.data(), x, 3);
    {
      avoid_huge_pages(file.bytes());
      const PackedWeight packed = pack_weight(tier, type, file.data() + 4096, kIn, kOut, nullptr, true);
      EXPECT_EQ(run(tier, type, file.data() + 4096, x, 3, &packed), expected);
      EXPECT_EQ(run(tier, type, file.data() + 4096, x, 3, &packed), expected);
    }
    // The original bytes read back intact after their pages were dropped.
    EXPECT_TRUE(std::equal(w.begin(), w.end(), file.data() + 4096));
    EXPECT_EQ(run(tier, type, file.data() + 4096, x, 3), expected);
    std::filesystem::remove_all(dir);
  });
}

}  // namespace
}  // namespace okapi::kernels
