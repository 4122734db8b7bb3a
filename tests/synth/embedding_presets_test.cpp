// okapi synth's embedding presets: tensor shapes and keys as llama.cpp's converters write them, a
// WordPiece vocabulary that tokenizes as BERT's ([CLS] ... [SEP]), and every preset loading as the
// model it claims to be.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "model/model.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "synth/synth.hpp"
#include "synth/vocab.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::synth {
namespace {

std::map<std::string, std::vector<int64_t>> shapes(const std::string& preset, int64_t layers) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& t : plan_tensors(preset_by_name(preset), layers)) out[t.name] = t.shape;
  return out;
}

TEST(EmbeddingPresets, ShapesFollowTheRealConfigs) {
  auto s = shapes("bge-base-en-v1.5", 12);
  EXPECT_EQ(s["token_embd.weight"], (std::vector<int64_t>{768, 30522}));
  EXPECT_EQ(s["token_types.weight"], (std::vector<int64_t>{768, 2}));
  EXPECT_EQ(s["position_embd.weight"], (std::vector<int64_t>{768, 512}));
  EXPECT_EQ(s["blk.11.attn_q.bias"], (std::vector<int64_t>{768}));
  EXPECT_EQ(s["blk.11.ffn_up.weight"], (std::vector<int64_t>{768, 3072}));
  EXPECT_EQ(s["blk.11.layer_output_norm.bias"], (std::vector<int64_t>{768}));
  EXPECT_FALSE(s.contains("output_norm.weight"));
  EXPECT_FALSE(s.contains("cls.weight"));

  s = shapes("bge-reranker-base", 1);
  EXPECT_EQ(s["cls.weight"], (std::vector<int64_t>{768, 768}));
  EXPECT_EQ(s["cls.output.weight"], (std::vector<int64_t>{768, 1}));
  EXPECT_EQ(s["cls.output.bias"], (std::vector<int64_t>{1}));

  s = shapes("all-minilm-l6-v2", 6);
  EXPECT_EQ(s["blk.5.ffn_down.weight"], (std::vector<int64_t>{1536, 384}));

  s = shapes("nomic-embed-text-v1.5", 12);
  EXPECT_EQ(s["blk.0.attn_qkv.weight"], (std::vector<int64_t>{768, 2304}));
  EXPECT_EQ(s["blk.0.ffn_gate.weight"], (std::vector<int64_t>{768, 3072}));
  EXPECT_FALSE(s.contains("position_embd.weight"));
  EXPECT_FALSE(s.contains("blk.0.ffn_up.bias"));

  s = shapes("embeddinggemma-300m", 24);
  EXPECT_EQ(s["blk.0.attn_q.weight"], (std::vector<int64_t>{768, 768}));  // 3 heads of 256
  EXPECT_EQ(s["blk.0.attn_k.weight"], (std::vector<int64_t>{768, 256}));
  EXPECT_EQ(s["dense_2.weight"], (std::vector<int64_t>{768, 3072}));
  EXPECT_EQ(s["dense_3.weight"], (std::vector<int64_t>{3072, 768}));

  s = shapes("qwen3-embedding-0.6b", 28);
  EXPECT_EQ(s["blk.27.attn_k_norm.weight"], (std::vector<int64_t>{128}));
}

TEST(EmbeddingPresets, WordPieceVocabularyTokenizesAsBert) {
  gguf::Writer w;
  set_wordpiece_vocab(w, 1000);
  const auto bytes = w.to_bytes();
  const auto file = gguf::File::parse(bytes);
  EXPECT_EQ(file.at("tokenizer.ggml.model").as_string(), "bert");
  EXPECT_EQ(file.at("tokenizer.ggml.token_type_count").as_int(), 2);
  tokenizer::Tokenizer tok(tokenizer::Vocab::from_gguf(file));
  EXPECT_EQ(tok.vocab().size(), 1000u);
  const std::vector<tokenizer::TokenId> ids = tok.encode("Hello, world! bert-like text.");
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 101);  // [CLS]
  EXPECT_EQ(ids.back(), 102);   // [SEP]
  for (size_t i = 1; i + 1 < ids.size(); ++i) EXPECT_NE(ids[i], 100) << "[UNK] at " << i;  // ASCII is covered
  gguf::Writer small;
  EXPECT_THROW(set_wordpiece_vocab(small, kMinWordPieceVocab - 1), Error);
}

TEST(EmbeddingPresets, EveryPresetLoadsAsItsModel) {
  const auto dir = test::make_temp_dir("embedding-presets");
  struct Expect {
    const char* preset;
    const char* arch;
    model::Pooling pooling;
    bool causal;
  };
  for (const Expect& e : {Expect{"bge-base-en-v1.5", "bert", model::Pooling::Cls, false},
                          Expect{"all-minilm-l6-v2", "bert", model::Pooling::Mean, false},
                          Expect{"bge-reranker-base", "bert", model::Pooling::Rank, false},
                          Expect{"nomic-embed-text-v1.5", "nomic-bert", model::Pooling::Mean, false},
                          Expect{"qwen3-embedding-0.6b", "qwen3", model::Pooling::Last, true},
                          Expect{"embeddinggemma-300m", "gemma-embedding", model::Pooling::Mean, false}}) {
    SCOPED_TRACE(e.preset);
    const auto path = test::write_synth_model(test::tiny_preset(e.preset), "", "F32", 1, dir / "m.gguf");
    const auto m = model::Model::load(gguf::File::open(path));
    EXPECT_EQ(m->hparams().arch, e.arch);
    EXPECT_EQ(m->file_pooling(), e.pooling);
    EXPECT_EQ(m->causal_attention(), e.causal);
    EXPECT_EQ(m->generates_text(), std::string(e.arch) == "qwen3");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace okapi::synth
