// AdamW against hand-computed updates, the weight-decay mask, the learning-rate schedule at its
// key steps, global-norm clipping; configs, the parameter layout and initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <numeric>
#include <random>

#include "core/error.hpp"
#include "train/adamw_update.hpp"
#include "train/model.hpp"
#include "train/optimizer.hpp"

namespace okapi::test {
namespace {

using namespace okapi::train;

ModelConfig small_config() {
  ModelConfig c;
  c.dim = 8;
  c.hidden_dim = 12;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.vocab_size = 5;
  c.seq_len = 4;
  return c;
}

TEST(AdamW, TwoStepsByHand) {
  const ParameterLayout layout(small_config());
  AdamWConfig ac;  // beta1 0.9, beta2 0.95, eps 1e-8, wd 0.1
  AdamW adamw(layout, ac);
  const size_t q = layout.find("blk.0.attn_q.weight").offset;       // decays
  const size_t norm = layout.find("blk.0.attn_norm.weight").offset;  // does not
  std::vector<float> p(layout.total(), 0.5f), g(layout.total(), 0.0f);
  g[q] = 0.2f;
  g[norm] = -0.3f;
  const float lr = 0.01f;
  adamw.step(p, g, lr, 1);
  // t = 1: m_hat = g, v_hat = g^2, update = g / (|g| + eps)
  const double upd_q = 0.2 / (0.2 + 1e-8), upd_norm = -0.3 / (0.3 + 1e-8);
  EXPECT_NEAR(p[q], 0.5 - 0.01 * 0.1 * 0.5 - 0.01 * upd_q, 1e-7);
  EXPECT_NEAR(p[norm], 0.5 - 0.01 * upd_norm, 1e-7);
  EXPECT_NEAR(p[q + 1], 0.5 - 0.01 * 0.1 * 0.5, 1e-7);  // zero gradient: only the decay
  EXPECT_EQ(p[norm + 1], 0.5f);                          // no gradient, no decay
  EXPECT_NEAR(adamw.first_moment()[q], 0.1 * 0.2, 1e-8);
  EXPECT_NEAR(adamw.second_moment()[q], 0.05 * 0.04, 1e-9);
  // t = 2 with gradient 0.1
  const double p1 = p[q];
  g[q] = 0.1f;
  adamw.step(p, g, lr, 2);
  const double m = 0.9 * 0.02 + 0.1 * 0.1, v = 0.95 * 0.002 + 0.05 * 0.01;
  const double m_hat = m / (1 - 0.81), v_hat = v / (1 - 0.9025);
  EXPECT_NEAR(p[q], p1 - 0.01 * 0.1 * p1 - 0.01 * m_hat / (std::sqrt(v_hat) + 1e-8), 1e-7);
}

TEST(AdamW, DecayMask) {
  ModelConfig c = small_config();
  c.tied_embeddings = false;
  const ParameterLayout layout(c);
  for (const bool decay_all : {false, true}) {
    AdamWConfig ac;
    ac.weight_decay = 0.5f;
    ac.decay_norms_and_embeddings = decay_all;
    AdamW adamw(layout, ac);
    std::vector<float> p(layout.total(), 1.0f), g(layout.total(), 0.0f);
    adamw.step(p, g, 0.1f, 1);
    for (const TensorSlot& s : layout.slots()) {
      const bool decays = decay_all || s.role == TensorRole::Matrix || s.role == TensorRole::Output;
      EXPECT_FLOAT_EQ(p[s.offset], decays ? 0.95f : 1.0f) << s.name;
    }
  }
  AdamW adamw(layout, AdamWConfig{});
  std::vector<float> p(3), g(3);
  EXPECT_THROW(adamw.step(p, g, 0.1f, 1), Error);
}

// AdamW::step on every tier here (AVX2 from the avx2 tier up) equals the scalar element update bit
// for bit.
TEST(AdamW, VectorPathEqualsScalar) {
  const ParameterLayout layout(config_by_name("stories260K", 512));
  const size_t n = layout.total();
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p0(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    p0[i] = normal(rng);
    g[i] = 1e-3f * normal(rng);
  }
  for (const Isa tier : available_isas()) {
    SCOPED_TRACE(isa_name(tier));
    std::vector<float> p = p0, p_ref = p0, m_ref(n, 0.0f), v_ref(n, 0.0f), mask(n, 0.0f);
    for (const TensorSlot& s : layout.slots()) {
      const bool decays = s.role == TensorRole::Matrix || s.role == TensorRole::Output;
      std::fill(mask.begin() + static_cast<std::ptrdiff_t>(s.offset),
                mask.begin() + static_cast<std::ptrdiff_t>(s.offset + s.size()), decays ? 1.0f : 0.0f);
    }
    AdamW adamw(layout, AdamWConfig{}, tier);
    for (int64_t t = 1; t <= 3; ++t) {
      adamw.step(p, g, 3e-4f, t);
      AdamWUpdate u{0.9f, 1.0f - 0.9f, 0.95f, 1.0f - 0.95f, static_cast<float>(1.0 / (1.0 - std::pow(double(0.9f), double(t)))),
                    static_cast<float>(1.0 / (1.0 - std::pow(double(0.95f), double(t)))), 1e-8f, 3e-4f, 3e-4f * 0.1f};
      adamw_update_scalar(u, n, p_ref.data(), g.data(), m_ref.data(), v_ref.data(), mask.data());
    }
    EXPECT_TRUE(p == p_ref);
    EXPECT_TRUE(adamw.first_moment() == m_ref);
    EXPECT_TRUE(adamw.second_moment() == v_ref);
  }
}

TEST(LrSchedule, WarmupThenCosine) {
  const LrSchedule s{1e-3f, 1e-4f, 10, 110};
  EXPECT_FLOAT_EQ(s.at(1), 1e-4f);
  EXPECT_FLOAT_EQ(s.at(5), 5e-4f);
  EXPECT_FLOAT_EQ(s.at(10), 1e-3f);
  EXPECT_FLOAT_EQ(s.at(60), 0.5f * (1e-3f + 1e-4f));  // half way through the cosine
  EXPECT_NEAR(s.at(35), 1e-4 + 0.9e-3 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25)), 1e-9);
  EXPECT_FLOAT_EQ(s.at(110), 1e-4f);
  EXPECT_FLOAT_EQ(s.at(500), 1e-4f);
  for (int64_t t = 11; t < 110; ++t) EXPECT_LT(s.at(t + 1), s.at(t));
  const LrSchedule no_warmup{2e-3f, 0.0f, 0, 100};
  EXPECT_NEAR(no_warmup.at(1), 2e-3 * 0.5 * (1 + std::cos(std::numbers::pi / 100)), 1e-9);
  EXPECT_FLOAT_EQ(no_warmup.at(100), 0.0f);
}

TEST(ClipGlobalNorm, ScalesOnlyAboveTheLimit) {
  std::vector<float> g = {3.0f, 4.0f, 0.0f};
  EXPECT_FLOAT_EQ(clip_global_norm(g, 10.0f), 5.0f);
  EXPECT_EQ(g, (std::vector<float>{3.0f, 4.0f, 0.0f}));
  EXPECT_FLOAT_EQ(clip_global_norm(g, 1.0f), 5.0f);
  EXPECT_FLOAT_EQ(g[0], 0.6f);
  EXPECT_FLOAT_EQ(g[1], 0.8f);
  EXPECT_NEAR(clip_global_norm(g, 0.0f), 1.0f, 1e-6);  // 0: no clipping, still the norm
  std::vector<float> big(10001, 0.01f);
  EXPECT_NEAR(clip_global_norm(big, 0.5f), std::sqrt(10001.0) * 0.01, 1e-5);
  double sq = 0;
  for (float v : big) sq += double(v) * double(v);
  EXPECT_NEAR(std::sqrt(sq), 0.5, 1e-6);
}

TEST(ModelConfig, NamedShapesAndValidation) {
  const ModelConfig s15 = config_by_name("stories15M", 32000);
  EXPECT_EQ(s15.dim, 288);
  EXPECT_EQ(s15.hidden_dim, 768);
  EXPECT_EQ(s15.n_layers, 6);
  EXPECT_EQ(s15.seq_len, 256);
  // llama2.c's stories15M.bin is 60,816,028 bytes: a 28-byte header, then 15,204,000 floats of
  // which 2 x 256 x 24 are the RoPE tables it also stores: 15,191,712 parameters.
  EXPECT_EQ(ParameterLayout(s15).total(), (60816028u - 28u) / 4u - 2u * 256u * 24u);
  EXPECT_EQ(config_names().size(), 4u);
  for (const auto name : config_names()) EXPECT_NO_THROW(ParameterLayout(config_by_name(name, 32000)));
  try {
    config_by_name("stories1B", 32000);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stories110M"), std::string::npos) << e.what();
  }
  ModelConfig c = small_config();
  c.n_kv_heads = 3;
  EXPECT_THROW(c.validate(), Error);
  c = small_config();
  c.dim = 10;  // not a multiple of 4 heads... 10 / 2 = 5: odd head_dim
  EXPECT_THROW(c.validate(), Error);
  c = small_config();
  c.vocab_size = 0;
  EXPECT_THROW(ParameterLayout{c}, Error);
}

TEST(ParameterLayout, SlotsAreContiguousAndNamedAsGguf) {
  ModelConfig c = small_config();
  c.ternary = true;
  c.tied_embeddings = false;
  const ParameterLayout layout(c);
  size_t next = 0;
  for (const TensorSlot& s : layout.slots()) {
    EXPECT_EQ(s.offset, next) << s.name;
    next += s.size();
  }
  EXPECT_EQ(layout.total(), next);
  EXPECT_EQ(layout.find("blk.0.ffn_sub_norm.weight").cols, 12);
  EXPECT_EQ(layout.find("blk.0.attn_k.weight").rows, 4);  // kv_dim = 1 head x 4
  EXPECT_EQ(layout.find("blk.0.ffn_down.weight").cols, 12);
  EXPECT_EQ(layout.find("output.weight").role, TensorRole::Output);
  EXPECT_THROW(layout.find("blk.1.attn_q.weight"), Error);
  c.ternary = false;
  c.tied_embeddings = true;
  EXPECT_THROW(ParameterLayout(c).find("output.weight"), Error);
  EXPECT_THROW(ParameterLayout(c).find("blk.0.attn_sub_norm.weight"), Error);
}

TEST(Initialize, DeterministicAndDistributed) {
  ModelConfig c = config_by_name("stories260K", 512);
  const ParameterLayout layout(c);
  std::vector<float> a(layout.total()), b(layout.total()), other(layout.total());
  initialize(layout, Init::Llama2c, 42, a);
  initialize(layout, Init::Llama2c, 42, b);
  initialize(layout, Init::Llama2c, 43, other);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  const auto stats = [&](const std::vector<float>& p, const std::string& name) {
    const TensorSlot& s = layout.find(name);
    double sum = 0, sq = 0, mx = 0;
    for (size_t i = s.offset; i < s.offset + s.size(); ++i) {
      sum += p[i];
      sq += double(p[i]) * p[i];
      mx = std::max(mx, std::fabs(double(p[i])));
    }
    const double n = double(s.size()), mean = sum / n;
    return std::array<double, 3>{mean, std::sqrt(sq / n - mean * mean), mx};
  };
  const auto emb = stats(a, "token_embd.weight");  // 32768 values
  EXPECT_NEAR(emb[0], 0.0, 0.001);
  EXPECT_NEAR(emb[1], 0.02, 0.0006);
  const auto down = stats(a, "blk.0.ffn_down.weight");
  EXPECT_NEAR(down[1], 0.02 / std::sqrt(10.0), 0.0003);  // residual projection, 5 layers
  const auto wo = stats(a, "blk.4.attn_output.weight");
  EXPECT_NEAR(wo[1], 0.02 / std::sqrt(10.0), 0.0005);
  const auto up = stats(a, "blk.0.ffn_up.weight");
  EXPECT_NEAR(up[1], 0.02, 0.0006);
  EXPECT_EQ(a[layout.find("blk.2.ffn_norm.weight").offset], 1.0f);
  initialize(layout, Init::Xavier, 42, a);
  const auto q = stats(a, "blk.0.attn_q.weight");  // uniform(+-sqrt(6 / 128))
  const double bound = std::sqrt(6.0 / 128.0);
  EXPECT_LE(q[2], bound);
  EXPECT_GT(q[2], 0.97 * bound);
  EXPECT_NEAR(q[1], bound / std::sqrt(3.0), 0.01 * bound);
  std::vector<float> wrong(5);
  EXPECT_THROW(initialize(layout, Init::Xavier, 1, wrong), Error);
}

}  // namespace
}  // namespace okapi::test
