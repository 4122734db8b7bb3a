// ObservingOps wraps any backend: the logits through it are the wrapped backend's own bits (CpuOps
// and ExactOps alike), every projection input and norm input is shown, and a grouped mat-mul
// (Q/K/V, gate/up) is shown once, also where the backend cannot fuse the FFN's gate and up
// (stories260K's 172 rows are not a multiple of 8).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu_ops.hpp"
#include "backend/exact_ops.hpp"
#include "compress/calibration.hpp"
#include "core/thread_pool.hpp"
#include "format/model_file.hpp"
#include "model/model.hpp"
#include "support/paths.hpp"

namespace okapi::compress {
namespace {

// Counts what it is shown, by the first weight named.
class Counter : public ObservingOps::Observer {
 public:
  std::map<std::string, int> matmuls, norms;
  void matmul_input(std::span<const std::string_view> weights, const float*, int64_t, int64_t) override {
    ++matmuls[std::string(weights.front())];
  }
  void norm_input(std::string_view weight, const float*, int64_t, int64_t) override { ++norms[std::string(weight)]; }
};

std::vector<float> last_logits(const model::Model& m, model::Ops& ops, const std::vector<int32_t>& tokens) {
  ops.prepare(m.weights());
  const model::HParams& hp = m.hparams();
  const kv::KvShape shape{hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, static_cast<int64_t>(tokens.size())};
  std::unique_ptr<kv::KvStore> kv = ops.make_kv(shape, model::KvTypes{});
  std::vector<int32_t> positions(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) positions[i] = static_cast<int32_t>(i);
  std::vector<float> logits(static_cast<size_t>(m.n_vocab()));
  m.forward(ops, *kv, tokens, positions, model::LogitRows::Last, logits.data());
  return logits;
}

class ObservingOpsTest : public ::testing::Test {
 protected:
  std::unique_ptr<model::Model> model_ = model::Model::load(gguf::open_model(test::repo_dir() / "models/stories260K.gguf"));
  std::vector<int32_t> tokens_ = {1, 403, 407, 261, 378, 404, 322, 271, 282, 300, 263, 333};
  ThreadPool pool_{2};
};

TEST_F(ObservingOpsTest, OverCpuOpsTheLogitsAreCpuOpsBitsAndEachInputIsShownOnce) {
  backend::CpuOps plain(&pool_), inner(&pool_);
  const std::vector<float> expected = last_logits(*model_, plain, tokens_);
  Counter counter;
  ObservingOps ops(inner, counter);
  EXPECT_EQ(last_logits(*model_, ops, tokens_), expected);
  const int64_t n_layer = model_->hparams().n_layer;
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(counter.matmuls[blk + "attn_q.weight"], 1) << blk;  // with K and V
    EXPECT_EQ(counter.matmuls[blk + "attn_output.weight"], 1) << blk;
    EXPECT_EQ(counter.matmuls[blk + "ffn_gate.weight"], 1) << blk;  // with up, not fused here
    EXPECT_EQ(counter.matmuls[blk + "ffn_down.weight"], 1) << blk;
    EXPECT_EQ(counter.norms[blk + "attn_norm.weight"], 1) << blk;
    EXPECT_EQ(counter.norms[blk + "ffn_norm.weight"], 1) << blk;
  }
  EXPECT_EQ(counter.norms["output_norm.weight"], 1);
}

TEST_F(ObservingOpsTest, OverExactOpsTheLogitsAreExactOpsBits) {
  backend::ExactOps plain(&pool_), inner(&pool_);
  const std::vector<float> expected = last_logits(*model_, plain, tokens_);
  Counter counter;
  ObservingOps ops(inner, counter);
  EXPECT_EQ(last_logits(*model_, ops, tokens_), expected);
  EXPECT_EQ(counter.matmuls["blk.0.ffn_gate.weight"], 1);
  EXPECT_EQ(counter.norms["blk.0.attn_norm.weight"], 1);
}

TEST_F(ObservingOpsTest, AReplacementRunsAsItsFactorsProduct) {
  // blk.0.attn_output replaced by out · in with in = I (rank n) and out = W: the same function.
  const model::WeightSet weights = model_->weights();  // a copy: w points into it
  const model::Weight* w = nullptr;
  for (const model::Weight& m : weights.matmul) {
    if (m.name == "blk.0.attn_output.weight") w = &m;
  }
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->type, DType::F32);
  ObservingOps::Replacement r;
  r.rank = w->n_in;
  r.in.assign(static_cast<size_t>(w->n_in * w->n_in), 0.0f);
  for (int64_t i = 0; i < w->n_in; ++i) r.in[static_cast<size_t>(i * w->n_in + i)] = 1.0f;
  r.out.assign(w->f32(), w->f32() + w->n_in * w->n_out);
  const std::map<std::string, ObservingOps::Replacement> replacements = {{std::string(w->name), r}};

  backend::CpuOps plain(&pool_), inner(&pool_);
  const std::vector<float> expected = last_logits(*model_, plain, tokens_);
  Counter counter;
  ObservingOps ops(inner, counter);
  ops.set_replacements(&replacements);
  const std::vector<float> got = last_logits(*model_, ops, tokens_);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-4f) << i;
  EXPECT_EQ(counter.matmuls["blk.0.attn_output.weight"], 1);
  // A zero out-factor removes the projection: the replacement is what ran.
  std::map<std::string, ObservingOps::Replacement> zeroed = replacements;
  std::fill(zeroed.begin()->second.out.begin(), zeroed.begin()->second.out.end(), 0.0f);
  ops.set_replacements(&zeroed);
  EXPECT_NE(last_logits(*model_, ops, tokens_), expected);
}

}  // namespace
}  // namespace okapi::compress
