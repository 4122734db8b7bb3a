// The quantized / rotated KV stores (kv/codec_store.hpp) and the rotation (kv/rotation.hpp):
// the rotation is orthogonal for every width and its inverse undoes it; a rotated f32 store gives
// the scores and value sums of the plain f32 store; the tile methods agree with the per-head ones;
// each type's error stays within what its format allows; bits per value are the formats' true
// sizes; and widths a type cannot serve, unknown names and rotations are clear errors.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "kv/codec_store.hpp"
#include "kv/kv_store.hpp"
#include "kv/lloyd_max.hpp"
#include "kv/rotation.hpp"
#include "support/cache_types.hpp"
#include "support/random_data.hpp"

namespace okapi::kv {
namespace {

using test::gaussian;

double norm(const std::vector<float>& x) {
  double s = 0;
  for (const float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

TEST(HadamardRotation, IsOrthogonalForEveryWidth) {
  for (const int64_t dim : {1, 2, 3, 8, 24, 64, 100, 128, 160}) {
    SCOPED_TRACE(dim);
    const HadamardRotation r(dim, 42);
    const auto x = gaussian(static_cast<size_t>(dim), 3);
    auto y = x;
    r.apply(y.data());
    EXPECT_NEAR(norm(y), norm(x), 1e-5 * norm(x));
    if (dim >= 8) {
      EXPECT_NE(y, x);
    }
    r.inverse(y.data());
    for (int64_t i = 0; i < dim; ++i) EXPECT_NEAR(y[static_cast<size_t>(i)], x[static_cast<size_t>(i)], 1e-5);
  }
}

TEST(HadamardRotation, MixesEveryLane) {
  // A unit vector on any lane spreads over all lanes (no lane stays untouched by both windows).
  for (const int64_t dim : {24, 100}) {
    const HadamardRotation r(dim, 1);
    for (int64_t lane = 0; lane < dim; ++lane) {
      std::vector<float> e(static_cast<size_t>(dim), 0.0f);
      e[static_cast<size_t>(lane)] = 1.0f;
      r.apply(e.data());
      EXPECT_LT(std::fabs(e[static_cast<size_t>(lane)]), 0.9f) << dim << " lane " << lane;
    }
  }
}

struct Filled {
  std::unique_ptr<KvStore> store;
  std::vector<float> k, v;  // [cell][head][dim]
};

Filled filled(const KvShape& s, const char* k_type, const char* v_type, KvRotation rotation, uint32_t seed) {
  Filled f{make_store(s, test::cache_types(k_type, v_type, rotation), isa(), 5), {}, {}};
  f.k = gaussian(static_cast<size_t>(s.n_ctx * s.n_head_kv * s.head_dim_k), seed);
  f.v = gaussian(static_cast<size_t>(s.n_ctx * s.n_head_kv * s.head_dim_v), seed + 1);
  for (int64_t layer = 0; layer < s.n_layer; ++layer) {
    for (int64_t c = 0; c < s.n_ctx; ++c) {
      f.store->append(layer, c, f.k.data() + c * s.n_head_kv * s.head_dim_k, f.v.data() + c * s.n_head_kv * s.head_dim_v);
    }
  }
  return f;
}

// Scores and value sums of every head through the tile methods: several queries with ragged ranges.
struct TileResult {
  std::vector<float> scores, sums;
};
TileResult run_tiles(const KvStore& store, const KvShape& s, int64_t layer, int64_t head,
                     const std::vector<float>& queries, const std::vector<float>& probs) {
  const int n = 3;
  const int64_t begin[n] = {0, 5, 17}, end[n] = {s.n_ctx, 40, 18};
  std::vector<float> prepared(queries.begin(), queries.begin() + n * s.head_dim_k);
  store.prepare_queries(layer, head, prepared.data(), n);
  const float* q[n] = {prepared.data(), prepared.data() + s.head_dim_k, prepared.data() + 2 * s.head_dim_k};
  const tile::Queries qs{q, n, begin, end};
  TileResult r{std::vector<float>(static_cast<size_t>(n * s.n_ctx), 0.0f),
               std::vector<float>(static_cast<size_t>(n * s.head_dim_v), 0.0f)};
  store.tile_scores(layer, head, qs, 0, r.scores.data(), s.n_ctx);
  store.tile_accumulate(layer, head, qs, 0, probs.data(), s.n_ctx, r.sums.data());
  store.finish_values(layer, head, r.sums.data(), n);
  return r;
}

TEST(CodecStore, RotatedF32GivesThePlainScoresAndSums) {
  const KvShape s{2, 2, 100, 72, 48};
  const Filled plain = filled(s, "f32", "f32", KvRotation::None, 1);
  const Filled rotated = filled(s, "f32", "f32", KvRotation::Hadamard, 1);
  EXPECT_EQ(rotated.store->type_name(), "k f32 / v f32 (hadamard)");
  const auto queries = gaussian(static_cast<size_t>(3 * s.head_dim_k), 9);
  auto probs = gaussian(static_cast<size_t>(3 * s.n_ctx), 10);
  for (float& p : probs) p = std::fabs(p) / 40.0f;
  for (int64_t layer = 0; layer < s.n_layer; ++layer) {
    for (int64_t head = 0; head < s.n_head_kv; ++head) {
      const TileResult a = run_tiles(*plain.store, s, layer, head, queries, probs);
      const TileResult b = run_tiles(*rotated.store, s, layer, head, queries, probs);
      for (size_t i = 0; i < a.scores.size(); ++i) EXPECT_NEAR(b.scores[i], a.scores[i], 2e-4) << i;
      for (size_t i = 0; i < a.sums.size(); ++i) EXPECT_NEAR(b.sums[i], a.sums[i], 2e-5) << i;
    }
  }
}

TEST(CodecStore, TileMethodsAgreeWithThePerHeadOnes) {
  const KvShape s{1, 2, 64, 64, 40};
  for (const char* type : {"q8_0", "q4_0", "q5_1", "bf16"}) {
    for (const KvRotation rotation : {KvRotation::None, KvRotation::Hadamard}) {
      SCOPED_TRACE(std::string(type) + (rotation == KvRotation::Hadamard ? "+hadamard" : ""));
      const Filled f = filled(s, type, type, rotation, 3);
      const auto queries = gaussian(static_cast<size_t>(3 * s.head_dim_k), 4);
      const auto probs = gaussian(static_cast<size_t>(3 * s.n_ctx), 5);
      const TileResult t = run_tiles(*f.store, s, 0, 1, queries, probs);
      std::vector<float> scores(static_cast<size_t>(s.n_ctx)), sums(static_cast<size_t>(s.head_dim_v));
      f.store->scores(0, 1, queries.data() + s.head_dim_k, 5, 40, scores.data());
      for (int64_t j = 5; j < 40; ++j) EXPECT_NEAR(t.scores[static_cast<size_t>(s.n_ctx + j)], scores[static_cast<size_t>(j - 5)], 1e-4);
      f.store->accumulate_values(0, 1, probs.data() + s.n_ctx + 5, 5, 40, sums.data());
      for (int64_t d = 0; d < s.head_dim_v; ++d) EXPECT_NEAR(t.sums[static_cast<size_t>(s.head_dim_v + d)], sums[static_cast<size_t>(d)], 1e-4);
    }
  }
}

TEST(CodecStore, ErrorsStayWithinTheFormats) {
  // Relative RMS error of the scores against exact dot products: 8-bit << 5-bit << 4-bit.
  const KvShape s{1, 1, 128, 128, 64};
  const Filled exact = filled(s, "f32", "f32", KvRotation::None, 7);
  const auto queries = gaussian(static_cast<size_t>(3 * s.head_dim_k), 8);
  std::vector<float> probs(static_cast<size_t>(3 * s.n_ctx), 1.0f / 64.0f);
  const TileResult want = run_tiles(*exact.store, s, 0, 0, queries, probs);
  const auto rel_rms = [&](const std::vector<float>& got) {
    double e = 0, n = 0;
    for (int64_t j = 0; j < s.n_ctx; ++j) {
      e += std::pow(got[static_cast<size_t>(j)] - want.scores[static_cast<size_t>(j)], 2);
      n += std::pow(want.scores[static_cast<size_t>(j)], 2);
    }
    return std::sqrt(e / n);
  };
  const double q8 = rel_rms(run_tiles(*filled(s, "q8_0", "q8_0", KvRotation::None, 7).store, s, 0, 0, queries, probs).scores);
  const double q5 = rel_rms(run_tiles(*filled(s, "q5_0", "q5_0", KvRotation::None, 7).store, s, 0, 0, queries, probs).scores);
  const double q4 = rel_rms(run_tiles(*filled(s, "q4_0", "q4_0", KvRotation::None, 7).store, s, 0, 0, queries, probs).scores);
  EXPECT_LT(q8, 0.01);
  EXPECT_LT(q8 * 4, q5);
  EXPECT_LT(q5, q4);
  EXPECT_LT(q4, 0.15);
  EXPECT_GT(q8, 0.0);
}

TEST(CodecStore, BitsPerValueAreTheFormatsSizes) {
  EXPECT_EQ(CacheType::parse("f32").bits_per_value(64), 32.0);
  EXPECT_EQ(CacheType::parse("f16").bits_per_value(64), 16.0);
  EXPECT_EQ(CacheType::parse("bf16").bits_per_value(64), 16.0);
  EXPECT_EQ(CacheType::parse("q8_0").bits_per_value(64), 8.5);
  EXPECT_EQ(CacheType::parse("q5_1").bits_per_value(64), 6.0);
  EXPECT_EQ(CacheType::parse("q5_0").bits_per_value(64), 5.5);
  EXPECT_EQ(CacheType::parse("q4_1").bits_per_value(64), 5.0);
  EXPECT_EQ(CacheType::parse("q4_0").bits_per_value(64), 4.5);
  const KvShape s{2, 3, 64, 32, 10};
  const CacheTypes q4_q8 = test::cache_types("q4_0", "q8_0");
  EXPECT_EQ(q4_q8.bytes(s), static_cast<double>(make_store(s, q4_q8, isa())->bytes()));
  EXPECT_EQ(q4_q8.bytes(s), 2.0 * 3 * 10 * (64 * 4.5 + 32 * 8.5) / 8);
}

TEST(CodecStore, ClearErrors) {
  const KvShape narrow{1, 1, 8, 8, 4};  // stories260K's heads
  try {
    (void)make_store(narrow, test::cache_types("q4_0", "f16"), isa());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'q4_0' for K stores blocks of 32 values; this model's K heads are 8 wide"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)make_store(narrow, test::cache_types("f16", "q8_0"), isa()), Error);
  EXPECT_NO_THROW((void)make_store(narrow, test::cache_types("bf16", "f16", KvRotation::Hadamard), isa(), 1));
  try {
    (void)CacheType::parse("q4_k");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported KV cache type 'q4_k' (supported: f32, f16, bf16, q8_0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)parse_kv_rotation("random"), Error);
}

}  // namespace
}  // namespace okapi::kv

namespace okapi::kv {
namespace {

// The tbq rows (kv/lloyd_max.hpp): a Gaussian row's relative error is the Lloyd-Max quantizer's
// (MSE 0.1175, 0.03454, 0.009497 of the variance at 2, 3, 4 bits; fractional widths in between),
// the SIMD decode equals the scalar one, zero rows stay zero, and sizes include the fp16 scale.
TEST(TbqRows, ErrorIsTheLloydMaxQuantizers) {
  const std::array<std::pair<const char*, double>, 4> expected = {
      {{"tbq2.5", (0.03454 + 0.1175) / 2}, {"tbq3", 0.03454}, {"tbq3.5", (0.009497 + 0.03454) / 2}, {"tbq4", 0.009497}}};
  const int64_t dim = 128;
  for (const auto& [name, mse] : expected) {
    SCOPED_TRACE(name);
    const TbqSpec& spec = *find_tbq(name);
    double err = 0, energy = 0;
    std::vector<uint8_t> row(tbq_row_bytes(spec, dim));
    std::vector<float> back(static_cast<size_t>(dim));
    for (uint32_t seed = 0; seed < 200; ++seed) {
      const auto x = gaussian(static_cast<size_t>(dim), 1000 + seed);
      tbq_encode(spec, x.data(), dim, row.data());
      tbq_decode(spec, row.data(), dim, back.data(), isa());
      for (int64_t c = 0; c < dim; ++c) {
        err += std::pow(back[static_cast<size_t>(c)] - x[static_cast<size_t>(c)], 2);
        energy += std::pow(x[static_cast<size_t>(c)], 2);
      }
    }
    // The least-squares scale does a little better than the fixed-norm quantizer.
    EXPECT_LT(err / energy, mse * 1.02);
    EXPECT_GT(err / energy, mse * 0.8);
  }
}

TEST(TbqRows, SizesAndZeroRows) {
  EXPECT_EQ(tbq_row_bytes(*find_tbq("tbq4"), 64), 2u + 4 * 8);
  EXPECT_EQ(tbq_row_bytes(*find_tbq("tbq3.5"), 64), 2u + 3 * 8 + 4);
  EXPECT_EQ(tbq_row_bytes(*find_tbq("tbq2.5"), 8), 2u + 2 * 1 + 1);
  EXPECT_EQ(CacheType::parse("tbq3.5").bits_per_value(64), 3.75);
  EXPECT_EQ(CacheType::parse("tbq2.5").bits_per_value(32), 3.0);
  EXPECT_EQ(find_tbq("tbq5"), nullptr);
  for (const TbqSpec& spec : tbq_specs()) {
    for (const int64_t dim : {8, 24, 64, 100}) {
      std::vector<float> zero(static_cast<size_t>(dim), 0.0f), back(static_cast<size_t>(dim), 1.0f);
      std::vector<uint8_t> row(tbq_row_bytes(spec, dim));
      tbq_encode(spec, zero.data(), dim, row.data());
      tbq_decode(spec, row.data(), dim, back.data(), isa());
      EXPECT_EQ(back, zero) << spec.name << " " << dim;
    }
  }
}

// Every width decodes through the paths the store may take: odd widths (scalar), multiples of 16
// (8-at-a-time tables), multiples of 32 (AVX-512 where present). All agree with a bit-by-bit decode.
TEST(TbqRows, EveryDecodePathGivesTheSameValues) {
  for (const Isa tier : available_isas()) {
    SCOPED_TRACE(isa_name(tier));
    for (const TbqSpec& spec : tbq_specs()) {
      for (const int64_t dim : {8, 24, 48, 64, 128, 256}) {
        const auto x = gaussian(static_cast<size_t>(dim), 77);
        std::vector<uint8_t> row(tbq_row_bytes(spec, dim));
        tbq_encode(spec, x.data(), dim, row.data());
        std::vector<float> got(static_cast<size_t>(dim));
        tbq_decode(spec, row.data(), dim, got.data(), tier);
        // The multi-row decode gives each row the same values (here: the row, then itself again).
        std::vector<uint8_t> two(row);
        two.insert(two.end(), row.begin(), row.end());
        std::vector<float> both(static_cast<size_t>(2 * dim));
        tbq_decode_rows(spec, two.data(), row.size(), 2, dim, both.data(), tier);
        for (int64_t c = 0; c < dim; ++c) {
          ASSERT_EQ(both[static_cast<size_t>(c)], got[static_cast<size_t>(c)]);
          ASSERT_EQ(both[static_cast<size_t>(dim + c)], got[static_cast<size_t>(c)]);
        }
        uint16_t h;
        std::memcpy(&h, row.data(), sizeof(h));
        const float s = fp16_to_fp32(h);
        const int64_t half = dim / 2;
        for (int64_t c = 0; c < dim; ++c) {
          const int bits = c < half ? spec.bits_hi : spec.bits_lo;
          const uint8_t* plane = row.data() + 2;
          int index = 0;
          for (int k = 0; k < bits; ++k) {
            index |= ((plane[c / 8] >> (c % 8)) & 1) << k;
            plane += ((k < spec.bits_lo ? dim : half) + 7) / 8;
          }
          ASSERT_EQ(got[static_cast<size_t>(c)], s * lloyd_max_levels(bits)[static_cast<size_t>(index)])
              << spec.name << " dim " << dim << " coordinate " << c;
        }
      }
    }
  }
}

TEST(TbqRows, StoresRotateAndServeAnyWidth) {
  const KvShape s{1, 2, 8, 24, 20};  // widths the block formats cannot take
  const Filled f = filled(s, "tbq4", "tbq3", KvRotation::None, 9);
  EXPECT_EQ(f.store->type_name(), "k tbq4 / v tbq3 (hadamard)");
  EXPECT_EQ(test::cache_types("tbq4", "tbq3").bytes(s), static_cast<double>(f.store->bytes()));
}

}  // namespace
}  // namespace okapi::kv
