// The model framework on the repo's own stories260K.gguf (no shared data needed): KV-cache
// validation (token-by-token decode equals the full-sequence pass), batch sizes and thread counts,
// F16 cache closeness, and the errors for a context that is too small, an unknown architecture
// and missing tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "kv/kv_store.hpp"
#include "backend/cpu_ops.hpp"
#include "model/evaluate.hpp"
#include "model/model.hpp"
#include "support/paths.hpp"
#include "support/cache_types.hpp"

namespace okapi::test {
namespace {

std::filesystem::path stories() { return repo_dir() / "models/stories260K.gguf"; }

std::vector<int32_t> sample_tokens() {
  // " Once upon a time, there was a little girl named Lily." and more, as stories260K ids.
  std::vector<int32_t> t = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426};
  for (int i = 0; i < 24; ++i) t.push_back(static_cast<int32_t>(260 + (i * 37) % 250));
  return t;
}

std::vector<float> run(const model::Model& m, const std::vector<int32_t>& tokens, int64_t batch, int threads,
                       const char* k = "f32", const char* v = "f32") {
  const model::HParams& hp = m.hparams();
  auto kv = kv::make_store({hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, 64}, test::cache_types(k, v), isa());
  ThreadPool pool(threads);
  backend::CpuOps ops(&pool);
  return model::evaluate_all(m, ops, *kv, tokens, batch);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
  return worst;
}

TEST(Stories260K, HyperParametersFromMetadata) {
  const auto m = model::Model::load(gguf::File::open(stories()));
  const model::HParams& hp = m->hparams();
  EXPECT_EQ(hp.arch, "llama");
  EXPECT_EQ(hp.n_embd, 64);
  EXPECT_EQ(hp.n_layer, 5);
  EXPECT_EQ(hp.n_head, 8);
  EXPECT_EQ(hp.n_head_kv, 4);
  EXPECT_EQ(hp.head_dim_k, 8);
  EXPECT_EQ(hp.n_rot, 8);
  EXPECT_EQ(hp.n_vocab, 512);
  EXPECT_EQ(hp.n_ff, 172);
}

// KV-cache validation: decoding one token at a time through the cache reproduces the logits of
// the full-sequence pass at every position (F32 weights, F32 cache).
TEST(Stories260K, IncrementalDecodeEqualsFullSequence) {
  const auto m = model::Model::load(gguf::File::open(stories()));
  const auto tokens = sample_tokens();
  const auto full = run(*m, tokens, 512, 1);
  for (const float x : full) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LE(max_abs_diff(full, run(*m, tokens, 1, 1)), 1e-4);
  EXPECT_LE(max_abs_diff(full, run(*m, tokens, 7, 2)), 1e-4);
  EXPECT_LE(max_abs_diff(full, run(*m, tokens, 512, 2)), 1e-4);
}

TEST(Stories260K, LastRowOnlyMatchesAllRows) {
  const auto m = model::Model::load(gguf::File::open(stories()));
  const auto tokens = sample_tokens();
  const auto full = run(*m, tokens, 512, 1);
  const model::HParams& hp = m->hparams();
  auto kv = kv::make_f32_store({hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, 64}, isa());
  backend::CpuOps ops;
  std::vector<int32_t> positions(tokens.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> last(static_cast<size_t>(hp.n_vocab));
  m->forward(ops, *kv, tokens, positions, model::LogitRows::Last, last.data());
  const std::vector<float> expected(full.end() - hp.n_vocab, full.end());
  EXPECT_LE(max_abs_diff(last, expected), 1e-5);
}

TEST(Stories260K, F16CacheIsClose) {
  const auto m = model::Model::load(gguf::File::open(stories()));
  const auto tokens = sample_tokens();
  const double d = max_abs_diff(run(*m, tokens, 512, 1), run(*m, tokens, 512, 1, "f16", "f16"));
  EXPECT_GT(d, 0.0);   // the cache really rounds
  EXPECT_LE(d, 0.05);  // fp16 rounding of K, V, q and probabilities (~1e-3 relative)
}

TEST(Stories260K, PromptLongerThanContextIsAClearError) {
  const auto m = model::Model::load(gguf::File::open(stories()));
  const model::HParams& hp = m->hparams();
  auto kv = kv::make_f32_store({hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, 8}, isa());
  backend::CpuOps ops;
  const auto tokens = sample_tokens();
  try {
    model::evaluate_all(*m, ops, *kv, tokens, 512);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit the context of 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kv::make_store({1, 1, 8, 8, 4}, test::cache_types("q4_1", "f32"), isa()), Error);
}

// A copy of stories260K with some metadata or tensors changed, for the error paths.
std::vector<uint8_t> modified_copy(const gguf::File& src, const std::string& arch, const std::string& drop_prefix) {
  gguf::Writer w;
  w.copy_metadata(src);
  w.set("general.architecture", arch);
  if (arch != "llama") {
    for (const auto& kv : src.metadata())
      if (kv.key.rfind("llama.", 0) == 0) w.set(arch + kv.key.substr(5), kv.value);
  }
  for (const auto& t : src.tensors())
    if (drop_prefix.empty() || t.name.rfind(drop_prefix, 0) != 0) w.add_tensor_view(t.name, t.type, t.shape, t.bytes());
  return w.to_bytes();
}

// The message of the error that loading `bytes` throws; a test failure when it loads.
std::string load_error(const std::vector<uint8_t>& bytes, const std::string& name) {
  try {
    model::Model::load(gguf::File::parse(bytes, name));
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << name << ": expected an error";
  return {};
}

TEST(Stories260K, UnknownArchitectureListsSupportedOnes) {
  const gguf::File src = gguf::File::open(stories());
  const auto bytes = modified_copy(src, "mamba9", "");
  const std::string msg = load_error(bytes, "mamba9.gguf");
  EXPECT_NE(msg.find("unsupported architecture 'mamba9'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama"), std::string::npos) << msg;
  EXPECT_NE(msg.find("qwen3"), std::string::npos) << msg;
}

TEST(Stories260K, MissingTensorsAreAllNamed) {
  const gguf::File src = gguf::File::open(stories());
  const auto bytes = modified_copy(src, "llama", "blk.3.");
  const std::string msg = load_error(bytes, "cut.gguf");
  for (const char* name : {"blk.3.attn_q.weight", "blk.3.ffn_down.weight", "blk.3.attn_norm.weight"})
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  // qwen2 needs Q/K/V biases, which this llama file lacks.
  const auto qwen2 = modified_copy(src, "qwen2", "");
  const std::string qwen2_msg = load_error(qwen2, "qwen2.gguf");
  EXPECT_NE(qwen2_msg.find("blk.0.attn_q.bias"), std::string::npos) << qwen2_msg;
}

TEST(Stories260K, MissingHyperParameterIsNamed) {
  const gguf::File src = gguf::File::open(stories());
  gguf::Writer w;
  w.copy_metadata(src);
  w.remove("llama.attention.layer_norm_rms_epsilon");
  for (const auto& t : src.tensors()) w.add_tensor_view(t.name, t.type, t.shape, t.bytes());
  const auto bytes = w.to_bytes();
  const std::string msg = load_error(bytes, "noeps.gguf");
  EXPECT_NE(msg.find("llama.attention.layer_norm_rms_epsilon"), std::string::npos) << msg;
}

}  // namespace
}  // namespace okapi::test
