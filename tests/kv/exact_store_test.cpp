// The exact KV stores: Ntt and Direct agree bit for bit, scores and values follow the header's
// formulas exactly (recomputed here from the encoding and plain int64 sums), stay close to the
// float results, and positions / truncation are checked.
#include "kv/exact_store.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.hpp"
#include "core/error.hpp"
#include "kv/exact_kernels.hpp"

namespace okapi::kv {
namespace {

struct Filled {
  KvShape shape;
  std::vector<float> k, v;  // [cell][head][dim]
};

// Gaussian data with a per-token magnitude spread (1e-3 .. 1e3) so scales differ between cells.
Filled random_cache(const KvShape& shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-3.0f, 3.0f);
  Filled f{shape, {}, {}};
  const int64_t kn = shape.n_ctx * shape.n_head_kv * shape.head_dim_k,
                vn = shape.n_ctx * shape.n_head_kv * shape.head_dim_v;
  f.k.resize(static_cast<size_t>(kn));
  f.v.resize(static_cast<size_t>(vn));
  float mag = 1.0f;
  for (int64_t i = 0; i < kn; ++i) {
    if (i % shape.head_dim_k == 0) mag = std::pow(10.0f, exponent(rng));
    f.k[static_cast<size_t>(i)] = mag * normal(rng);
  }
  for (int64_t i = 0; i < vn; ++i) {
    if (i % shape.head_dim_v == 0) mag = std::pow(10.0f, exponent(rng));
    f.v[static_cast<size_t>(i)] = mag * normal(rng);
  }
  return f;
}

void fill(KvStore& store, const Filled& f, int64_t layer) {
  for (int64_t c = 0; c < f.shape.n_ctx; ++c)
    store.append(layer, c, &f.k[static_cast<size_t>(c * f.shape.n_head_kv * f.shape.head_dim_k)],
                 &f.v[static_cast<size_t>(c * f.shape.n_head_kv * f.shape.head_dim_v)]);
}

std::vector<float> random_floats(std::mt19937_64& rng, int64_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  return x;
}

// Softmax-like weights over count cells (positive, summing to ~1, a few dominant).
std::vector<float> random_probs(std::mt19937_64& rng, int64_t count) {
  std::vector<float> p = random_floats(rng, count, 2.0f);
  float sum = 0.0f;
  for (auto& x : p) sum += (x = std::exp(x));
  for (auto& x : p) x /= sum;
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Case {
  int64_t head_dim, n_head_kv, n_ctx;
};

TEST(ExactStoreTest, NttAndDirectAreBitIdenticalAndExact) {
  const Case cases[] = {{8, 1, 64}, {64, 2, 300}, {80, 4, 100}, {128, 2, 2048}, {256, 1, 600}, {5, 3, 40}};
  std::mt19937_64 rng(7);
  for (const Case& c : cases) {
    const KvShape shape{2, c.n_head_kv, c.head_dim, c.head_dim, c.n_ctx};
    const Filled f = random_cache(shape, static_cast<std::uint64_t>(c.head_dim * 31 + c.n_ctx));
    auto ntt = make_exact_store(shape, ExactScores::Ntt, isa());
    auto crt = make_exact_store(shape, ExactScores::NttCrt, isa());
    auto direct = make_exact_store(shape, ExactScores::Direct, isa());
    fill(*ntt, f, 1);
    fill(*crt, f, 1);
    fill(*direct, f, 1);
    for (int64_t h = 0; h < c.n_head_kv; ++h) {
      const std::vector<float> q = random_floats(rng, c.head_dim, 3.0f);
      const int64_t first = c.n_ctx / 5, last = c.n_ctx;
      std::vector<float> s_ntt(static_cast<size_t>(last - first)), s_direct(s_ntt.size()), s_crt(s_ntt.size());
      ntt->scores(1, h, q.data(), first, last, s_ntt.data());
      crt->scores(1, h, q.data(), first, last, s_crt.data());
      direct->scores(1, h, q.data(), first, last, s_direct.data());
      ASSERT_TRUE(same_bits(s_ntt, s_direct)) << "head_dim " << c.head_dim << " head " << h;
      ASSERT_TRUE(same_bits(s_crt, s_direct)) << "ntt-crt head_dim " << c.head_dim << " head " << h;

      // The header's formula, recomputed: encode, int64 dot, one rescale.
      std::vector<std::int16_t> q_int(static_cast<size_t>(c.head_dim)), k_int(q_int.size());
      const float s_q = encode_int16(q.data(), c.head_dim, q_int.data(), "q");
      double q_norm = 0.0;
      for (float x : q) q_norm += double{x} * x;
      for (int64_t j = first; j < last; ++j) {
        const float* k = &f.k[static_cast<size_t>((j * c.n_head_kv + h) * c.head_dim)];
        const float s_k = encode_int16(k, c.head_dim, k_int.data(), "k");
        std::int64_t dot = 0;
        double float_dot = 0.0, k_norm = 0.0;
        for (int64_t i = 0; i < c.head_dim; ++i) {
          dot += std::int64_t{q_int[static_cast<size_t>(i)]} * k_int[static_cast<size_t>(i)];
          float_dot += double{q[static_cast<size_t>(i)]} * k[i];
          k_norm += double{k[i]} * k[i];
        }
        const float expected = static_cast<float>(static_cast<double>(dot) * (double{s_q} * double{s_k}));
        const float got = s_ntt[static_cast<size_t>(j - first)];
        ASSERT_EQ(std::memcmp(&got, &expected, sizeof(float)), 0) << "cell " << j;
        // Each code is off by at most half a step (max|x| / 65534), so |error| <= sqrt(d) |q| |k| / 32767.
        const double qk = std::sqrt(q_norm * k_norm);
        ASSERT_LE(std::abs(got - float_dot), std::sqrt(double(c.head_dim)) * qk / 32767.0 + 1e-6 * std::abs(float_dot));
        ASSERT_LE(std::abs(got - float_dot), 1e-4 * qk) << "random data is far inside the worst case";
      }

      // Values: identical in both modes, equal to the formula, close to the float weighted sum.
      const std::vector<float> p = random_probs(rng, last - first);
      std::vector<float> v_ntt(static_cast<size_t>(c.head_dim)), v_direct(v_ntt.size());
      ntt->accumulate_values(1, h, p.data(), first, last, v_ntt.data());
      direct->accumulate_values(1, h, p.data(), first, last, v_direct.data());
      ASSERT_TRUE(same_bits(v_ntt, v_direct));
      std::vector<float> weighted(p.size());
      std::vector<std::vector<std::int16_t>> v_int(p.size(),
                                                   std::vector<std::int16_t>(static_cast<size_t>(c.head_dim)));
      double v_max = 0.0, v_abs_max = 0.0;
      for (int64_t j = first; j < last; ++j) {
        const float* v = &f.v[static_cast<size_t>((j * c.n_head_kv + h) * c.head_dim)];
        const size_t r = static_cast<size_t>(j - first);
        weighted[r] = p[r] * encode_int16(v, c.head_dim, v_int[r].data(), "v");
        for (int64_t i = 0; i < c.head_dim; ++i) {
          v_max = std::max(v_max, double{std::abs(v[i])} * p[r]);
          v_abs_max = std::max(v_abs_max, double{std::abs(v[i])});
        }
      }
      std::vector<std::int16_t> p_int(p.size());
      const float s_p = encode_int16(weighted.data(), last - first, p_int.data(), "p");
      for (int64_t d = 0; d < c.head_dim; ++d) {
        std::int64_t sum = 0;
        double float_sum = 0.0;
        for (size_t r = 0; r < p.size(); ++r) {
          sum += std::int64_t{p_int[r]} * v_int[r][static_cast<size_t>(d)];
          float_sum += double{p[r]} *
                       f.v[static_cast<size_t>(((first + static_cast<int64_t>(r)) * c.n_head_kv + h) * c.head_dim + d)];
        }
        const float expected = static_cast<float>(static_cast<double>(sum) * double{s_p});
        ASSERT_EQ(std::memcmp(&v_ntt[static_cast<size_t>(d)], &expected, sizeof(float)), 0) << "dim " << d;
        // p' codes are off by <= s_p / 2 each (times |v_int| <= 32767), v codes by <= max|v_j| / 65534.
        const double bound = double(p.size()) * s_p / 2 * 32767.0 + v_max * double(p.size()) / 65534.0;
        ASSERT_LE(std::abs(v_ntt[static_cast<size_t>(d)] - float_sum), bound * 1.001);
        ASSERT_LE(std::abs(v_ntt[static_cast<size_t>(d)] - float_sum), 1e-4 * v_abs_max) << "typical data";
      }
    }
  }
}

TEST(ExactStoreTest, Avx2AndScalarKernelsAreBitIdentical) {
  if (!cpu_features().use_avx2()) GTEST_SKIP() << "no AVX2+FMA+F16C (or OKAPI_FORCE_SCALAR)";
  std::mt19937_64 rng(9);
  for (int64_t head_dim : {8, 64, 80, 128}) {
    const KvShape shape{1, 2, head_dim, head_dim, 257};
    const Filled f = random_cache(shape, static_cast<std::uint64_t>(head_dim));
    auto scalar = make_exact_store(shape, ExactScores::Direct, ExactKernel::scalar);
    auto simd = make_exact_store(shape, ExactScores::Direct, ExactKernel::avx2);
    fill(*scalar, f, 0);
    fill(*simd, f, 0);
    for (int64_t h = 0; h < 2; ++h) {
      const auto q = random_floats(rng, head_dim, 1.0f);
      const auto p = random_probs(rng, 257);
      std::vector<float> a(257), b(257), va(static_cast<size_t>(head_dim)), vb(va.size());
      scalar->scores(0, h, q.data(), 0, 257, a.data());
      simd->scores(0, h, q.data(), 0, 257, b.data());
      EXPECT_TRUE(same_bits(a, b));
      scalar->accumulate_values(0, h, p.data(), 0, 257, va.data());
      simd->accumulate_values(0, h, p.data(), 0, 257, vb.data());
      EXPECT_TRUE(same_bits(va, vb));
    }
  }
}

TEST(ExactStoreTest, NamesSizesAndKinds) {
  const KvShape shape{3, 2, 80, 64, 10};
  auto ntt = make_exact_store(shape, ExactScores::Ntt, isa());
  auto direct = make_exact_store(shape, ExactScores::Direct, isa());
  EXPECT_EQ(ntt->type_name(), "exact-ntt");
  EXPECT_EQ(direct->type_name(), "exact-direct");
  EXPECT_TRUE(is_exact_store(*ntt));
  EXPECT_TRUE(is_exact_store(*direct));
  EXPECT_FALSE(is_exact_store(*make_f32_store(shape, isa())));
  const size_t rows = 3 * 2 * 10;
  // N = 128 residues per key row; rows padded to 16 int16; two float scales per row.
  EXPECT_EQ(ntt->bytes(), rows * (128 * 8 + 64 * 2 + 8));
  EXPECT_EQ(direct->bytes(), rows * (80 * 2 + 64 * 2 + 8));
  EXPECT_THROW(make_exact_store(KvShape{1, 1, 0, 8, 8}, ExactScores::Direct, isa()), Error);
  EXPECT_THROW(make_exact_store(KvShape{1, 1, 8, 8, 0}, ExactScores::Ntt, isa()), Error);
  EXPECT_THROW(make_exact_store(KvShape{1, 1, 40000, 8, 8}, ExactScores::Ntt, isa()), Error);  // N > 2^15
  EXPECT_THROW(make_exact_store(KvShape{1, 1, 8, 8, (1 << 23) + 1}, ExactScores::Direct, isa()), Error);
}

TEST(ExactStoreTest, ZeroAndExtremeVectors) {
  const KvShape shape{1, 1, 4, 4, 4};
  for (ExactScores mode : {ExactScores::Ntt, ExactScores::Direct}) {
    auto store = make_exact_store(shape, mode, isa());
    const float zero[4] = {0.0f, -0.0f, 0.0f, 0.0f};
    const float big[4] = {3e38f, -3e38f, 1.0f, 0.0f};
    const float unit[4] = {1.0f, 0.0f, 0.0f, 0.0f};
    store->append(0, 0, zero, zero);
    store->append(0, 1, big, big);
    store->append(0, 2, unit, unit);
    float s[3];
    store->scores(0, 0, unit, 0, 3, s);
    EXPECT_EQ(s[0], 0.0f);
    EXPECT_FALSE(std::signbit(s[0]));
    EXPECT_EQ(s[1], static_cast<float>(32767.0 * 32767.0 * (double{1.0f / 32767.0f} * double{3e38f / 32767.0f})));
    EXPECT_EQ(s[2], static_cast<float>(32767.0 * 32767.0 * (double{1.0f / 32767.0f} * double{1.0f / 32767.0f})));
    store->scores(0, 0, zero, 0, 3, s);  // a zero query scores 0 everywhere
    for (float x : s) EXPECT_EQ(x, 0.0f);
    float out[4];
    const float probs[3] = {0.25f, 0.0f, 0.75f};
    store->accumulate_values(0, 0, probs, 0, 3, out);
    EXPECT_NEAR(out[0], 0.75f, 0.75f / 32767.0f);
    EXPECT_EQ(out[1], 0.0f);
    const float nan_q[4] = {0.0f, std::nanf(""), 0.0f, 0.0f};
    EXPECT_THROW(store->scores(0, 0, nan_q, 0, 3, s), Error);
    EXPECT_THROW(store->append(0, 3, nan_q, unit), Error);
  }
}

TEST(ExactStoreTest, PositionsAndTruncate) {
  const KvShape shape{2, 1, 8, 8, 6};
  const Filled f = random_cache(shape, 3);
  for (ExactScores mode : {ExactScores::Ntt, ExactScores::Direct}) {
    auto store = make_exact_store(shape, mode, isa());
    const float* k = f.k.data();
    EXPECT_THROW(store->append(0, 6, k, k), Error);
    EXPECT_THROW(store->append(0, -1, k, k), Error);
    EXPECT_THROW(store->append(2, 0, k, k), Error);
    fill(*store, f, 0);
    fill(*store, f, 1);
    float s[6], out[8];
    EXPECT_THROW(store->scores(0, 1, k, 0, 6, s), Error);  // kv head out of range
    EXPECT_THROW(store->scores(0, 0, k, 3, 2, s), Error);
    EXPECT_THROW(store->scores(0, 0, k, 0, 7, s), Error);
    std::vector<float> before(6), after(6);
    store->scores(0, 0, k, 0, 6, before.data());
    store->truncate(4);
    EXPECT_THROW(store->scores(0, 0, k, 0, 5, s), Error);  // cell 4 is gone
    EXPECT_THROW(store->accumulate_values(1, 0, f.v.data(), 0, 5, out), Error);
    EXPECT_THROW(store->truncate(-1), Error);
    EXPECT_THROW(store->truncate(7), Error);
    store->scores(0, 0, k, 0, 4, after.data());
    EXPECT_EQ(std::memcmp(before.data(), after.data(), 4 * sizeof(float)), 0);
    // Re-appending restores exactly the same cache.
    for (int64_t c = 4; c < 6; ++c)
      store->append(0, c, &f.k[static_cast<size_t>(c * 8)], &f.v[static_cast<size_t>(c * 8)]);
    store->scores(0, 0, k, 0, 6, after.data());
    EXPECT_TRUE(same_bits(before, after));
    store->truncate(0);
    EXPECT_THROW(store->scores(0, 0, k, 0, 1, s), Error);
    store->scores(0, 0, k, 0, 0, s);  // an empty range is fine
  }
}

}  // namespace
}  // namespace okapi::kv
