// Exact-mode attention (ExactOps over the exact KV stores): close to float attention, the same bits
// through the NTT and the direct integer paths and for any thread count, the refusal of float
// stores, and the per-layer KL(float attention || exact attention) on stories260K.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "kv/exact_store.hpp"
#include "kv/kv_store.hpp"
#include "backend/cpu_ops.hpp"
#include "model/evaluate.hpp"
#include "backend/exact_ops.hpp"
#include "model/model.hpp"
#include "support/paths.hpp"
#include "support/random_data.hpp"
#include "support/cache_types.hpp"

namespace okapi::backend {
namespace {

using namespace okapi::model;  // the Ops vocabulary the backends implement

using test::gaussian;

struct AttentionCase {
  int64_t n_tokens = 20, n_head = 4, n_head_kv = 2, head_dim = 32;
  int64_t sliding_window = 0;
  float softcap = 0.0f;
  std::vector<float> sinks;  // empty: none
};

// Runs one batch of attention through `ops` over `kv` (filled through ops.store_kv).
std::vector<float> run_attention(Ops& ops, kv::KvStore& kv, const AttentionCase& c) {
  const auto q = gaussian(static_cast<size_t>(c.n_tokens * c.n_head * c.head_dim), 1, 2.0f);
  const auto k = gaussian(static_cast<size_t>(c.n_tokens * c.n_head_kv * c.head_dim), 2, 2.0f);
  const auto v = gaussian(static_cast<size_t>(c.n_tokens * c.n_head_kv * c.head_dim), 3);
  std::vector<int32_t> positions(static_cast<size_t>(c.n_tokens));
  for (int32_t i = 0; i < c.n_tokens; ++i) positions[static_cast<size_t>(i)] = i;
  ops.store_kv(kv, 0, k.data(), v.data(), positions);
  AttentionConfig att;
  att.n_head = c.n_head;
  att.n_head_kv = c.n_head_kv;
  att.head_dim_k = att.head_dim_v = c.head_dim;
  att.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  att.sliding_window = c.sliding_window;
  att.softcap = c.softcap;
  att.sinks = c.sinks.empty() ? nullptr : c.sinks.data();
  std::vector<float> out(static_cast<size_t>(c.n_tokens * c.n_head * c.head_dim));
  ops.attention(kv, att, q.data(), positions, out.data());
  return out;
}

kv::KvShape shape_of(const AttentionCase& c) { return {1, c.n_head_kv, c.head_dim, c.head_dim, 64}; }

TEST(ExactAttention, CloseToFloatAndIdenticalThroughNttAndDirect) {
  std::vector<AttentionCase> cases(4);
  cases[1].sliding_window = 5;
  cases[2].softcap = 2.0f;
  cases[3].sinks = {3.0f, -1.0f, 0.5f, 8.0f};  // gpt-oss's sinks: from negligible to dominant
  for (const AttentionCase& c : cases) {
    CpuOps cpu;
    const auto float_store = kv::make_f32_store(shape_of(c), isa());
    const auto want = run_attention(cpu, *float_store, c);
    std::vector<float> first;
    for (const kv::ExactScores scores : {kv::ExactScores::Ntt, kv::ExactScores::Direct}) {
      for (const int threads : {1, 2, 4}) {
        ThreadPool pool(threads);
        ExactOps ops(&pool);
        const auto store = kv::make_exact_store(shape_of(c), scores, isa());
        const auto got = run_attention(ops, *store, c);
        if (first.empty()) first = got;
        EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)), 0)
            << "scores " << static_cast<int>(scores) << " threads " << threads;
      }
    }
    // int16 K, V and q (relative step 2^-15 of each row's max) against float: outputs of size ~1.
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double{first[i]} - want[i]));
    EXPECT_LE(worst, 2e-3) << "window " << c.sliding_window << " softcap " << c.softcap;
  }
}

TEST(ExactAttention, RefusesAFloatStore) {
  const AttentionCase c;
  ExactOps ops;
  for (const char* type : {"f32", "f16"}) {
    const auto store = kv::make_store(shape_of(c), test::cache_types(type, type), isa());
    try {
      run_attention(ops, *store, c);
      FAIL() << "no error for " << type;
    } catch (const okapi::Error& e) {
      EXPECT_NE(std::string(e.what()).find("exact"), std::string::npos) << e.what();
    }
  }
}

// Ops that run exact mode and, at each attention call, also compare the attention probabilities of
// the same q over the same keys: float (f32 shadow store, float softmax as CpuOps) against exact
// (exact store scores: the int16 q and K of the NTT / direct path). Accumulates KL(float || exact)
// per layer. The probe assumes no softcap / sliding window (stories260K has neither).
class KlProbe : public ExactOps {
 public:
  KlProbe(const kv::KvShape& shape, int64_t n_layer) : shadow_(kv::make_f32_store(shape, isa())), kl_(n_layer), rows_(n_layer) {}
  void store_kv(kv::KvStore& kv, int64_t layer, const float* k, const float* v,
                std::span<const int32_t> positions) override {
    ExactOps::store_kv(kv, layer, k, v, positions);
    CpuOps().store_kv(*shadow_, layer, k, v, positions);
  }
  void attention(const kv::KvStore& kv, const AttentionConfig& c, const float* q, std::span<const int32_t> positions,
                 float* out) override {
    for (size_t t = 0; t < positions.size(); ++t) {
      for (int64_t h = 0; h < c.n_head; ++h) {
        const int64_t n = positions[t] + 1, kv_head = h / (c.n_head / c.n_head_kv);
        const float* qh = q + (static_cast<int64_t>(t) * c.n_head + h) * c.head_dim_k;
        std::vector<float> p_float(static_cast<size_t>(n)), p_exact(static_cast<size_t>(n));
        shadow_->scores(c.layer, kv_head, qh, 0, n, p_float.data());
        for (float& s : p_float) s *= c.scale;
        kernels::ref::softmax(p_float.data(), n);
        // Exact side as log-probabilities in double (before the float rounding of the probabilities,
        // which sends tails below 1e-45 to 0): log p = v - max - log sum exp(v - max).
        kv.scores(c.layer, kv_head, qh, 0, n, p_exact.data());
        double max = -INFINITY, sum = 0;
        for (const float s : p_exact) max = std::max(max, double{s} * c.scale);
        for (const float s : p_exact) sum += std::exp(double{s} * c.scale - max);
        double kl = 0;
        for (int64_t j = 0; j < n; ++j) {
          const double log_exact = double{p_exact[j]} * c.scale - max - std::log(sum);
          if (p_float[j] > 0) kl += p_float[j] * (std::log(double{p_float[j]}) - log_exact);
        }
        kl_[static_cast<size_t>(c.layer)] += kl;
        rows_[static_cast<size_t>(c.layer)] += 1;
      }
    }
    ExactOps::attention(kv, c, q, positions, out);
  }
  double mean_kl(int64_t layer) const { return kl_[static_cast<size_t>(layer)] / rows_[static_cast<size_t>(layer)]; }

 private:
  std::unique_ptr<kv::KvStore> shadow_;
  std::vector<double> kl_, rows_;
};

TEST(ExactAttention, PerLayerKlOfFloatAgainstExactAttentionOnStories260K) {
  const auto m = Model::load(gguf::File::open(test::repo_dir() / "models/stories260K.gguf"));
  const HParams& hp = m->hparams();
  std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426};
  for (int i = 0; i < 48; ++i) tokens.push_back(static_cast<int32_t>(260 + (i * 37) % 250));
  const kv::KvShape shape{hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, 64};
  for (const kv::ExactScores scores : {kv::ExactScores::Ntt, kv::ExactScores::Direct}) {
    KlProbe probe(shape, hp.n_layer);
    const auto store = kv::make_exact_store(shape, scores, isa());
    evaluate_all(*m, probe, *store, tokens, 16);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      std::printf("%s layer %lld: mean KL(float || exact) = %.3e nats over %zu rows\n",
                  scores == kv::ExactScores::Ntt ? "ntt" : "direct", static_cast<long long>(l), probe.mean_kl(l),
                  tokens.size() * static_cast<size_t>(hp.n_head));
      EXPECT_LT(probe.mean_kl(l), 1e-6) << "layer " << l;
      EXPECT_GE(probe.mean_kl(l), -1e-12) << "layer " << l;
    }
  }
}

}  // namespace
}  // namespace okapi::backend
