// phi3, granite and smollm3 without the peers: phi3 picks its LongRoPE factors from the context of
// the KV store (long when it exceeds rope.scaling.original_context_length, 64 in the tiny model)
// and refuses a batch whose stores would pick both; granite's scale keys are checked; each of the
// three runs and gives a token the same bits alone or after others. (Fidelity against llama.cpp:
// dense_archs_peer_test.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu_ops.hpp"
#include "core/error.hpp"
#include "format/gguf.hpp"
#include "kv/kv_store.hpp"
#include "model/model.hpp"
#include "core/cpu.hpp"
#include "support/tiny_models.hpp"

namespace okapi::test {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

kv::KvShape shape_of(const model::Model& m, int64_t n_ctx) {
  const model::HParams& hp = m.hparams();
  return {hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, n_ctx};
}

// Logits of tokens 0..n-1 (ids 3, 10, 17, ...) in a fresh f32 store of `n_ctx` cells, in one batch.
std::vector<float> run(const model::Model& m, backend::CpuOps& ops, int64_t n_ctx, size_t n) {
  auto store = kv::make_f32_store(shape_of(m, n_ctx), isa());
  std::vector<int32_t> toks(n), positions(n);
  for (size_t i = 0; i < n; ++i) toks[i] = static_cast<int32_t>((3 + 7 * i) % static_cast<size_t>(m.n_vocab()));
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> logits(n * static_cast<size_t>(m.n_vocab()));
  m.forward(ops, *store, toks, positions, model::LogitRows::All, logits.data());
  return logits;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DenseArchs, Phi3PicksLongRopeFactorsFromTheContext) {
  const std::vector<uint8_t> bytes = tiny_model("phi3");
  const auto m = model::Model::load(gguf::File::parse(bytes, "phi3"));
  ASSERT_EQ(m->hparams().rope_n_ctx_orig, 64);
  backend::CpuOps ops;
  ops.prepare(m->weights());
  const std::vector<float> short_a = run(*m, ops, 32, 12), short_b = run(*m, ops, 64, 12);
  const std::vector<float> long_a = run(*m, ops, 65, 12), long_b = run(*m, ops, 128, 12);
  EXPECT_TRUE(same_bits(short_a, short_b));  // n_ctx <= 64: the short factors
  EXPECT_TRUE(same_bits(long_a, long_b));    // n_ctx > 64: the long factors
  EXPECT_FALSE(same_bits(short_a, long_a));
}

TEST(DenseArchs, Phi3RefusesABatchOfStoresPickingBothFactors) {
  const std::vector<uint8_t> bytes = tiny_model("phi3");
  const auto m = model::Model::load(gguf::File::parse(bytes, "phi3"));
  backend::CpuOps ops;
  ops.prepare(m->weights());
  auto short_store = kv::make_f32_store(shape_of(*m, 64), isa());
  auto long_store = kv::make_f32_store(shape_of(*m, 128), isa());
  const std::vector<kv::KvStore*> stores = {short_store.get(), long_store.get()};
  const std::vector<int32_t> toks = {3, 4}, positions = {0, 0};
  const std::vector<uint8_t> want = {1, 1};
  std::vector<float> logits(2 * static_cast<size_t>(m->n_vocab()));
  try {
    m->forward_sequences(ops, stores, toks, positions, want, logits.data());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "LongRoPE")) << e.what();
  }
}

TEST(DenseArchs, Phi3FusedTensorsOfTheWrongWidthAreNamed) {
  const std::vector<uint8_t> bytes = tiny_model("phi3");
  const gguf::File file = gguf::File::parse(bytes, "phi3");
  // feed_forward_length 48 (the tensors hold 2 x 64): the fused ffn_up no longer fits.
  const std::string error = load_error(with_metadata(file, "phi3.feed_forward_length", gguf::Value(uint32_t{48})));
  EXPECT_TRUE(contains(error, "ffn_up.weight")) << error;
  EXPECT_TRUE(contains(error, "'phi3.feed_forward_length'")) << error;
}

TEST(DenseArchs, GraniteScaleKeysAreChecked) {
  const std::vector<uint8_t> bytes = tiny_model("granite");
  const gguf::File file = gguf::File::parse(bytes, "granite");
  ASSERT_EQ(load_error(bytes), "");
  std::string error = load_error(without_metadata(file, "granite.logit_scale"));
  EXPECT_TRUE(contains(error, "'granite.logit_scale'")) << error;
  for (const float bad : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    error = load_error(with_metadata(file, "granite.logit_scale", gguf::Value(bad)));
    EXPECT_TRUE(contains(error, "'granite.logit_scale'")) << bad << ": " << error;
  }
  for (const char* key : {"granite.embedding_scale", "granite.residual_scale", "granite.attention.scale"}) {
    error = load_error(with_metadata(file, key, gguf::Value(-2.0f)));
    EXPECT_TRUE(contains(error, std::string("'") + key + "'")) << error;
    EXPECT_EQ(load_error(without_metadata(file, key)), "") << key;  // optional
  }
}

TEST(DenseArchs, GraniteScalesChangeTheLogits) {
  const std::vector<uint8_t> bytes = tiny_model("granite");
  const gguf::File file = gguf::File::parse(bytes, "granite");
  backend::CpuOps ops;
  const auto logits_of = [&](const std::vector<uint8_t>& b) {
    const auto m = model::Model::load(gguf::File::parse(b, "granite"));
    ops.prepare(m->weights());
    return run(*m, ops, 32, 6);
  };
  const std::vector<float> base = logits_of(bytes);
  for (const char* key : {"granite.embedding_scale", "granite.residual_scale", "granite.attention.scale"})
    EXPECT_FALSE(same_bits(base, logits_of(without_metadata(file, key)))) << key;
  // logits * (1 / logit_scale): halving the scale doubles the logits.
  const std::vector<float> doubled = logits_of(with_metadata(file, "granite.logit_scale", gguf::Value(4.0f)));
  for (size_t i = 0; i < base.size(); i += 97) EXPECT_FLOAT_EQ(doubled[i], 2.0f * base[i]) << i;
}

}  // namespace
}  // namespace okapi::test
