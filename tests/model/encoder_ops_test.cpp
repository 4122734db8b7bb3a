// Embedding-model pieces without ../shared: LayerNorm against a double reference, pool() on known
// rows, the embedding hyper-parameters, non-causal versus causal attention, the errors an
// encoder gives where a decoder would produce logits, and exact mode on an encoder.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_ops.hpp"
#include "backend/exact_ops.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "model/model.hpp"
#include "support/cache_types.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "support/tiny_models.hpp"

namespace okapi::test {
namespace {

using model::Pooling;

model::Weight f32_vector(const std::vector<float>& v) {
  model::Weight w;
  w.data = v.data();
  w.n_in = static_cast<int64_t>(v.size());
  w.n_out = 1;
  return w;
}

TEST(LayerNorm, MatchesDoubleReference) {
  backend::CpuOps ops;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t n : {768, 384, 100, 17, 1}) {
    SCOPED_TRACE(n);
    const int64_t rows = 3;
    std::vector<float> x(static_cast<size_t>(rows * n)), weight(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
    for (float& v : x) v = 3.0f + 2.0f * normal(rng);  // an offset mean: the centring matters
    for (float& v : weight) v = 1.0f + 0.1f * normal(rng);
    for (float& v : bias) v = 0.1f * normal(rng);
    const float eps = 1e-12f;
    std::vector<float> y(x.size());
    ops.layernorm(x.data(), f32_vector(weight), f32_vector(bias), rows, n, eps, y.data());
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < n; ++i) mean += x[static_cast<size_t>(r * n + i)];
      mean /= static_cast<double>(n);
      for (int64_t i = 0; i < n; ++i) var += std::pow(x[static_cast<size_t>(r * n + i)] - mean, 2);
      var /= static_cast<double>(n);
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(r * n + i);
        const double ref = (x[k] - mean) / std::sqrt(var + eps) * weight[static_cast<size_t>(i)] + bias[static_cast<size_t>(i)];
        ASSERT_NEAR(y[k], ref, 2e-5) << "row " << r << " element " << i;
      }
    }
    // In place, the same bits; without weight and bias, the plain normalization.
    std::vector<float> in_place = x;
    ops.layernorm(in_place.data(), f32_vector(weight), f32_vector(bias), rows, n, eps, in_place.data());
    EXPECT_EQ(in_place, y);
    ops.layernorm(x.data(), {}, {}, 1, n, eps, y.data());
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += y[static_cast<size_t>(i)];
    EXPECT_NEAR(sum / static_cast<double>(n), 0.0, 1e-5);
  }
}

TEST(Activation, GeluIsTheGluTablesGelu) {
  backend::CpuOps ops;
  std::vector<float> x, ones;
  for (float v = -12.0f; v <= 12.0f; v += 0.01f) x.push_back(v);
  ones.assign(x.size(), 1.0f);
  std::vector<float> plain(x.size()), gated(x.size());
  ops.activation(model::Activation::GELU, x.data(), static_cast<int64_t>(x.size()), plain.data());
  ops.glu(model::Activation::GELU, x.data(), ones.data(), 1, static_cast<int64_t>(x.size()), gated.data());
  EXPECT_EQ(plain, gated);
}

class EncoderModel : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("encoder-ops"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<model::Model> load(const std::string& preset, int64_t n_layer = 2) {
    return model::Model::load(gguf::File::open(path(preset, n_layer)));
  }
  std::filesystem::path path(const std::string& preset, int64_t n_layer = 2) {
    const auto p = dir_ / (preset + "-" + std::to_string(n_layer) + ".gguf");
    if (!std::filesystem::exists(p)) write_synth_model(tiny_preset(preset), "", "F32", n_layer, p);
    return p;
  }

  // Every token's hidden state for one input run alone.
  static std::vector<float> hidden(model::Ops& ops, const model::Model& m, const std::vector<int32_t>& tokens) {
    auto store = ops.make_kv(m.kv_shape(static_cast<int64_t>(tokens.size()), static_cast<int64_t>(tokens.size())),
                             {cache_types("f32", "f32"), kv::ExactScores::Direct});
    std::vector<kv::KvStore*> stores(tokens.size(), store.get());
    std::vector<int32_t> positions(tokens.size());
    for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
    const std::vector<uint8_t> want(tokens.size(), 1);
    std::vector<float> out(tokens.size() * static_cast<size_t>(m.hparams().n_embd));
    m.forward_sequences_hidden(ops, stores, tokens, positions, want, out.data());
    return out;
  }

  std::filesystem::path dir_;
};

TEST_F(EncoderModel, HyperParameters) {
  const auto bge = load("bge-base-en-v1.5");
  EXPECT_FALSE(bge->generates_text());
  EXPECT_FALSE(bge->causal_attention());
  EXPECT_EQ(bge->file_pooling(), Pooling::Cls);
  EXPECT_FLOAT_EQ(bge->hparams().layer_norm_eps, 1e-12f);
  EXPECT_EQ(bge->hparams().n_token_types, 2);
  EXPECT_EQ(bge->rank_outputs(), 0);
  EXPECT_EQ(bge->pooled_width(Pooling::Mean), 64);

  const auto qwen = load("qwen3-embedding-0.6b");
  EXPECT_TRUE(qwen->generates_text());
  EXPECT_TRUE(qwen->causal_attention());
  EXPECT_EQ(qwen->file_pooling(), Pooling::Last);

  const auto reranker_path = path("bge-reranker-base");
  const gguf::File file = gguf::File::open(reranker_path);
  const auto reranker = model::Model::load(gguf::File::open(reranker_path));
  EXPECT_EQ(reranker->file_pooling(), Pooling::Rank);
  EXPECT_EQ(reranker->rank_outputs(), 1);
  EXPECT_EQ(reranker->pooled_width(Pooling::Rank), 1);

  // {arch}.attention.causal and the classifier labels are read; a bad pooling type is refused.
  gguf::Array labels{gguf::ValueType::STRING, {}};
  labels.items.emplace_back(std::string("relevant"));
  const std::vector<uint8_t> labelled = with_metadata(file, "bert.classifier.output_labels", gguf::Value(labels));
  const auto with_labels = model::Model::load(gguf::File::parse(labelled));
  EXPECT_EQ(with_labels->hparams().classifier_labels, std::vector<std::string>{"relevant"});
  const std::vector<uint8_t> causal = with_metadata(file, "bert.attention.causal", gguf::Value(true));
  EXPECT_TRUE(model::Model::load(gguf::File::parse(causal))->causal_attention());
  const std::vector<uint8_t> bad = with_metadata(file, "bert.pooling_type", gguf::Value(uint32_t{7}));
  EXPECT_NE(load_error(bad).find("'bert.pooling_type' is 7"), std::string::npos) << load_error(bad);
}

TEST_F(EncoderModel, PoolKnownRows) {
  const auto m = load("bge-reranker-base");
  backend::CpuOps ops;
  ops.prepare(m->weights());
  const int64_t n = m->hparams().n_embd, T = 3;
  std::vector<float> rows(static_cast<size_t>(T * n));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(t * n + i)] = static_cast<float>(t * 3 + 1) + 0.01f * static_cast<float>(i);
  std::vector<float> out(static_cast<size_t>(n));
  m->pool(ops, Pooling::Mean, rows.data(), T, out.data());
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(out[static_cast<size_t>(i)], 4.0f + 0.01f * static_cast<float>(i), 1e-5);
  m->pool(ops, Pooling::Cls, rows.data(), T, out.data());
  EXPECT_TRUE(std::equal(out.begin(), out.end(), rows.begin()));
  m->pool(ops, Pooling::Last, rows.data(), T, out.data());
  EXPECT_TRUE(std::equal(out.begin(), out.end(), rows.begin() + 2 * n));

  // Rank: tanh(cls · row0 + cls.bias), then cls.output · that + cls.output.bias, in double here.
  const gguf::File file = gguf::File::open(path("bge-reranker-base"));
  const auto f32 = [&](const char* name) { return reinterpret_cast<const float*>(file.find_tensor(name)->data); };
  const float *cls = f32("cls.weight"), *cls_b = f32("cls.bias"), *out_w = f32("cls.output.weight"),
              *out_b = f32("cls.output.bias");
  double score = out_b[0];
  for (int64_t o = 0; o < n; ++o) {
    double y = cls_b[o];
    for (int64_t i = 0; i < n; ++i) y += static_cast<double>(cls[o * n + i]) * rows[static_cast<size_t>(i)];
    score += static_cast<double>(out_w[o]) * std::tanh(y);
  }
  float rank = 0;
  m->pool(ops, Pooling::Rank, rows.data(), T, &rank);
  EXPECT_NEAR(rank, score, 1e-4 * std::max(1.0, std::fabs(score)));

  const auto contains = [&](Pooling p, int64_t tokens, const model::Model& model, const std::string& text) {
    try {
      model.pool(ops, p, rows.data(), tokens, out.data());
      ADD_FAILURE() << "no error, expected: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  contains(Pooling::None, T, *m, "pooling 'none'");
  contains(Pooling::Mean, 0, *m, "nothing to pool");
  contains(Pooling::Rank, T, *load("bge-base-en-v1.5"), "needs a classifier head");
}

// Changing a later token changes an earlier token's state in bert (non-causal), never in a
// causal model.
TEST_F(EncoderModel, NonCausalAttentionSeesLaterTokens) {
  const std::vector<int32_t> a = {101, 300, 301, 302, 303, 102}, b = {101, 300, 301, 302, 350, 102};
  for (const char* preset : {"bge-base-en-v1.5", "nomic-embed-text-v1.5", "qwen3-embedding-0.6b"}) {
    SCOPED_TRACE(preset);
    const auto m = load(preset);
    backend::CpuOps ops;
    ops.prepare(m->weights());
    const std::vector<float> ha = hidden(ops, *m, a), hb = hidden(ops, *m, b);
    const auto n = static_cast<size_t>(m->hparams().n_embd);
    const auto row = [&](const std::vector<float>& h, size_t t) { return std::vector<float>(h.begin() + t * n, h.begin() + (t + 1) * n); };
    if (m->causal_attention()) {
      EXPECT_EQ(row(ha, 0), row(hb, 0));
      EXPECT_EQ(row(ha, 3), row(hb, 3));
    } else {
      EXPECT_NE(row(ha, 0), row(hb, 0));
      EXPECT_NE(row(ha, 3), row(hb, 3));
    }
    EXPECT_NE(row(ha, 4), row(hb, 4));
  }
}

TEST_F(EncoderModel, EncoderErrors) {
  const auto m = load("bge-base-en-v1.5");
  backend::CpuOps ops;
  ops.prepare(m->weights());
  const std::vector<int32_t> tokens = {101, 300, 102};
  auto store = ops.make_kv(m->kv_shape(8, 8), {cache_types("f32", "f32"), kv::ExactScores::Direct});
  std::vector<float> out(1024 * 8);
  const auto error_of = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::vector<int32_t> positions = {0, 1, 2}, shifted = {1, 2, 3};
  const std::vector<uint8_t> want = {1, 1, 1};
  std::vector<kv::KvStore*> stores(3, store.get());
  EXPECT_NE(error_of([&] { m->forward(ops, *store, tokens, positions, model::LogitRows::All, out.data()); })
                .find("bert is an embedding model: it has no LM head"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m->forward_sequences(ops, stores, tokens, positions, want, out.data()); })
                .find("it has no LM head"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m->forward_sequences_hidden(ops, stores, tokens, shifted, want, out.data()); })
                .find("non-causal"),
            std::string::npos);
  // Two inputs interleaved in one pass: refused (each must run whole and adjacent).
  auto other = ops.make_kv(m->kv_shape(8, 8), {cache_types("f32", "f32"), kv::ExactScores::Direct});
  std::vector<kv::KvStore*> interleaved = {store.get(), other.get(), store.get()};
  const std::vector<int32_t> interleaved_positions = {0, 0, 1};
  EXPECT_NE(error_of([&] { m->forward_sequences_hidden(ops, interleaved, tokens, interleaved_positions, want, out.data()); })
                .find("non-causal"),
            std::string::npos);
}

// Exact mode runs encoders: close to the float backend, and the same bits run after run.
TEST_F(EncoderModel, ExactModeRunsBert) {
  const auto m = load("bge-base-en-v1.5");
  ThreadPool pool(2);
  backend::CpuOps cpu(&pool);
  cpu.prepare(m->weights());
  backend::ExactOps exact(&pool);
  exact.prepare(m->weights());
  const std::vector<int32_t> tokens = {101, 300, 301, 302, 303, 304, 102};
  const std::vector<float> f = hidden(cpu, *m, tokens), e1 = hidden(exact, *m, tokens), e2 = hidden(exact, *m, tokens);
  EXPECT_EQ(e1, e2);
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    ab += static_cast<double>(f[i]) * e1[i];
    aa += static_cast<double>(f[i]) * f[i];
    bb += static_cast<double>(e1[i]) * e1[i];
  }
  EXPECT_GE(ab / std::sqrt(aa * bb), 0.999);
}

}  // namespace
}  // namespace okapi::test
