// Seed 000's sp layout (kv/sp_codec.hpp): the Möbius order, the sizes the seed states at width 128,
// what the codec keeps and drops (skeleton to fp16, residual within half a step of the 16-level
// grid, the other lanes 0), that sp-full encodes every lane, that the calibrated prediction
// removes what the skeleton explains, and the stores built on it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/half.hpp"
#include "kv/codec_store.hpp"
#include "kv/kv_store.hpp"
#include "kv/sp_codec.hpp"
#include "support/random_data.hpp"
#include "support/cache_types.hpp"

namespace okapi::kv {
namespace {

using test::gaussian;

TEST(SpCodec, MobiusOrderPutsSquarefreeIndicesFirst) {
  const std::vector<int32_t> order = squarefree_first_order(16);
  // 1-based squarefree in 1..16: 1 2 3 5 6 7 10 11 13 14 15; then 4 8 9 12 16.
  const std::vector<int32_t> want = {0, 1, 2, 4, 5, 6, 9, 10, 12, 13, 14, 3, 7, 8, 11, 15};
  EXPECT_EQ(order, want);
  const std::vector<int32_t> wide = squarefree_first_order(128);
  EXPECT_EQ(wide.size(), 128u);
  int64_t squarefree = 0;
  for (int64_t n = 1; n <= 128; ++n) {
    bool sf = true;
    for (int64_t p = 2; p * p <= n; ++p) sf = sf && n % (p * p) != 0;
    squarefree += sf;
  }
  EXPECT_EQ(squarefree, 78);  // 60.9% of 128: the seed's 6/pi^2 = 60.79% split
}

TEST(SpCodec, SizesAreTheSeedsAtWidth128) {
  const SpLayout sp = sp_layout(*find_sp("sp"), 128);
  EXPECT_EQ(sp.skeleton, 14);
  EXPECT_EQ(sp.residual, 60);
  EXPECT_EQ(sp.row_bytes, 28u + 30u + 4u);  // the seed counts 63 (31 residual bytes for 240 bits)
  EXPECT_EQ(CacheType::parse("sp").bits_per_value(128), 62.0 * 8 / 128);
  EXPECT_EQ(sp_metadata_bits(*find_sp("sp"), 128), 60.0 * 14 * 32 + 74 * 16);
  EXPECT_EQ(CacheType::parse("sp").bits_per_value(128, "K", 512), (62.0 * 8 + (60.0 * 14 * 32 + 74 * 16) / 512) / 128);
  const SpLayout full = sp_layout(*find_sp("sp-full"), 128);
  EXPECT_EQ(full.residual, 114);
  EXPECT_EQ(full.row_bytes, 28u + 57u + 4u);
  const SpLayout narrow = sp_layout(*find_sp("sp"), 8);
  EXPECT_EQ(narrow.skeleton, 1);
  EXPECT_EQ(narrow.residual, 4);
  for (const int64_t bad : {0, 4, 24, 80, 2048}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW((void)sp_layout(*find_sp("sp"), bad), Error);
  }
  try {
    (void)make_store({1, 1, 80, 80, 4}, test::cache_types("sp", "f16"), isa());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'sp' (seed 000's VHT2 layout) needs K heads whose width is a power of two"),
              std::string::npos)
        << e.what();
  }
}

// Rows with a few strong lanes, some lanes linear in them plus noise, the rest small noise.
std::vector<float> structured_rows(int64_t n, int64_t dim, uint32_t seed) {
  auto rows = gaussian(static_cast<size_t>(n * dim), seed);
  for (int64_t t = 0; t < n; ++t) {
    float* x = rows.data() + t * dim;
    for (int64_t d = 0; d < dim; ++d) x[d] *= 0.05f;
    for (const int64_t strong : {0, 2, 5}) x[strong] *= 200.0f;  // squarefree lanes 1, 3, 6
    x[3] += 0.7f * x[0] - 0.2f * x[5];                            // lane 4: predictable from them
    x[7] += -0.5f * x[2];
  }
  return rows;
}

TEST(SpCodec, KeepsTheSkeletonPredictsTheResidualAndDropsTheRest) {
  const int64_t dim = 64, n = 256;
  const auto rows = structured_rows(n, dim, 3);
  SpHead head(*find_sp("sp"), dim);
  EXPECT_FALSE(head.calibrated());
  head.calibrate(rows.data(), n);
  ASSERT_TRUE(head.calibrated());
  const auto skeleton = head.skeleton_lanes();
  ASSERT_EQ(skeleton.size(), 7u);
  for (const int32_t strong : {0, 2, 5}) EXPECT_NE(std::find(skeleton.begin(), skeleton.end(), strong), skeleton.end());
  for (const int32_t lane : skeleton) {
    bool sf = true;
    for (int32_t p = 2; p * p <= lane + 1; ++p) sf = sf && (lane + 1) % (p * p) != 0;
    EXPECT_TRUE(sf) << lane;
  }
  const auto residual = head.residual_lanes();
  ASSERT_EQ(residual.size(), 30u);
  // Lanes 4 and 8 are not squarefree (1-based) but carry variance: they join the residual.
  for (const int32_t lane : {3, 7}) EXPECT_NE(std::find(residual.begin(), residual.end(), lane), residual.end());

  std::vector<uint8_t> row(head.layout().row_bytes);
  std::vector<float> back(static_cast<size_t>(dim));
  for (int64_t t = 0; t < 16; ++t) {
    const float* x = rows.data() + t * dim;
    head.encode(x, row.data());
    head.decode(row.data(), back.data());
    float amax;
    std::memcpy(&amax, row.data() + row.size() - 4, 4);
    // The prediction took the 200x lanes' contribution out of lanes 4 and 8: the residual's
    // amax is on the scale of the noise, not of the strong lanes.
    EXPECT_LT(amax, 0.5f) << t;
    for (int64_t d = 0; d < dim; ++d) {
      const bool in_skeleton = std::find(skeleton.begin(), skeleton.end(), d) != skeleton.end();
      const bool in_residual = std::find(residual.begin(), residual.end(), d) != residual.end();
      const float got = back[static_cast<size_t>(d)];
      if (in_skeleton) {
        EXPECT_EQ(got, fp16_to_fp32(fp32_to_fp16(x[d]))) << d;
      } else if (in_residual) {
        EXPECT_LE(std::fabs(got - x[d]), amax / 16.0f * 1.0001f + 1e-6f) << d;
      } else {
        EXPECT_EQ(got, 0.0f) << d;
      }
    }
  }
}

TEST(SpCodec, FullVariantEncodesEveryLane) {
  const int64_t dim = 32, n = 64;
  const auto rows = structured_rows(n, dim, 5);
  SpHead head(*find_sp("sp-full"), dim);
  head.calibrate(rows.data(), n);
  EXPECT_EQ(head.skeleton_lanes().size() + head.residual_lanes().size(), static_cast<size_t>(dim));
  std::vector<uint8_t> row(head.layout().row_bytes);
  std::vector<float> back(static_cast<size_t>(dim));
  const float* x = rows.data() + 7 * dim;
  head.encode(x, row.data());
  head.decode(row.data(), back.data());
  float amax;
  std::memcpy(&amax, row.data() + row.size() - 4, 4);
  for (int64_t d = 0; d < dim; ++d) EXPECT_LE(std::fabs(back[static_cast<size_t>(d)] - x[d]), amax / 16.0f * 1.0001f + 1e-2f) << d;
}

// Relative RMS error of one store's scores on Gaussian rows, K of type `k_type`, V f32.
double score_error(const KvShape& s, const char* k_type) {
  const CacheTypes types = test::cache_types(k_type, "f32");
  auto store = make_store(s, types, isa());
  EXPECT_EQ(store->type_name(), fmt::format("k {} / v f32 (vht2)", k_type));
  EXPECT_NEAR(types.bytes(s), static_cast<double>(store->bytes()), 1.0);  // calibration counted
  const auto k = gaussian(static_cast<size_t>(s.n_ctx * s.n_head_kv * s.head_dim_k), 11);
  const auto v = gaussian(static_cast<size_t>(s.n_ctx * s.n_head_kv * s.head_dim_v), 12);
  std::vector<int32_t> positions(static_cast<size_t>(s.n_ctx));
  for (int32_t i = 0; i < s.n_ctx; ++i) positions[static_cast<size_t>(i)] = i;
  for (int64_t layer = 0; layer < s.n_layer; ++layer) store->append_tokens(layer, positions, k.data(), v.data());
  const auto q = gaussian(static_cast<size_t>(s.head_dim_k), 13);
  std::vector<float> got(static_cast<size_t>(s.n_ctx));
  store->scores(s.n_layer - 1, s.n_head_kv - 1, q.data(), 0, s.n_ctx, got.data());
  double err = 0, ref = 0;
  for (int64_t j = 0; j < s.n_ctx; ++j) {
    double exact = 0;
    for (int64_t d = 0; d < s.head_dim_k; ++d) {
      exact += q[static_cast<size_t>(d)] * k[static_cast<size_t>((j * s.n_head_kv + s.n_head_kv - 1) * s.head_dim_k + d)];
    }
    err += std::pow(got[static_cast<size_t>(j)] - exact, 2);
    ref += exact * exact;
  }
  return std::sqrt(err / ref);
}

TEST(SpCodec, StoresCalibrateOnTheFirstBatchAndScoreTheirRows) {
  const KvShape s{2, 2, 64, 16, 48};
  // sp-full: 7 fp16 lanes and 57 on a 16-level grid (relative RMS about 0.1 on Gaussian rows).
  const double full = score_error(s, "sp-full");
  EXPECT_LT(full, 0.2);
  EXPECT_GT(full, 0.001);
  // sp drops 27 of 64 lanes: Gaussian rows (no lane special) lose about 27/64 of their energy.
  const double dropped = score_error(s, "sp");
  EXPECT_GT(dropped, 0.5);
  EXPECT_LT(dropped, 0.9);
}

}  // namespace
}  // namespace okapi::kv
