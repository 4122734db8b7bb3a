// Transformer::forward_backward: bit-identical gradients for any pool size and with the weight
// gradients overlapped or not; micro-batch accumulation equals one large batch; a tiny model
// learns a repeated sequence (training works end to end); bad inputs are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "train/model.hpp"
#include "train/optimizer.hpp"

namespace okapi::test {
namespace {

using namespace okapi::train;

// Large enough that every GEMM has several tiles and k blocks (vocab 700 > 3 tiles of 192...).
ModelConfig mid_config(bool ternary, bool tied) {
  ModelConfig c;
  c.name = "mid";
  c.dim = 96;
  c.hidden_dim = 260;
  c.n_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.vocab_size = 700;
  c.seq_len = 64;
  c.ternary = ternary;
  c.tied_embeddings = tied;
  return c;
}

struct Data {
  int64_t batch, seq;
  std::vector<int32_t> tokens, targets;
};

Data make_data(int64_t batch, int64_t seq, int64_t vocab, uint32_t salt) {
  Data d{batch, seq, {}, {}};
  for (int64_t i = 0; i < batch * seq; ++i) {
    d.tokens.push_back(static_cast<int32_t>((i * 37 + salt) % vocab));
    d.targets.push_back(static_cast<int32_t>((i * 101 + 3 * salt) % vocab));
  }
  return d;
}

std::vector<float> gradients(const ModelConfig& config, const std::vector<float>& params, const Data& d, int threads,
                             bool overlap, float* loss) {
  ThreadPool pool(threads);
  Transformer model(config, &pool);
  model.set_overlap_weight_gradients(overlap);
  std::vector<float> grads(model.layout().total(), 0.0f);
  *loss = model.forward_backward(params, d.tokens, d.targets, d.batch, d.seq, 1.0f, grads);
  // a second call on the same instance adds the same gradient again (buffers are reused)
  model.forward_backward(params, d.tokens, d.targets, d.batch, d.seq, 1.0f, grads);
  return grads;
}

TEST(Transformer, BitIdenticalAcrossPoolSizesAndOverlap) {
  for (const bool ternary : {false, true}) {
    const ModelConfig config = mid_config(ternary, !ternary);
    const ParameterLayout layout(config);
    std::vector<float> params(layout.total());
    initialize(layout, Init::Xavier, 3, params);
    const Data d = make_data(2, 64, config.vocab_size, 1);
    float loss_ref = 0;
    const std::vector<float> ref = gradients(config, params, d, 1, false, &loss_ref);
    double norm = 0;
    for (float g : ref) norm += double(g) * double(g);
    EXPECT_GT(norm, 0.0);
    for (const int threads : {1, 2, 3}) {
      for (const bool overlap : {false, true}) {
        float loss = 0;
        const std::vector<float> g = gradients(config, params, d, threads, overlap, &loss);
        EXPECT_EQ(loss, loss_ref);
        EXPECT_TRUE(g == ref) << (ternary ? "ternary " : "float ") << threads << " threads, overlap " << overlap;
      }
    }
  }
}

TEST(Transformer, AccumulatedMicroBatchesEqualOneBatch) {
  const ModelConfig config = mid_config(false, true);
  ThreadPool pool(2);
  Transformer model(config, &pool);
  std::vector<float> params(model.layout().total());
  initialize(model.layout(), Init::Llama2c, 4, params);
  const Data a = make_data(1, 48, config.vocab_size, 1), b = make_data(1, 48, config.vocab_size, 2);
  Data both{2, 48, a.tokens, a.targets};
  both.tokens.insert(both.tokens.end(), b.tokens.begin(), b.tokens.end());
  both.targets.insert(both.targets.end(), b.targets.begin(), b.targets.end());
  std::vector<float> accumulated(params.size(), 0.0f), single(params.size(), 0.0f);
  const float la = model.forward_backward(params, a.tokens, a.targets, 1, 48, 0.5f, accumulated);
  const float lb = model.forward_backward(params, b.tokens, b.targets, 1, 48, 0.5f, accumulated);
  const float lab = model.forward_backward(params, both.tokens, both.targets, 2, 48, 1.0f, single);
  EXPECT_NEAR(0.5f * (la + lb), lab, 1e-5f);
  double max_g = 0, max_d = 0;
  for (size_t i = 0; i < single.size(); ++i) {
    max_g = std::max(max_g, std::fabs(double(single[i])));
    max_d = std::max(max_d, std::fabs(double(single[i]) - double(accumulated[i])));
  }
  std::printf("  2 x batch 1 (loss_scale 0.5) vs batch 2: max|d grad| %.2e (max|g| %.2e)\n", max_d, max_g);
  EXPECT_LE(max_d, 1e-5 * max_g);
}

TEST(Transformer, ForwardLossMatchesForwardBackward) {
  const ModelConfig config = mid_config(true, true);
  Transformer model(config, nullptr);
  std::vector<float> params(model.layout().total()), grads(params.size(), 0.0f);
  initialize(model.layout(), Init::Xavier, 5, params);
  const Data d = make_data(1, 40, config.vocab_size, 3);
  const float eval = model.forward_loss(params, d.tokens, d.targets, 1, 40);
  EXPECT_EQ(eval, model.forward_backward(params, d.tokens, d.targets, 1, 40, 1.0f, grads));
  // A fresh model's loss is near log(vocab).
  EXPECT_NEAR(eval, std::log(700.0f), 0.5f);
}

// Training works end to end: a tiny model memorises one repeated sequence.
void overfit(bool ternary) {
  ModelConfig c;
  c.dim = 32;
  c.hidden_dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 48;
  c.seq_len = 32;
  c.ternary = ternary;
  ThreadPool pool(2);
  Transformer model(c, &pool);
  std::vector<float> params(model.layout().total()), grads(params.size());
  initialize(model.layout(), Init::Xavier, 9, params);
  std::vector<int32_t> tokens, targets;
  for (int64_t i = 0; i <= 32; ++i) tokens.push_back(static_cast<int32_t>((i * 13 + i * i) % 48));
  targets.assign(tokens.begin() + 1, tokens.end());
  tokens.pop_back();
  AdamWConfig ac;
  ac.weight_decay = 0.0f;
  AdamW adamw(model.layout(), ac);
  LrSchedule schedule{ternary ? 1e-2f : 5e-3f, 1e-4f, 10, 150};
  float first = 0, last = 0;
  for (int64_t step = 1; step <= 150; ++step) {
    std::fill(grads.begin(), grads.end(), 0.0f);
    last = model.forward_backward(params, tokens, targets, 1, 32, 1.0f, grads);
    if (step == 1) first = last;
    clip_global_norm(grads, 1.0f);
    adamw.step(params, grads, schedule.at(step), step);
  }
  std::printf("  %s: loss %.3f -> %.4f after 150 steps\n", ternary ? "ternary" : "float", first, last);
  EXPECT_GT(first, 3.0f);
  EXPECT_LT(last, ternary ? 0.5f : 0.05f);
}

TEST(Transformer, OverfitsARepeatedSequence) { overfit(false); }
TEST(Transformer, TernaryOverfitsARepeatedSequence) { overfit(true); }

TEST(Transformer, RejectsBadInput) {
  const ModelConfig config = mid_config(false, true);
  Transformer model(config, nullptr);
  std::vector<float> params(model.layout().total()), grads(params.size());
  std::vector<int32_t> tokens(8, 1), targets(8, 2);
  EXPECT_NO_THROW(model.forward_backward(params, tokens, targets, 1, 8, 1.0f, grads));
  EXPECT_THROW(model.forward_backward(params, tokens, targets, 2, 8, 1.0f, grads), Error);   // size
  EXPECT_THROW(model.forward_backward(params, tokens, targets, 1, 8, 1.0f, std::span<float>(grads).first(5)), Error);
  EXPECT_THROW(model.forward_loss(std::span<const float>(params).first(3), tokens, targets, 1, 8), Error);
  tokens[3] = 700;
  EXPECT_THROW(model.forward_loss(params, tokens, targets, 1, 8), Error);
  tokens[3] = -2;
  EXPECT_THROW(model.forward_loss(params, tokens, targets, 1, 8), Error);
  tokens[3] = 1;
  targets[2] = 700;
  EXPECT_THROW(model.forward_loss(params, tokens, targets, 1, 8), Error);
  targets.assign(8, -1);  // everything ignored: loss 0, no gradient
  std::fill(grads.begin(), grads.end(), 0.0f);
  EXPECT_EQ(model.forward_backward(params, tokens, targets, 1, 8, 1.0f, grads), 0.0f);
  for (float g : grads) ASSERT_EQ(g, 0.0f);
  std::vector<int32_t> long_tokens(65, 1), long_targets(65, 1);
  try {
    model.forward_loss(params, long_tokens, long_targets, 1, 65);
    ADD_FAILURE() << "no error for seq 65 > seq_len 64";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("64"), std::string::npos) << e.what();
  }
  std::vector<float> logits(3);
  EXPECT_THROW(model.forward_logits(params, tokens, logits), Error);
}

}  // namespace
}  // namespace okapi::test
