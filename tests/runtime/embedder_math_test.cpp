// normalize_embedding and cosine_similarity against values worked out by hand (llama.cpp's
// common_embd_normalize / common_embd_similarity_cos).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "runtime/embedder.hpp"

namespace okapi::runtime {
namespace {

std::vector<float> normalized(std::vector<float> v, int mode) {
  normalize_embedding(v, mode);
  return v;
}

TEST(EmbedderMath, EuclideanIsTheDefaultAndGivesUnitLength) {
  EXPECT_EQ(kNormalizeEuclidean, 2);
  const std::vector<float> v = normalized({3.0f, -4.0f}, kNormalizeEuclidean);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], -0.8f);
}

TEST(EmbedderMath, NoneLeavesValuesAsTheyAre) {
  EXPECT_EQ(normalized({3.5f, -4.25f, 0.0f}, kNormalizeNone), (std::vector<float>{3.5f, -4.25f, 0.0f}));
}

TEST(EmbedderMath, MaxAbsoluteScalesToTheInt16Range) {
  // The largest magnitude becomes 32760.
  const std::vector<float> v = normalized({1.0f, -2.0f, 0.5f}, 0);
  EXPECT_FLOAT_EQ(v[0], 16380.0f);
  EXPECT_FLOAT_EQ(v[1], -32760.0f);
  EXPECT_FLOAT_EQ(v[2], 8190.0f);
}

TEST(EmbedderMath, TaxicabAndPNorms) {
  const std::vector<float> taxicab = normalized({1.0f, -3.0f}, 1);
  EXPECT_FLOAT_EQ(taxicab[0], 0.25f);
  EXPECT_FLOAT_EQ(taxicab[1], -0.75f);
  // p = 3: (1 + 1)^(1/3) = 1.259921...
  const std::vector<float> p3 = normalized({1.0f, -1.0f}, 3);
  EXPECT_NEAR(p3[0], 0.7937005259840998, 1e-7);
  EXPECT_NEAR(p3[1], -0.7937005259840998, 1e-7);
}

TEST(EmbedderMath, AZeroVectorStaysZero) {
  for (const int mode : {0, 1, 2, 3})
    EXPECT_EQ(normalized({0.0f, 0.0f, 0.0f}, mode), (std::vector<float>{0.0f, 0.0f, 0.0f})) << mode;
}

TEST(EmbedderMath, ABadModeIsAnError) { EXPECT_THROW(normalized({1.0f}, -2), Error); }

TEST(EmbedderMath, CosineSimilarity) {
  const std::vector<float> x{1.0f, 0.0f}, y{0.0f, 1.0f}, xy{1.0f, 1.0f};
  EXPECT_FLOAT_EQ(cosine_similarity(x, y), 0.0f);
  EXPECT_FLOAT_EQ(cosine_similarity(x, x), 1.0f);
  EXPECT_NEAR(cosine_similarity(x, xy), 1.0 / std::sqrt(2.0), 1e-7);
  const std::vector<float> a{1.0f, 2.0f, -3.0f}, b{-2.0f, -4.0f, 6.0f};
  EXPECT_FLOAT_EQ(cosine_similarity(a, b), -1.0f);
  // 1*4 + 2*5 + 3*6 = 32 over sqrt(14 * 77)
  const std::vector<float> c{1.0f, 2.0f, 3.0f}, d{4.0f, 5.0f, 6.0f};
  EXPECT_NEAR(cosine_similarity(c, d), 32.0 / std::sqrt(14.0 * 77.0), 1e-7);
}

TEST(EmbedderMath, CosineOfZeroVectorsAsLlamaCpp) {
  const std::vector<float> zero{0.0f, 0.0f}, x{1.0f, 0.0f};
  EXPECT_EQ(cosine_similarity(zero, x), 0.0f);
  EXPECT_EQ(cosine_similarity(x, zero), 0.0f);
  EXPECT_EQ(cosine_similarity(zero, zero), 1.0f);
}

TEST(EmbedderMath, CosineOfDifferentLengthsIsAnError) {
  const std::vector<float> a{1.0f, 2.0f}, b{1.0f};
  EXPECT_THROW(cosine_similarity(a, b), Error);
}

}  // namespace
}  // namespace okapi::runtime
