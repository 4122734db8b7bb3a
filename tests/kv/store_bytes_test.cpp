// CacheTypes::bytes / exact_store_bytes (what a store will allocate, computed before allocating) agree
// with KvStore::bytes() of the real stores over random shapes, do not overflow for absurd ones,
// and a store larger than the memory left is refused before it is allocated.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/error.hpp"
#include "kv/exact_store.hpp"
#include "kv/kv_store.hpp"
#include "support/cache_types.hpp"

namespace okapi::kv {
namespace {

KvShape random_shape(std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> small(1, 4), dim(1, 80), ctx(1, 40);
  return {small(rng), small(rng), dim(rng), dim(rng), ctx(rng)};
}

TEST(StoreBytes, MatchTheStoresAllocations) {
  std::mt19937 rng(7);
  for (int i = 0; i < 40; ++i) {
    const KvShape s = random_shape(rng);
    for (const char* k : {"f32", "f16"}) {
      for (const char* v : {"f32", "f16"}) {
        const CacheTypes types = test::cache_types(k, v);
        EXPECT_EQ(types.bytes(s), static_cast<double>(make_store(s, types, isa())->bytes())) << k << "/" << v;
      }
    }
    for (const ExactScores scores : {ExactScores::Direct, ExactScores::Ntt, ExactScores::NttCrt}) {
      EXPECT_EQ(exact_store_bytes(s, scores), static_cast<double>(make_exact_store(s, scores, isa())->bytes()))
          << "head dims " << s.head_dim_k << "/" << s.head_dim_v;
    }
  }
}

TEST(StoreBytes, AbsurdShapesNeitherOverflowNorAllocate) {
  const KvShape huge{1 << 20, 1 << 20, 1 << 20, 1 << 20, int64_t{1} << 40};
  EXPECT_GT(CacheTypes{}.bytes(huge), 1e30);
  EXPECT_GT(exact_store_bytes(huge, ExactScores::Ntt), 1e30);
  try {
    (void)make_store({4, 4, 64, 64, int64_t{1} << 40}, test::cache_types("f16", "f16"), isa());
    FAIL() << "a 2^40-cell cache was allocated";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("needs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("available"), std::string::npos) << msg;
  }
  EXPECT_THROW((void)make_exact_store({1 << 16, 4, 64, 64, int64_t{1} << 22}, ExactScores::Direct, isa()), Error);
}

}  // namespace
}  // namespace okapi::kv
