// okapi synth: shapes per preset, determinism by seed, metadata, read-back, CLI errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "format/gguf.hpp"
#include "kernels/format_table.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"
#include "synth/synth.hpp"
#include "synth/vocab.hpp"
#include "tokenizer/vocab.hpp"

namespace okapi::synth {
namespace {

std::string file_sha256(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return sha256_hex(bytes.data(), bytes.size());
}

std::map<std::string, std::vector<int64_t>> shapes(const std::string& preset, int64_t layers) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& t : plan_tensors(preset_by_name(preset), layers)) out[t.name] = t.shape;
  return out;
}

TEST(SynthPresets, ShapesFollowTheRealConfigs) {
  auto s = shapes("stories15M", 6);
  EXPECT_EQ(s.size(), 3u + 6u * 9u);
  EXPECT_EQ(s["token_embd.weight"], (std::vector<int64_t>{288, 32000}));
  EXPECT_EQ(s["output.weight"], (std::vector<int64_t>{288, 32000}));
  EXPECT_EQ(s["blk.5.ffn_down.weight"], (std::vector<int64_t>{768, 288}));

  s = shapes("smollm2-135m", 30);
  EXPECT_FALSE(s.contains("output.weight"));  // tied
  EXPECT_EQ(s["blk.29.attn_k.weight"], (std::vector<int64_t>{576, 192}));  // 3 kv heads of 64

  s = shapes("qwen2.5-0.5b", 24);
  EXPECT_EQ(s["blk.0.attn_q.bias"], (std::vector<int64_t>{896}));
  EXPECT_EQ(s["blk.0.attn_v.bias"], (std::vector<int64_t>{128}));
  EXPECT_EQ(s["token_embd.weight"], (std::vector<int64_t>{896, 151936}));

  s = shapes("qwen3-0.6b", 28);
  EXPECT_EQ(s["blk.0.attn_q.weight"], (std::vector<int64_t>{1024, 2048}));  // 16 heads x 128
  EXPECT_EQ(s["blk.0.attn_output.weight"], (std::vector<int64_t>{2048, 1024}));
  EXPECT_EQ(s["blk.27.attn_k_norm.weight"], (std::vector<int64_t>{128}));

  s = shapes("gemma3-270m", 18);
  EXPECT_EQ(s["blk.0.attn_q.weight"], (std::vector<int64_t>{640, 1024}));
  EXPECT_EQ(s["blk.0.attn_k.weight"], (std::vector<int64_t>{640, 256}));
  EXPECT_TRUE(s.contains("blk.17.post_ffw_norm.weight"));
  EXPECT_TRUE(s.contains("blk.17.post_attention_norm.weight"));
  EXPECT_EQ(s["token_embd.weight"], (std::vector<int64_t>{640, 262144}));

  s = shapes("tinyllama-1.1b", 22);
  EXPECT_EQ(s["blk.21.attn_v.weight"], (std::vector<int64_t>{2048, 256}));
  EXPECT_EQ(s["blk.0.ffn_gate.weight"], (std::vector<int64_t>{2048, 5632}));

  s = shapes("bitnet-2b-shape", 4);
  EXPECT_EQ(s["blk.3.ffn_sub_norm.weight"], (std::vector<int64_t>{6912}));
  EXPECT_EQ(s["blk.3.attn_sub_norm.weight"], (std::vector<int64_t>{2560}));
  EXPECT_EQ(s["blk.0.attn_k.weight"], (std::vector<int64_t>{2560, 640}));
  EXPECT_FALSE(s.contains("output.weight"));
}

TEST(SynthPresets, UnknownPresetListsTheValidOnes) {
  try {
    preset_by_name("gpt5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen3-0.6b"), std::string::npos);
  }
  EXPECT_EQ(preset_by_name("SmolLM2-135M").n_embd, 576);
}

TEST(SynthValues, StatisticsMatchTheInitialization) {
  TensorPlan w{"w", {512, 256}, Init::Weight, 1.0f / std::sqrt(512.0f)};
  std::vector<float> v(512 * 256);
  fill_values(w, 7, v.data(), 0, static_cast<int64_t>(v.size()));
  double sum = 0, sq = 0;
  for (float x : v) {
    sum += x;
    sq += double(x) * x;
  }
  const double n = static_cast<double>(v.size());
  EXPECT_NEAR(sum / n, 0.0, 0.001);
  EXPECT_NEAR(std::sqrt(sq / n), 1.0 / std::sqrt(512.0), 0.001);
  // Any split gives the same values (thread independence).
  std::vector<float> parts(v.size());
  fill_values(w, 7, parts.data(), 0, 1001);
  fill_values(w, 7, parts.data(), 1001, static_cast<int64_t>(v.size()));
  EXPECT_EQ(parts, v);
  TensorPlan t{"t", {256, 4}, Init::Ternary, 5.0f / 256};
  std::vector<float> tv(1024);
  fill_values(t, 7, tv.data(), 0, 1024);
  int zeros = 0;
  for (float x : tv) {
    EXPECT_TRUE(x == 0.0f || std::fabs(x) == 5.0f / 256);
    zeros += x == 0.0f;
  }
  EXPECT_GT(zeros, 250);
  EXPECT_LT(zeros, 430);
}

TEST(SynthVocab, IsAValidSpmVocabulary) {
  gguf::Writer w;
  set_spm_vocab(w, 1000);
  const auto bytes = w.to_bytes();
  const auto file = gguf::File::parse(bytes);
  auto vocab = tokenizer::Vocab::from_gguf(file);
  EXPECT_EQ(vocab.size(), 1000u);
  EXPECT_EQ(vocab.bos, 1);
  EXPECT_EQ(vocab.eos, 2);
  EXPECT_EQ(vocab.find("<0x0A>"), 3 + 10);
  EXPECT_EQ(vocab.type(3 + 0x41), tokenizer::TokenType::Byte);
}

class SynthFile : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("synth"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(SynthFile, DeterministicBySeedAndThreadCount) {
  SynthOptions o{.preset = "stories15M", .arch = "", .type = "Q8_0", .seed = 11, .layers = 1, .n_threads = 1};
  write_synth(o, dir_ / "a.gguf");
  o.n_threads = 2;
  write_synth(o, dir_ / "b.gguf");
  o.seed = 12;
  write_synth(o, dir_ / "c.gguf");
  EXPECT_EQ(file_sha256(dir_ / "a.gguf"), file_sha256(dir_ / "b.gguf"));
  EXPECT_NE(file_sha256(dir_ / "a.gguf"), file_sha256(dir_ / "c.gguf"));
}

TEST_F(SynthFile, ReadsBackWithMetadataAndTypes) {
  SynthOptions o{.preset = "qwen3-0.6b", .arch = "", .type = "Q4_K_M", .seed = 3, .layers = 1, .vocab = 1024,
                 .n_threads = 2};
  const auto report = write_synth(o, dir_ / "q.gguf");
  EXPECT_EQ(report.n_layer, 1);
  const auto f = gguf::File::open(dir_ / "q.gguf");
  EXPECT_EQ(f.architecture(), "qwen3");
  EXPECT_EQ(f.at("qwen3.block_count").as_int(), 1);
  EXPECT_EQ(f.at("qwen3.embedding_length").as_int(), 1024);
  EXPECT_EQ(f.at("qwen3.attention.head_count_kv").as_int(), 8);
  EXPECT_EQ(f.at("qwen3.attention.key_length").as_int(), 128);
  EXPECT_EQ(f.at("general.file_type").as_int(), 15);
  EXPECT_EQ(f.at("tokenizer.ggml.tokens").as_array().items.size(), 1024u);
  EXPECT_EQ(f.tensor("blk.0.ffn_gate.weight").type, DType::Q4_K);
  EXPECT_EQ(f.tensor("blk.0.attn_q_norm.weight").type, DType::F32);
  EXPECT_EQ(f.tensors().size(), 2u + 11u);
}

// --vocab-from: a real tokenizer (every tokenizer.* key) replaces the made-up one, and the
// vocabulary size follows it.
TEST_F(SynthFile, TakesTheTokenizerOfAVocabularyFile) {
  const auto vocab_file = test::repo_dir() / "tests" / "data" / "vocab" / "ggml-vocab-llama-spm.gguf";
  SynthOptions o{.preset = "stories15M", .arch = "", .type = "Q8_0", .seed = 3, .layers = 1, .vocab_from = vocab_file,
                 .n_threads = 2};
  write_synth(o, dir_ / "v.gguf");
  const auto f = gguf::File::open(dir_ / "v.gguf");
  const auto source = gguf::File::open(vocab_file);
  EXPECT_EQ(f.at("llama.vocab_size").as_int(), 32000);
  EXPECT_EQ(f.at("tokenizer.ggml.tokens").as_string_array(), source.at("tokenizer.ggml.tokens").as_string_array());
  EXPECT_EQ(f.tensor("token_embd.weight").shape[1], 32000);
  o.vocab = 1000;
  EXPECT_THROW(write_synth(o, dir_ / "w.gguf"), Error);
  o.vocab = 0;
  o.vocab_from = dir_ / "v.gguf.missing";
  EXPECT_THROW(write_synth(o, dir_ / "w.gguf"), Error);
}

// IQ2_XXS and the other types whose quantizer needs an importance matrix are written with uniform
// importance (random weights have no activations to weigh), and the file loads and runs.
TEST_F(SynthFile, ImportanceOnlyTypesGetUniformImportance) {
  SynthOptions o{.preset = "qwen3-0.6b", .arch = "", .type = "IQ2_XXS", .seed = 3, .layers = 1, .vocab = 1024,
                 .n_threads = 2};
  write_synth(o, dir_ / "iq2.gguf");
  const auto f = gguf::File::open(dir_ / "iq2.gguf");
  EXPECT_EQ(f.tensor("blk.0.ffn_gate.weight").type, DType::IQ2_XXS);
  const auto& t = f.tensor("blk.0.ffn_gate.weight");
  std::vector<float> values(static_cast<size_t>(t.n_elements()));
  quant::dequantize_tensor(t.type, t.bytes(), t.shape, values.data());
  double sum_sq = 0;
  for (float v : values) sum_sq += static_cast<double>(v) * v;
  EXPECT_GT(sum_sq, 0.0);  // not all zeros: the quantizer really ran
  const test::CommandResult r =
      test::run_cli("run -m " + test::shell_quote((dir_ / "iq2.gguf").string()) + " -p hello -n 4 --temp 0");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(SynthFile, BitnetIsTernaryAndCanBeRenamed) {
  SynthOptions o{.preset = "bitnet-2b-shape", .arch = "bitnet-b1.58", .type = "TQ2_0", .seed = 5, .layers = 1,
                 .vocab = 512, .n_threads = 2};
  write_synth(o, dir_ / "b.gguf");
  const auto f = gguf::File::open(dir_ / "b.gguf");
  EXPECT_EQ(f.architecture(), "bitnet-b1.58");
  EXPECT_EQ(f.at("bitnet-b1.58.vocab_size").as_int(), 512);
  EXPECT_EQ(f.tensor("blk.0.ffn_up.weight").type, DType::TQ2_0);
  o.arch = "qwen2";
  EXPECT_THROW(write_synth(o, dir_ / "x.gguf"), Error);
  o.arch = "";
  o.type = "Q9_9";
  EXPECT_THROW(write_synth(o, dir_ / "x.gguf"), Error);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "x.gguf"));
}

std::string run_cli(const std::string& args, int& rc) {
  const std::string cmd = test::cli_path().string() + " synth " + args + " 2>&1";
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  rc = pclose(pipe);
  return out;
}

TEST_F(SynthFile, CliWritesAndReportsErrors) {
  int rc = 0;
  const std::string out = (dir_ / "s.gguf").string();
  std::string text = run_cli("--preset stories15M --layers 1 --type Q4_0 --seed 2 -o " + out, rc);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_EQ(gguf::File::open(out).at("llama.block_count").as_int(), 1);
  text = run_cli("--preset stories15M --vocab 100 -o " + out, rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(text.find("at least 260"), std::string::npos) << text;
  text = run_cli("--preset nope -o " + out, rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(text.find("tinyllama-1.1b"), std::string::npos) << text;
  text = run_cli("--preset stories15M --arch gemma3 -o " + out, rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(text.find("valid: llama"), std::string::npos) << text;
  text = run_cli("--preset stories15M --type Q7 -o " + out, rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(text.find("Q4_K_M"), std::string::npos) << text;
}

}  // namespace
}  // namespace okapi::synth
