// runtime::Embedder on tiny synth models (2 layers, F32): the same vectors, bit for bit, however
// inputs are packed into passes (batch_tokens, max_inputs_per_pass, alone or together, a causal
// model's long input split over passes); each pooling reads the rows it should; and the errors
// name the input.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "runtime/embedder.hpp"
#include "runtime/engine.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "synth/synth.hpp"

namespace okapi::runtime {
namespace {

namespace fs = std::filesystem;
using model::Pooling;

bool sanitized() {
  const char* v = std::getenv("OKAPI_SANITIZED");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

class EmbedderBatching : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new fs::path(test::make_temp_dir("embedder-batching")); }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  // A 2-layer tiny model of `preset` (test::tiny_preset), written once per suite.
  static std::unique_ptr<Engine> engine_of(const std::string& preset, const std::string& arch = "") {
    const fs::path path = *dir_ / (preset + ".gguf");
    if (!fs::exists(path)) test::write_synth_model(test::tiny_preset(preset), arch, "F32", 2, path);
    EngineOptions options;
    options.threads = 2;
    return Engine::load(path, options);
  }

  static fs::path* dir_;
};
fs::path* EmbedderBatching::dir_ = nullptr;

// `count` inputs of min_len..max_len random token ids in [1, n_vocab).
std::vector<std::vector<int32_t>> random_inputs(size_t count, int min_len, int max_len, int64_t n_vocab,
                                                uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> length(min_len, max_len);
  std::uniform_int_distribution<int32_t> id(1, static_cast<int32_t>(n_vocab - 1));
  std::vector<std::vector<int32_t>> inputs(count);
  for (auto& input : inputs) {
    input.resize(static_cast<size_t>(length(rng)));
    for (auto& t : input) t = id(rng);
  }
  return inputs;
}

std::vector<EmbeddingOutput> embed_with(Engine& engine, EmbedderOptions options,
                                        const std::vector<std::vector<int32_t>>& inputs) {
  Embedder embedder(engine, options);
  return embedder.embed(inputs);
}

void expect_same_bits(const std::vector<EmbeddingOutput>& a, const std::vector<EmbeddingOutput>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].n_tokens, b[i].n_tokens) << what << " input " << i;
    ASSERT_EQ(a[i].values.size(), b[i].values.size()) << what << " input " << i;
    ASSERT_FALSE(a[i].values.empty()) << what << " input " << i;
    EXPECT_EQ(std::memcmp(a[i].values.data(), b[i].values.data(), a[i].values.size() * sizeof(float)), 0)
        << what << " input " << i;
  }
}

// The same inputs packed every way: one big pass, small passes of a few inputs, one input a pass.
void expect_packing_invariant(Engine& engine, Pooling pooling, const std::vector<std::vector<int32_t>>& inputs,
                              int64_t small_batch) {
  EmbedderOptions big;
  big.pooling = pooling;
  const auto together = embed_with(engine, big, inputs);
  EmbedderOptions small = big;
  small.batch_tokens = small_batch;
  small.max_inputs_per_pass = 3;
  expect_same_bits(together, embed_with(engine, small, inputs), "small passes");
  EmbedderOptions one = big;
  one.max_inputs_per_pass = 1;
  expect_same_bits(together, embed_with(engine, one, inputs), "one input a pass");
  for (size_t i = 0; i < inputs.size(); i += 3) {
    const std::vector<std::vector<int32_t>> alone{inputs[i]};
    const auto result = embed_with(engine, big, alone);
    expect_same_bits({together[i]}, result, "alone, input " + std::to_string(i));
  }
  for (const auto& out : together) {
    const int64_t rows = pooling == Pooling::None ? out.n_tokens : 1;
    EXPECT_EQ(static_cast<int64_t>(out.values.size()), rows * Embedder(engine, big).width());
  }
}

TEST_F(EmbedderBatching, BertVectorsDoNotDependOnPacking) {
  auto engine = engine_of("bge-base-en-v1.5");
  ASSERT_FALSE(engine->model().causal_attention());
  const auto inputs = random_inputs(sanitized() ? 5 : 13, 1, 30, engine->model().n_vocab(), 7);
  for (const Pooling pooling : {Pooling::Mean, Pooling::Cls}) {
    SCOPED_TRACE(std::string(model::pooling_name(pooling)));
    expect_packing_invariant(*engine, pooling, inputs, 40);
  }
}

TEST_F(EmbedderBatching, EachPoolingReadsItsRows) {
  auto engine = engine_of("bge-base-en-v1.5");
  const auto inputs = random_inputs(sanitized() ? 3 : 6, 2, 20, engine->model().n_vocab(), 11);
  const auto pooled = [&](Pooling p) {
    EmbedderOptions options;
    options.pooling = p;
    options.batch_tokens = 48;  // several passes
    return embed_with(*engine, options, inputs);
  };
  const auto none = pooled(Pooling::None), mean = pooled(Pooling::Mean), cls = pooled(Pooling::Cls),
             last = pooled(Pooling::Last);
  const auto n_embd = static_cast<size_t>(engine->hparams().n_embd);
  for (size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    const std::vector<float>& rows = none[i].values;
    const size_t n = inputs[i].size();
    ASSERT_EQ(rows.size(), n * n_embd);
    // A pass that computes only the first (last) row gives that row's bits.
    EXPECT_EQ(std::memcmp(cls[i].values.data(), rows.data(), n_embd * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(last[i].values.data(), rows.data() + (n - 1) * n_embd, n_embd * sizeof(float)), 0);
    for (size_t d = 0; d < n_embd; ++d) {
      double sum = 0;
      for (size_t t = 0; t < n; ++t) sum += rows[t * n_embd + d];
      EXPECT_NEAR(mean[i].values[d], sum / static_cast<double>(n), 1e-5) << "dim " << d;
    }
  }
}

TEST_F(EmbedderBatching, CausalLongInputsSplitOverPasses) {
  auto engine = engine_of("qwen3-embedding-0.6b");
  ASSERT_TRUE(engine->model().causal_attention());
  // Inputs up to 70 tokens with passes of 32: the long ones run in two or three passes.
  const auto inputs = random_inputs(sanitized() ? 4 : 8, 3, 70, engine->model().n_vocab(), 5);
  for (const Pooling pooling : {Pooling::Last, Pooling::Mean}) {
    SCOPED_TRACE(std::string(model::pooling_name(pooling)));
    expect_packing_invariant(*engine, pooling, inputs, 32);
  }
}

TEST_F(EmbedderBatching, PoolingComesFromTheOptionThenTheFile) {
  auto engine = engine_of("bge-base-en-v1.5");
  const auto file = engine->model().file_pooling();
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ(Embedder(*engine, {}).pooling(), *file);
  EmbedderOptions options;
  options.pooling = Pooling::None;
  EXPECT_EQ(Embedder(*engine, options).pooling(), Pooling::None);
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(EmbedderBatching, ErrorsNameTheInput) {
  auto engine = engine_of("bge-base-en-v1.5");
  const int64_t n_vocab = engine->model().n_vocab();
  EmbedderOptions options;
  options.batch_tokens = 16;
  Embedder embedder(*engine, options);
  const std::vector<std::vector<int32_t>> empty{{101, 102}, {}};
  EXPECT_NE(error_of([&] { embedder.embed(empty); }).find("input 1 is empty"), std::string::npos);
  const std::vector<std::vector<int32_t>> too_long{{101, 102}, {101, 102}, std::vector<int32_t>(17, 200)};
  const std::string long_error = error_of([&] { embedder.embed(too_long); });
  EXPECT_NE(long_error.find("input 2 has 17 tokens"), std::string::npos) << long_error;
  EXPECT_NE(long_error.find("16"), std::string::npos) << long_error;
  const std::vector<std::vector<int32_t>> bad_id{{101, static_cast<int32_t>(n_vocab), 102}};
  const std::string id_error = error_of([&] { embedder.embed(bad_id); });
  EXPECT_NE(id_error.find("input 0: token id"), std::string::npos) << id_error;
  EXPECT_NE(id_error.find("position 1"), std::string::npos) << id_error;
  // Longer than the longest input allowed (the model's trained context by default).
  EmbedderOptions wide;
  wide.batch_tokens = 4096;
  Embedder wide_embedder(*engine, wide);
  const int64_t trained = engine->hparams().n_ctx_train;
  ASSERT_GT(trained, 0);
  ASSERT_EQ(wide_embedder.max_input_tokens(), std::min<int64_t>(trained, kDefaultContextCap));
  const std::vector<std::vector<int32_t>> beyond{std::vector<int32_t>(static_cast<size_t>(trained + 1), 200)};
  const std::string beyond_error = error_of([&] { wide_embedder.embed(beyond); });
  EXPECT_NE(beyond_error.find("input 0 has " + std::to_string(trained + 1) + " tokens"), std::string::npos)
      << beyond_error;
  // Nothing at all is fine: no passes.
  EXPECT_TRUE(embedder.embed({}).empty());
}

TEST_F(EmbedderBatching, BadOptionsAreErrors) {
  auto engine = engine_of("bge-base-en-v1.5");
  EmbedderOptions zero_batch;
  zero_batch.batch_tokens = 0;
  EXPECT_THROW(Embedder(*engine, zero_batch), Error);
  EmbedderOptions zero_inputs;
  zero_inputs.max_inputs_per_pass = 0;
  EXPECT_THROW(Embedder(*engine, zero_inputs), Error);
  EmbedderOptions rank;
  rank.pooling = Pooling::Rank;
  EXPECT_NE(error_of([&] { Embedder(*engine, rank); }).find("classifier head"), std::string::npos);
}

}  // namespace
}  // namespace okapi::runtime
