// kernels::WeightPacks: weights registered by their owner are repacked once for the row-group
// kernels and reused; unregistered weights are packed per call; a registration ends with its
// object (no stale copy survives a change of the bytes); a file mapping whose pages are released
// after packing still gives the same results (the pages come back from the file).
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

std::vector<float> run(Isa tier, DType type, const uint8_t* w, const std::vector<float>& x, int64_t n_tokens) {
  std::vector<float> y(static_cast<size_t>(kOut * n_tokens));
  ThreadPool pool(2);
  matmul(tier, type, w, kIn, kOut, x.data(), n_tokens, y.data(), &pool);
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

TEST(WeightPacks, RegisteredWeightsArePackedOnceAndGiveTheSameBits) {
  for_each_packed_format([](Isa tier, DType type) {
    const std::vector<uint8_t> w = weights(type, 1);
    const auto x = gaussian(static_cast<size_t>(kIn * 9), 2);
    const std::vector<float> unregistered = run(tier, type, w.data(), x, 9);
    WeightPacks packs(w, false);
    EXPECT_EQ(packs.packed_tensors(), 0u);
    EXPECT_EQ(run(tier, type, w.data(), x, 9), unregistered);
    EXPECT_EQ(run(tier, type, w.data(), x, 1), std::vector<float>(unregistered.begin(), unregistered.begin() + kOut));
    EXPECT_EQ(packs.packed_tensors(), 1u);
    EXPECT_GE(packs.packed_bytes(), w.size());
  });
}

TEST(WeightPacks, NothingStaleSurvivesTheRegistration) {
  for_each_packed_format([](Isa tier, DType type) {
    std::vector<uint8_t> w = weights(type, 3);
    const auto x = gaussian(static_cast<size_t>(kIn * 4), 4);
    {
      WeightPacks packs(w, false);
      run(tier, type, w.data(), x, 4);
      EXPECT_EQ(packs.packed_tensors(), 1u);
    }
    const std::vector<uint8_t> other = weights(type, 5);
    std::copy(other.begin(), other.end(), w.begin());  // same address, new bytes
    WeightPacks packs(w, false);
    EXPECT_EQ(run(tier, type, w.data(), x, 4), run(tier, type, other.data(), x, 4));
  });
}

TEST(WeightPacks, ReleasedFilePagesComeBackFromTheFile) {
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
      WeightPacks packs(file.bytes(), true);
      EXPECT_EQ(run(tier, type, file.data() + 4096, x, 3), expected);
      EXPECT_EQ(run(tier, type, file.data() + 4096, x, 3), expected);
    }
    // The original bytes read back intact after their pages were dropped.
    EXPECT_TRUE(std::equal(w.begin(), w.end(), file.data() + 4096));
    EXPECT_EQ(run(tier, type, file.data() + 4096, x, 3), expected);
    std::filesystem::remove_all(dir);
  });
}

}  // namespace
}  // namespace okapi::kernels
