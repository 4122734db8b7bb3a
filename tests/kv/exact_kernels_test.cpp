// The integer pieces of the exact KV stores: the int16 encoding (rounding, scales, edge cases),
// the NTT-domain dot against the library's dot_from_transforms and a plain int64 reference, and
// the AVX2 kernels against their scalar references, bit for bit.
#include "kv/exact_kernels.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "core/cpu.hpp"
#include "core/error.hpp"
#include "kv/avx2/exact_kernels_avx2.hpp"
#include "kv/exact_ntt_keys.hpp"

namespace okapi::kv {
namespace {

std::vector<std::int16_t> random_ints(std::mt19937_64& rng, size_t n, int bound = kExactIntMax) {
  std::uniform_int_distribution<int> d(-bound, bound);
  std::vector<std::int16_t> v(n);
  for (auto& x : v) x = static_cast<std::int16_t>(d(rng));
  return v;
}

std::int64_t int64_dot(const std::int16_t* a, const std::int16_t* b, std::int64_t n) {
  std::int64_t s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += std::int64_t{a[i]} * std::int64_t{b[i]};
  return s;
}

TEST(ExactEncodingTest, RoundHalfAwayFromZero) {
  EXPECT_EQ(round_half_away_clamped(2.5f), 3);
  EXPECT_EQ(round_half_away_clamped(-2.5f), -3);
  EXPECT_EQ(round_half_away_clamped(0.5f), 1);
  EXPECT_EQ(round_half_away_clamped(-0.5f), -1);
  EXPECT_EQ(round_half_away_clamped(std::nextafter(0.5f, 0.0f)), 0);
  EXPECT_EQ(round_half_away_clamped(1.4999999f), 1);
  EXPECT_EQ(round_half_away_clamped(-0.0f), 0);
  EXPECT_EQ(round_half_away_clamped(32766.5f), 32767);
  EXPECT_EQ(round_half_away_clamped(32767.4f), 32767);
  EXPECT_EQ(round_half_away_clamped(-1e30f), -32767);
  EXPECT_EQ(round_half_away_clamped(std::numeric_limits<float>::infinity()), 32767);
}

TEST(ExactEncodingTest, ScaleAndValues) {
  const std::vector<float> x = {1.0f, -2.0f, 0.25f, 3.0f};
  std::vector<std::int16_t> out(x.size());
  const float s = encode_int16(x.data(), 4, out.data(), "test");
  EXPECT_EQ(s, 3.0f / 32767.0f);
  EXPECT_EQ(out[3], 32767);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(out[i], round_half_away_clamped(x[i] / s));
    EXPECT_NEAR(out[i] * static_cast<double>(s), x[i], 0.5 * s);  // half a step at most
  }
}

TEST(ExactEncodingTest, EdgeCases) {
  std::vector<std::int16_t> out(4, 7);
  // All zeros (also negative zero): scale 1, all codes 0.
  const std::vector<float> zeros = {0.0f, -0.0f, 0.0f, -0.0f};
  EXPECT_EQ(encode_int16(zeros.data(), 4, out.data(), "t"), 1.0f);
  for (auto v : out) EXPECT_EQ(v, 0);
  // One huge value: it maps to 32767, the rest vanish.
  const std::vector<float> huge = {1.0f, -std::numeric_limits<float>::max(), 1e30f, -3.0f};
  const float s = encode_int16(huge.data(), 4, out.data(), "t");
  EXPECT_EQ(s, std::numeric_limits<float>::max() / 32767.0f);
  EXPECT_EQ(out[1], -32767);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[3], 0);
  // Maximum magnitude everywhere.
  const std::vector<float> flat = {5.0f, -5.0f, 5.0f, -5.0f};
  encode_int16(flat.data(), 4, out.data(), "t");
  EXPECT_EQ(out, (std::vector<std::int16_t>{32767, -32767, 32767, -32767}));
  // A denormal whose scale underflows: smallest denormal scale, codes clamped, still deterministic.
  const float tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<float> denormal = {tiny, -tiny, 0.0f, 2 * tiny};
  EXPECT_EQ(encode_int16(denormal.data(), 4, out.data(), "t"), tiny);
  EXPECT_EQ(out, (std::vector<std::int16_t>{1, -1, 0, 2}));
  // Non-finite input is an error naming the element.
  const std::vector<float> bad = {1.0f, std::nanf(""), 0.0f, 0.0f};
  EXPECT_THROW(encode_int16(bad.data(), 4, out.data(), "key"), Error);
  const std::vector<float> inf = {1.0f, 0.0f, -std::numeric_limits<float>::infinity(), 0.0f};
  try {
    encode_int16(inf.data(), 4, out.data(), "key");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key element 2"), std::string::npos) << e.what();
  }
}

// The fast NTT-domain dot equals the library's dot_from_transforms and the int64 dot, including
// the worst cases +-head_dim * 32767^2.
TEST(NttKeysTest, DotIsExact) {
  std::mt19937_64 rng(5);
  for (std::int64_t head_dim : {1, 2, 8, 63, 64, 80, 128, 256, 300, 1024}) {
    const NttKeys keys(head_dim);
    const size_t n = keys.size();
    EXPECT_GE(n, static_cast<size_t>(head_dim));
    EXPECT_GE(n, 2u);
    std::vector<std::uint64_t> q_hat(n), k_hat(n), prepared(n);
    for (int trial = 0; trial < 20; ++trial) {
      auto q = random_ints(rng, static_cast<size_t>(head_dim));
      auto k = random_ints(rng, static_cast<size_t>(head_dim));
      if (trial <= 1) std::fill(q.begin(), q.end(), std::int16_t{32767});
      if (trial <= 1) std::fill(k.begin(), k.end(), static_cast<std::int16_t>(trial == 0 ? 32767 : -32767));
      keys.transform_key(q.data(), q_hat.data());
      keys.transform_key(k.data(), k_hat.data());
      keys.prepare_query(q.data(), prepared.data());
      const std::int64_t expected = int64_dot(q.data(), k.data(), head_dim);
      const std::int64_t got = keys.dot(prepared.data(), k_hat.data());
      ASSERT_EQ(got, expected) << "head_dim " << head_dim << " trial " << trial;
      ASSERT_EQ(keys.ntt().from_residue(keys.ntt().dot_from_transforms(q_hat, k_hat)), expected);
      if (trial == 0) {
        EXPECT_EQ(got, head_dim * 32767 * 32767);
      }
      if (trial == 1) {
        EXPECT_EQ(got, -head_dim * 32767 * 32767);
      }
    }
  }
}

TEST(NttKeysTest, RejectsSizesTheModulusCannotHold) {
  EXPECT_THROW(NttKeys(0), Error);
  EXPECT_THROW(NttKeys((1 << 15) + 1), Error);  // N = 2^16 would need 2^17 | q-1
  EXPECT_NO_THROW(NttKeys(1 << 15));
}

TEST(ExactKernelsTest, ScalarMatchesInt64Reference) {
  std::mt19937_64 rng(11);
  const std::int64_t n = 48, stride = 64, count = 9;
  const auto q = random_ints(rng, static_cast<size_t>(n));
  const auto rows = random_ints(rng, static_cast<size_t>(stride * count));
  std::vector<std::int64_t> dots(static_cast<size_t>(count));
  dots_int16_scalar(q.data(), rows.data(), stride, count, n, dots.data());
  for (std::int64_t j = 0; j < count; ++j)
    EXPECT_EQ(dots[static_cast<size_t>(j)], int64_dot(q.data(), &rows[static_cast<size_t>(j * stride)], n));
  std::vector<std::int64_t> acc(static_cast<size_t>(n), 5);
  weighted_sum_int16_scalar(q.data(), rows.data(), stride, count, n, acc.data());
  for (std::int64_t d = 0; d < n; ++d) {
    std::int64_t expected = 5;
    for (std::int64_t j = 0; j < count; ++j)
      expected += std::int64_t{q[static_cast<size_t>(j)]} * rows[static_cast<size_t>(j * stride + d)];
    EXPECT_EQ(acc[static_cast<size_t>(d)], expected);
  }
}

TEST(ExactKernelsTest, Avx2MatchesScalar) {
  if (!cpu_features().use_avx2()) GTEST_SKIP() << "no AVX2+FMA+F16C (or OKAPI_FORCE_SCALAR)";
  EXPECT_TRUE(use_avx2_kernel(ExactKernel::avx2));
  std::mt19937_64 rng(13);
  for (std::int64_t n : {16, 32, 48, 64, 80, 128, 256}) {
    for (std::int64_t count : {1, 2, 7, 64}) {
      for (int extreme = 0; extreme < 2; ++extreme) {
        const std::int64_t stride = n + 16;
        auto q = random_ints(rng, static_cast<size_t>(std::max(n, count)));
        auto rows = random_ints(rng, static_cast<size_t>(stride * count));
        if (extreme) {  // all +-32767: the largest madd pair sums, of both signs
          for (auto& x : q) x = 32767;
          for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int16_t>(i % 3 == 0 ? 32767 : -32767);
        }
        std::vector<std::int64_t> a(static_cast<size_t>(count)), b(static_cast<size_t>(count));
        dots_int16_scalar(q.data(), rows.data(), stride, count, n, a.data());
        avx2::dots_int16(q.data(), rows.data(), stride, count, n, b.data());
        ASSERT_EQ(a, b) << "dots n " << n << " count " << count;
        std::vector<std::int64_t> acc_a(static_cast<size_t>(n), -3), acc_b(static_cast<size_t>(n), -3);
        weighted_sum_int16_scalar(q.data(), rows.data(), stride, count, n, acc_a.data());
        avx2::weighted_sum_int16(q.data(), rows.data(), stride, count, n, acc_b.data());
        ASSERT_EQ(acc_a, acc_b) << "weighted sum n " << n << " count " << count;
      }
    }
  }
}

// Exact halves (k + 0.5 steps), ties at the clamp, huge / tiny / denormal / signed-zero inputs and
// lengths with a scalar tail: the AVX2 encoder returns the scalar scale and codes.
TEST(ExactEncodingTest, Avx2MatchesScalar) {
  if (!cpu_features().use_avx2()) GTEST_SKIP() << "no AVX2+FMA+F16C (or OKAPI_FORCE_SCALAR)";
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 7), code(-32767, 32767);
  for (int trial = 0; trial < 400; ++trial) {
    const std::int64_t n = 1 + trial % 67;
    std::vector<float> x(static_cast<size_t>(n));
    const float top = std::pow(10.0f, static_cast<float>(trial % 60 - 40));
    for (auto& v : x) {
      switch (kind(rng)) {
        case 0:
          v = (static_cast<float>(code(rng)) + 0.5f) * (top / 32767.0f);
          break;  // near-ties
        case 1:
          v = -0.0f;
          break;
        case 2:
          v = std::numeric_limits<float>::denorm_min() * static_cast<float>(code(rng) % 5);
          break;
        default:
          v = top * normal(rng);
          break;
      }
    }
    if (trial % 5 == 0) x[0] = top;  // the maximum itself
    std::vector<std::int16_t> a(x.size()), b(x.size());
    const float sa = encode_int16(x.data(), n, a.data(), "x", ExactKernel::scalar);
    const float sb = encode_int16(x.data(), n, b.data(), "x", ExactKernel::avx2);
    ASSERT_EQ(std::memcmp(&sa, &sb, sizeof(float)), 0) << "trial " << trial;
    ASSERT_EQ(a, b) << "trial " << trial;
  }
  std::vector<float> bad(20, 1.0f);
  bad[17] = std::numeric_limits<float>::infinity();  // in the scalar tail
  std::vector<std::int16_t> out(bad.size());
  EXPECT_THROW(encode_int16(bad.data(), 20, out.data(), "x", ExactKernel::avx2), Error);
  bad[17] = 1.0f;
  bad[3] = std::nanf("");  // in a vector block
  EXPECT_THROW(encode_int16(bad.data(), 20, out.data(), "x", ExactKernel::avx2), Error);
}

}  // namespace
}  // namespace okapi::kv
