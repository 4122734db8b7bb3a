// The tiled attention driver: against a plain double-precision softmax, and bit-identical for a
// token alone or inside a batch and for 1 or 2 threads, over contexts crossing several tiles
// (decode at long context takes the split-K path with 2 threads).
#include "backend/attention_driver.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.hpp"
#include "kv/kv_store.hpp"
#include "support/cache_types.hpp"

namespace okapi::backend {
namespace {

using namespace okapi::model;  // the Ops vocabulary the backends implement

constexpr int64_t kCtx = 700;  // three tiles of 256

struct AttentionCase {
  AttentionConfig c;
  std::unique_ptr<kv::KvStore> store;
  std::vector<float> k, v;  // what was appended, [cell][kv head][dim]
  std::vector<float> sinks;  // per query head (gpt-oss); empty: none
  Isa tier;  // of the store and the softmax
  AttentionCase(const char* type, int64_t window, float softcap, bool with_sinks = false, Isa tier_ = isa())
      : tier(tier_) {
    if (with_sinks) sinks = {2.0f, -3.0f, 9.0f, 0.25f};  // negligible to dominant against scores ~ +-10
    c.sinks = sinks.empty() ? nullptr : sinks.data();
    c.layer = 1;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.head_dim_k = c.head_dim_v = 64;
    c.scale = 0.125f;
    c.sliding_window = window;
    c.softcap = softcap;
    store = kv::make_store({2, 2, 64, 64, kCtx}, test::cache_types(type, type), tier);
    std::mt19937 rng(3);
    std::normal_distribution<float> g(0.0f, 2.0f);
    k.resize(kCtx * 128);
    v.resize(kCtx * 128);
    for (float& x : k) x = g(rng);
    for (float& x : v) x = g(rng);
    for (int64_t layer = 0; layer < 2; ++layer)
      for (int64_t pos = 0; pos < kCtx; ++pos) store->append(layer, pos, &k[pos * 128], &v[pos * 128]);
  }
  AttentionCase(const AttentionCase&) = delete;  // c.sinks points into this case
  AttentionCase& operator=(const AttentionCase&) = delete;
  std::vector<float> queries(size_t n_tokens) const {
    std::mt19937 rng(5);
    std::normal_distribution<float> g(0.0f, 2.0f);
    std::vector<float> q(n_tokens * 4 * 64);
    for (float& x : q) x = g(rng);
    return q;
  }
  std::vector<float> run(const std::vector<float>& q, const std::vector<int32_t>& positions, int threads) const {
    ThreadPool pool(threads);
    std::vector<float> out(positions.size() * 4 * 64);
    tiled_attention(*store, c, q.data(), positions, out.data(), tier, &pool);
    return out;
  }
};

std::vector<int32_t> batch_positions() {
  std::vector<int32_t> p;
  for (int32_t pos = 600; pos < 620; ++pos) p.push_back(pos);  // crosses tiles 0..2
  p.push_back(10);   // a short row in the same batch
  p.push_back(699);  // the last cell
  return p;
}

void check_batch_alone_and_threads(const AttentionCase& s) {
  const auto positions = batch_positions();
  const auto q = s.queries(positions.size());
  const auto batch1 = s.run(q, positions, 1), batch2 = s.run(q, positions, 2);
  ASSERT_EQ(batch1, batch2);
  const size_t row = 4 * 64;
  for (size_t t = 0; t < positions.size(); ++t) {
    const std::vector<float> qt(q.begin() + static_cast<ptrdiff_t>(t * row), q.begin() + static_cast<ptrdiff_t>((t + 1) * row));
    for (int threads : {1, 2}) {
      const auto alone = s.run(qt, {positions[t]}, threads);
      for (size_t i = 0; i < row; ++i) ASSERT_EQ(alone[i], batch1[t * row + i]) << "token " << t << " threads " << threads;
    }
  }
}

TEST(AttentionDriver, TokenAloneEqualsTokenInBatchAnyThreads) {
  for (const char* type : {"f32", "f16"}) {
    SCOPED_TRACE(type);
    check_batch_alone_and_threads(AttentionCase(type, 0, 0.0f));
    check_batch_alone_and_threads(AttentionCase(type, 300, 0.0f));  // sliding window: rows start mid-tile
    check_batch_alone_and_threads(AttentionCase(type, 0, 30.0f));
    check_batch_alone_and_threads(AttentionCase(type, 300, 0.0f, /*with_sinks=*/true));
  }
}

// Every window / sink combination, on every tier that runs here, in a batch (tiles) and token by
// token at long context with 2 threads (decode: split-K).
TEST(AttentionDriver, MatchesPlainSoftmaxAttention) {
  for (const auto& [window, with_sinks] : {std::pair<int64_t, bool>{0, false}, {300, false}, {0, true}, {300, true}})
    for (const Isa tier : available_isas())
      for (const bool one_by_one : {false, true}) {
        SCOPED_TRACE(testing::Message() << "window " << window << " sinks " << with_sinks << " tier " << isa_name(tier)
                                        << (one_by_one ? " token by token" : " batch"));
        const AttentionCase s("f32", window, 0.0f, with_sinks, tier);
        const auto positions = batch_positions();
        const auto q = s.queries(positions.size());
        std::vector<float> out;
        if (one_by_one) {
          const size_t row = 4 * 64;
          for (size_t t = 0; t < positions.size(); ++t) {
            const std::vector<float> qt(q.begin() + static_cast<ptrdiff_t>(t * row), q.begin() + static_cast<ptrdiff_t>((t + 1) * row));
            const auto o = s.run(qt, {positions[t]}, 2);
            out.insert(out.end(), o.begin(), o.end());
          }
        } else {
          out = s.run(q, positions, 2);
        }
        for (size_t t = 0; t < positions.size(); ++t)
          for (int64_t h = 0; h < 4; ++h) {
            const int64_t kvh = h / 2, pos = positions[t];
            const int64_t first = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
            std::vector<double> w;
            double max = -1e300, sum = 0.0;
            for (int64_t j = first; j <= pos; ++j) {
              double dot = 0.0;
              for (int64_t d = 0; d < 64; ++d)
                dot += static_cast<double>(q[(t * 4 + h) * 64 + d]) * s.k[(j * 2 + kvh) * 64 + d];
              w.push_back(dot * 0.125);
              max = std::max(max, w.back());
            }
            // A sink joins the max and the denominator, with no value row.
            if (with_sinks) max = std::max(max, double{s.sinks[static_cast<size_t>(h)]});
            for (double& x : w) sum += (x = std::exp(x - max));
            if (with_sinks) sum += std::exp(s.sinks[static_cast<size_t>(h)] - max);
            for (int64_t d = 0; d < 64; ++d) {
              double expect = 0.0;
              for (int64_t j = first; j <= pos; ++j) expect += w[j - first] / sum * s.v[(j * 2 + kvh) * 64 + d];
              ASSERT_NEAR(out[(t * 4 + h) * 64 + d], expect, 2e-5 * (1.0 + std::fabs(expect))) << t << " " << h << " " << d;
            }
          }
      }
}

}  // namespace
}  // namespace okapi::backend
