// Embedding models against llama.cpp (../shared/peers/llama-embedding): tiny random-weight models
// of the embedding presets (bert: bge-base, all-MiniLM, bge-reranker; nomic-bert; qwen3 as
// Qwen3-Embedding), several inputs of different lengths run as one forward_sequences_hidden pass
// (one F32 store each), then pooled; each pooled vector within cosine 0.99999 of
// llama-embedding's (--embd-normalize -1: raw vectors), rank scores within 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu_ops.hpp"
#include "core/shared_dir.hpp"
#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "model/model.hpp"
#include "support/cache_types.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "synth/synth.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::test {
namespace {

bool sanitized() {
  const char* v = std::getenv("OKAPI_SANITIZED");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

std::filesystem::path peer_embedding_tool() { return shared_dir() / "peers" / "llama-embedding"; }

using Vectors = std::vector<std::vector<float>>;

// llama-embedding's raw pooled vectors, one per input (the inputs go in as lines of one prompt,
// so the peer too runs them as sequences of one batch).
//
// llama-embedding prints through common_log's worker thread, which it never joins: whatever the
// worker has not printed when main() returns is lost (often the whole output). main() blocks only
// while 512 lines are pending, so filler inputs are appended (their vectors, ~2 n_embd lines each,
// plus json+'s similarity matrix, follow the real ones) and the output is read vector by vector,
// however it ends.
Vectors peer_embeddings(const std::filesystem::path& model, const std::vector<std::string>& inputs,
                        const std::string& pooling, const std::string& extra_flags) {
  constexpr int kFillers = 8;
  std::string prompt;
  for (const std::string& input : inputs) prompt += (prompt.empty() ? "" : "\n") + input;
  for (int i = 0; i < kFillers; ++i) prompt += "\nfiller";
  const std::filesystem::path log = model.parent_path() / (model.stem().string() + ".peer.log");
  const CommandResult r =
      run_command("{ " + shell_quote(peer_embedding_tool().string()) + " -m " + shell_quote(model.string()) + " -p " +
                  shell_quote(prompt) + " --pooling " + pooling +
                  " --embd-normalize -1 --embd-output-format json+ -fa off -t 2 " + extra_flags + " 2>" +
                  shell_quote(log.string()) + "; }");
  if (r.exit_code != 0)
    throw std::runtime_error("llama-embedding failed on " + model.string() + ":\n" + r.output + read_file(log));
  Vectors out;
  constexpr std::string_view kKey = "\"embedding\": [";
  for (size_t at = r.output.find(kKey); at != std::string::npos && out.size() < inputs.size();
       at = r.output.find(kKey, at + 1)) {
    const size_t begin = at + kKey.size() - 1, end = r.output.find(']', begin);
    if (end == std::string::npos) break;
    out.push_back(nlohmann::json::parse(r.output.substr(begin, end + 1 - begin)).get<std::vector<float>>());
  }
  if (out.size() != inputs.size())
    throw std::runtime_error("llama-embedding printed " + std::to_string(out.size()) + " of " +
                             std::to_string(inputs.size()) + " vectors:\n" + r.output + read_file(log));
  return out;
}

struct Okapi {
  explicit Okapi(const std::filesystem::path& path, int threads = 2)
      : tokenizer(tokenizer::Vocab::from_gguf(gguf::File::open(path))),
        model(model::Model::load(gguf::File::open(path))),
        pool(threads),
        ops(&pool) {
    ops.prepare(model->weights());
  }
  std::vector<int32_t> tokens(const std::string& text) const { return tokenizer.encode(text); }

  // Every input's tokens in one forward_sequences_hidden pass (one F32 store each), then pooled.
  Vectors embed(const std::vector<std::vector<int32_t>>& inputs, model::Pooling pooling) {
    const model::HParams& hp = model->hparams();
    std::vector<std::unique_ptr<kv::KvStore>> stores;
    std::vector<kv::KvStore*> per_token;
    std::vector<int32_t> tokens, positions;
    size_t total = 0;
    for (const auto& input : inputs) total += input.size();
    for (const auto& input : inputs) {
      stores.push_back(ops.make_kv(model->kv_shape(static_cast<int64_t>(input.size()), static_cast<int64_t>(total)),
                                   {cache_types("f32", "f32"), kv::ExactScores::Direct}));
      for (size_t i = 0; i < input.size(); ++i) {
        tokens.push_back(input[i]);
        positions.push_back(static_cast<int32_t>(i));
        per_token.push_back(stores.back().get());
      }
    }
    const std::vector<uint8_t> want(tokens.size(), 1);
    std::vector<float> hidden(tokens.size() * static_cast<size_t>(hp.n_embd));
    model->forward_sequences_hidden(ops, per_token, tokens, positions, want, hidden.data());
    Vectors out;
    size_t first = 0;
    for (const auto& input : inputs) {
      std::vector<float> v(static_cast<size_t>(model->pooled_width(pooling)));
      model->pool(ops, pooling, hidden.data() + first * static_cast<size_t>(hp.n_embd),
                  static_cast<int64_t>(input.size()), v.data());
      out.push_back(std::move(v));
      first += input.size();
    }
    return out;
  }

  tokenizer::Tokenizer tokenizer;
  std::unique_ptr<model::Model> model;
  ThreadPool pool;
  backend::CpuOps ops;
};

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

std::vector<std::string> test_inputs() {
  std::vector<std::string> inputs = {"hello world", peer_test_prompt(40), "a",
                                     "The quick brown fox jumps over the lazy dog, twice!"};
  if (sanitized()) inputs.resize(2);
  return inputs;
}

class EncoderPeer : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("encoder-peer"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path write(const synth::Preset& preset, const std::string& name, int64_t n_layer = 2) {
    return write_synth_model(preset, "", "F32", n_layer, dir_ / (name + ".gguf"));
  }

  // okapi's pooled vectors against llama-embedding's for `pooling`: cosine >= 0.99999 each (rank:
  // each score within 1e-4).
  void expect_matches(const std::filesystem::path& path, model::Pooling pooling, const std::string& extra_flags = "") {
    const std::string name(model::pooling_name(pooling));
    SCOPED_TRACE(path.filename().string() + " pooling " + name);
    const std::vector<std::string> inputs = test_inputs();
    const Vectors peer = peer_embeddings(path, inputs, name, extra_flags);
    Okapi okapi(path);
    std::vector<std::vector<int32_t>> tokens;
    for (const std::string& input : inputs) tokens.push_back(okapi.tokens(input));
    const Vectors mine = okapi.embed(tokens, pooling);
    ASSERT_EQ(peer.size(), mine.size());
    for (size_t i = 0; i < mine.size(); ++i) {
      if (pooling == model::Pooling::Rank) {
        // llama-embedding prints n_embd values of which the first rank_outputs() are the scores.
        ASSERT_GE(peer[i].size(), mine[i].size());
        for (size_t k = 0; k < mine[i].size(); ++k) {
          std::printf("  %-32s rank input %zu (%3zu tokens): okapi %.6f llama.cpp %.6f\n",
                      path.filename().string().c_str(), i, tokens[i].size(), mine[i][k], peer[i][k]);
          EXPECT_NEAR(mine[i][k], peer[i][k], 1e-4) << "input " << i;
        }
        continue;
      }
      ASSERT_EQ(peer[i].size(), mine[i].size()) << "input " << i;
      const double c = cosine(mine[i], peer[i]);
      std::printf("  %-32s %-4s input %zu (%3zu tokens): cosine %.9f\n", path.filename().string().c_str(),
                  name.c_str(), i, tokens[i].size(), c);
      EXPECT_GE(c, 0.99999) << "input " << i;
    }
  }

  std::filesystem::path dir_;
};

TEST_F(EncoderPeer, BertClsMeanLast) {
  OKAPI_REQUIRE_DATA(peer_embedding_tool());
  const auto model = write(tiny_preset("bge-base-en-v1.5"), "bge");
  expect_matches(model, model::Pooling::Cls);
  if (sanitized()) return;
  expect_matches(model, model::Pooling::Mean);
  expect_matches(model, model::Pooling::Last);
}

TEST_F(EncoderPeer, BertMiniLmMeanWithRealVocabulary) {
  OKAPI_REQUIRE_DATA(peer_embedding_tool());
  const std::filesystem::path vocab = shared_dir() / "vocab" / "ggml-vocab-bert-bge.gguf";
  OKAPI_REQUIRE_DATA(vocab);
  if (sanitized()) GTEST_SKIP() << "one model per test under the sanitizers (BertClsMeanLast)";
  synth::SynthOptions options;
  options.type = "F32";
  options.layers = 2;
  options.n_threads = 2;
  options.vocab_from = vocab;
  synth::Preset preset = tiny_preset("all-minilm-l6-v2");
  const auto path = dir_ / "minilm.gguf";
  synth::write_synth(preset, options, path);
  expect_matches(path, model::Pooling::Mean);
}

TEST_F(EncoderPeer, BertRerankerRank) {
  OKAPI_REQUIRE_DATA(peer_embedding_tool());
  expect_matches(write(tiny_preset("bge-reranker-base"), "reranker"), model::Pooling::Rank);
}

TEST_F(EncoderPeer, NomicBertMean) {
  OKAPI_REQUIRE_DATA(peer_embedding_tool());
  expect_matches(write(tiny_preset("nomic-embed-text-v1.5"), "nomic"), model::Pooling::Mean);
}

TEST_F(EncoderPeer, Qwen3EmbeddingLastCausal) {
  OKAPI_REQUIRE_DATA(peer_embedding_tool());
  expect_matches(write(tiny_preset("qwen3-embedding-0.6b"), "qwen3-embedding"), model::Pooling::Last,
                 "-ctk f32 -ctv f32");
}

// A Qwen3 reranker: rank pooling scores the last token through cls.output, then a softmax.
TEST_F(EncoderPeer, Qwen3RerankerRankSoftmax) {
  OKAPI_REQUIRE_DATA(peer_embedding_tool());
  if (sanitized()) GTEST_SKIP() << "one model per test under the sanitizers";
  synth::Preset p = tiny_preset("qwen3-embedding-0.6b");
  p.pooling = 4;
  p.cls_outputs = 2;
  expect_matches(write(p, "qwen3-reranker"), model::Pooling::Rank, "-ctk f32 -ctv f32");
}

// gemma3 as a decoder gives hidden states too (llama.cpp's result_norm), causal.
TEST_F(EncoderPeer, Gemma3HiddenStatesMean) {
  OKAPI_REQUIRE_DATA(peer_embedding_tool());
  if (sanitized()) GTEST_SKIP() << "one model per test under the sanitizers";
  synth::Preset p = tiny_preset("gemma3-270m");
  p.sliding_window = 16;
  expect_matches(write(p, "gemma3", 6), model::Pooling::Mean, "-ctk f32 -ctv f32");
}

// gemma3's blocks, non-causal, with a symmetric window of 16 (8 each way) that the longer inputs
// exceed, a global sixth layer, and the dense projections after mean pooling.
TEST_F(EncoderPeer, GemmaEmbeddingMeanSymmetricWindowDense) {
  OKAPI_REQUIRE_DATA(peer_embedding_tool());
  synth::Preset p = tiny_preset("embeddinggemma-300m");
  p.sliding_window = 16;
  p.dense_width = 96;
  // Six layers under the sanitizers too: with every layer windowed (2 layers) llama-embedding
  // aborts (GGML_ASSERT(buffer): it allocates no mask for the global layers it then sets).
  expect_matches(write(p, "gemma-embedding", 6), model::Pooling::Mean);
}

// An input pooled alone gives the same bits as inside a batch of inputs of other lengths.
TEST_F(EncoderPeer, AloneEqualsInBatchBitForBit) {
  for (const char* preset : {"bge-base-en-v1.5", "qwen3-embedding-0.6b"}) {
    SCOPED_TRACE(preset);
    Okapi okapi(write(tiny_preset(preset), "batch"));
    std::vector<std::vector<int32_t>> tokens;
    for (const std::string& input : test_inputs()) tokens.push_back(okapi.tokens(input));
    const model::Pooling pooling = model::Pooling::Mean;
    const Vectors together = okapi.embed(tokens, pooling);
    for (size_t i = 0; i < tokens.size(); ++i) {
      const Vectors alone = okapi.embed({tokens[i]}, pooling);
      EXPECT_EQ(alone[0], together[i]) << "input " << i;
    }
    if (sanitized()) break;
  }
}

}  // namespace
}  // namespace okapi::test
