// okapi convert: fidelity to llama.cpp's convert-llama2c-to-ggml (the repo's stories260K.gguf was
// made by it from the repo's stories260K.bin + tok512.bin), the bitnet conversion of the
// bitllama2.c models, and the CLI's behaviour on bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "core/half.hpp"
#include "format/convert_llama2c.hpp"
#include "format/gguf.hpp"
#include "format/llama2c.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi::llama2c {
namespace {

namespace fs = std::filesystem;
using test::run_cli;

fs::path repo_model(const char* name) { return okapi::test::repo_dir() / "models" / name; }
const std::string kBin = repo_model("stories260K.bin").string();
const std::string kTok = repo_model("tok512.bin").string();

// Bitwise equality of two metadata values, arrays included (floats compared by bits).
bool same_value(const gguf::Value& a, const gguf::Value& b) {
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    const auto &x = a.as_array(), &y = b.as_array();
    if (x.element_type != y.element_type || x.items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x.items.size(); ++i) {
      if (!same_value(x.items[i], y.items[i])) return false;
    }
    return true;
  }
  return std::visit(
      [&b](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, gguf::Array>) {
          return false;
        } else if constexpr (std::is_floating_point_v<T>) {
          const T y = std::get<T>(b.data);
          return std::memcmp(&x, &y, sizeof(T)) == 0;
        } else {
          return x == std::get<T>(b.data);
        }
      },
      a.data);
}

std::vector<uint8_t> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

gguf::Writer convert_stories(const Checkpoint& ck, std::optional<uint32_t> context_length) {
  ConvertOptions options;
  options.context_length = context_length;
  return build_gguf(ck, open_tokenizer(kTok), options);
}

// Every tensor bitwise, the whole vocabulary, every metadata value: the only difference from the
// repo's llama.cpp file is llama.context_length (that copy says 2048; llama.cpp writes 128).
TEST(ConvertLlama2c, MatchesLlamaCppConversionOfStories260K) {
  const Checkpoint ck = Checkpoint::open(kBin);
  const std::vector<uint8_t> ours_bytes = convert_stories(ck, kLlamaCppContextLength).to_bytes();
  const gguf::File ours = gguf::File::parse(ours_bytes, "converted");
  const gguf::File ref = gguf::File::open(repo_model("stories260K.gguf"));

  ASSERT_EQ(ours.tensors().size(), ref.tensors().size());
  for (size_t i = 0; i < ref.tensors().size(); ++i) {
    const auto &a = ours.tensors()[i], &b = ref.tensors()[i];
    SCOPED_TRACE(b.name);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.type, b.type);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.offset, b.offset);
    ASSERT_EQ(a.nbytes, b.nbytes);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0);
  }
  ASSERT_EQ(ours.metadata().size(), ref.metadata().size());
  for (size_t i = 0; i < ref.metadata().size(); ++i) {
    const auto &a = ours.metadata()[i], &b = ref.metadata()[i];
    SCOPED_TRACE(b.key);
    EXPECT_EQ(a.key, b.key);  // same keys in the same order
    if (b.key == "llama.context_length") {
      EXPECT_EQ(a.value.as_uint(), 128u);  // llama.cpp's converter default (its n_ctx), not seq_len
      EXPECT_EQ(b.value.as_uint(), 2048u);
    } else {
      EXPECT_TRUE(same_value(a.value, b.value));
    }
  }
  // The vocabulary explicitly: tokens, scores, types, special ids.
  const auto tokens = ours.at("tokenizer.ggml.tokens").as_string_array();
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens, ref.at("tokenizer.ggml.tokens").as_string_array());
  EXPECT_EQ(ours.at("tokenizer.ggml.token_type").as_int_array(), ref.at("tokenizer.ggml.token_type").as_int_array());
  EXPECT_EQ(ours.at("tokenizer.ggml.bos_token_id").as_uint(), 1u);
  EXPECT_EQ(ours.at("tokenizer.ggml.eos_token_id").as_uint(), 2u);
  EXPECT_EQ(ours.at("tokenizer.ggml.unknown_token_id").as_uint(), 0u);
}

TEST(ConvertLlama2c, WithTheSameContextLengthTheFileIsByteIdentical) {
  const Checkpoint ck = Checkpoint::open(kBin);
  const auto ours = convert_stories(ck, 2048).to_bytes();
  const auto ref = read_all(repo_model("stories260K.gguf"));
  ASSERT_EQ(ours.size(), ref.size());
  EXPECT_TRUE(ours == ref);
}

// golden/public/models/stories260K.gguf is the unmodified llama.cpp output (context_length 128).
TEST(ConvertLlama2c, WithLlamaCppsContextLengthOutputIsByteIdenticalToLlamaCppGolden) {
  OKAPI_REQUIRE_SHARED();
  const Checkpoint ck = Checkpoint::open(okapi::shared_dir() / "models" / "stories260K.bin");
  const auto ours = convert_stories(ck, kLlamaCppContextLength).to_bytes();
  const auto golden = read_all(okapi::shared_dir() / "golden" / "public" / "models" / "stories260K.gguf");
  ASSERT_EQ(ours.size(), golden.size());
  EXPECT_TRUE(ours == golden);
}

TEST(ConvertLlama2c, Version1CheckpointGivesTheSameModelAsLegacy) {
  // Re-export stories260K in the "ak42" version 1 layout and convert both.
  const Checkpoint legacy = Checkpoint::open(kBin);
  std::vector<uint8_t> v1(256, 0);
  const uint32_t magic = kMagic;
  const int32_t version = 1;
  std::memcpy(v1.data(), &magic, 4);
  std::memcpy(v1.data() + 4, &version, 4);
  const auto raw = read_all(kBin);
  std::memcpy(v1.data() + 8, raw.data(), 28);
  v1[36] = 1;
  for (Weight w : {Weight::RmsAtt, Weight::RmsFfn, Weight::RmsFinal, Weight::TokenEmbedding, Weight::Wq, Weight::Wk,
                   Weight::Wv, Weight::Wo, Weight::W1, Weight::W2, Weight::W3}) {
    const Section& s = legacy.section(w);
    v1.insert(v1.end(), raw.begin() + static_cast<std::ptrdiff_t>(s.offset),
              raw.begin() + static_cast<std::ptrdiff_t>(s.offset + s.nbytes));
  }
  const Checkpoint ck = Checkpoint::parse(v1, "v1.bin");
  ASSERT_EQ(ck.format(), Format::Version1);
  EXPECT_TRUE(convert_stories(ck, std::nullopt).to_bytes() == convert_stories(legacy, std::nullopt).to_bytes());
}

TEST(ConvertCli, WritesF32AndF16) {
  const fs::path dir = okapi::test::make_temp_dir("convert-cli");
  const fs::path out = dir / "out.gguf";
  auto r = run_cli("convert " + kBin + " --tokenizer " + kTok + " -o " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("48 tensors"), std::string::npos) << r.output;
  EXPECT_EQ(gguf::File::open(out).at("llama.context_length").as_uint(), 512u);  // the checkpoint's seq_len

  const fs::path out16 = dir / "out16.gguf";
  r = run_cli("convert " + kBin + " -t " + kTok + " -o " + out16.string() + " --type f16 --context-length 128");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const gguf::File f32 = gguf::File::open(out), f16 = gguf::File::open(out16);
  EXPECT_EQ(f16.at("llama.context_length").as_uint(), 128u);
  EXPECT_EQ(f16.at("general.file_type").as_uint(), 1u);
  ASSERT_EQ(f16.tensors().size(), 48u);
  for (size_t i = 0; i < f32.tensors().size(); ++i) {
    const auto &a = f32.tensors()[i], &h = f16.tensors()[i];
    SCOPED_TRACE(a.name);
    ASSERT_EQ(h.type, a.shape.size() == 1 ? DType::F32 : DType::F16);
    if (h.type == DType::F32) continue;
    for (int64_t k = 0; k < a.n_elements(); ++k) {
      float v;
      uint16_t bits;
      std::memcpy(&v, a.data + 4 * k, 4);
      std::memcpy(&bits, h.data + 2 * k, 2);
      ASSERT_EQ(bits, fp32_to_fp16(v)) << k;
    }
  }
  fs::remove_all(dir);
}

TEST(ConvertCli, BadInputFailsCleanlyAndLeavesTheOutputAlone) {
  const fs::path dir = okapi::test::make_temp_dir("convert-errors");
  const fs::path out = dir / "out.gguf";
  std::ofstream(out) << "old";
  const auto bin = read_all(kBin);
  const auto tok = read_all(kTok);
  const auto write = [&](const char* name, const std::vector<uint8_t>& bytes, size_t n) {
    const fs::path p = dir / name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n));
    return p.string();
  };
  const std::string truncated = write("truncated.bin", bin, bin.size() - 100);
  std::vector<uint8_t> noise(5000);
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  const std::string garbage = write("garbage.bin", noise, noise.size());
  size_t first_100_tokens = 4;
  for (int i = 0; i < 100; ++i) {
    int32_t len;
    std::memcpy(&len, tok.data() + first_100_tokens + 4, 4);
    first_100_tokens += 8 + static_cast<size_t>(len);
  }
  const std::string small_tok = write("small_tok.bin", tok, first_100_tokens);
  const std::string cut_tok = write("cut_tok.bin", tok, tok.size() - 3);

  struct Case {
    std::string args;
    std::string expected;
    int exit_code = 1;  // 2: a usage error (a flag value out of range)
  };
  const std::string o = " -o " + out.string();
  const Case cases[] = {
      {"convert /nonexistent/model.bin -t " + kTok + o, "/nonexistent/model.bin"},
      {"convert " + truncated + " -t " + kTok + o, "truncated"},
      {"convert " + garbage + " -t " + kTok + o, "llama2.c header field"},
      {"convert " + kBin + " -t " + small_tok + o, "tokenizer has 100 tokens but the checkpoint's vocab_size is 512"},
      {"convert " + kBin + " -t " + cut_tok + o, "truncated"},
      {"convert " + kBin + " -t " + kBin + o, "max_token_length"},
      {"convert " + repo_model("stories260K.gguf").string() + " -t " + kTok + o, "GGUF file"},
      {"convert " + kBin + " -t " + kTok + o + " --type q4_0", "--type: 'q4_0' is not f32 or f16", 2},
      {"convert " + kBin + " -t " + kTok + o + " --context-length 0", "--context-length: '0' is neither", 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.output;
    EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    std::ifstream in(out);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "old");
  }
  // Unwritable output: non-zero exit, nothing created.
  auto r = run_cli("convert " + kBin + " -t " + kTok + " -o " + (dir / "missing-dir" / "out.gguf").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_FALSE(fs::exists(dir / "missing-dir"));
  // Usage errors (CLI11): non-zero.
  EXPECT_NE(run_cli("convert " + kBin + " -t " + kTok).exit_code, 0);
  EXPECT_NE(run_cli("convert " + kBin + o).exit_code, 0);
  // Nothing but the inputs and the untouched output remain (no temp files).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 5);
  fs::remove_all(dir);
}

// bitllama2.c -> bitnet: ternary values exact, q/k rows permuted for NEOX, norms 1/n.
TEST(ConvertLlama2c, ConvertsBitnetModels) {
  OKAPI_REQUIRE_SHARED();
  for (const char* file : {"bitnet-1M-tinystories.bin", "bitnet-3M-tinystories.bin"}) {
    SCOPED_TRACE(file);
    const Checkpoint ck = Checkpoint::open(okapi::shared_dir() / "models" / file);
    const Config& c = ck.config();
    const auto bytes = build_gguf(ck, open_tokenizer(okapi::shared_dir() / "models" / "tok512.bin"), {}).to_bytes();
    const gguf::File g = gguf::File::parse(bytes, file);
    EXPECT_EQ(g.architecture(), "bitnet");
    EXPECT_EQ(g.tensors().size(), 2u + 11u * static_cast<size_t>(c.n_layers));
    EXPECT_EQ(g.at("bitnet.context_length").as_uint(), 512u);
    EXPECT_EQ(g.at("bitnet.attention.layer_norm_rms_epsilon").as_double(), 0.0);
    EXPECT_EQ(g.at("general.name").as_string(), fs::path(file).stem().string());
    EXPECT_EQ(g.find_tensor("output.weight"), nullptr);  // the embedding is the classifier
    const auto floats = [](const gguf::TensorInfo& t) {
      std::vector<float> v(static_cast<size_t>(t.n_elements()));
      std::memcpy(v.data(), t.data, t.nbytes);
      return v;
    };
    EXPECT_TRUE(std::memcmp(g.tensor("token_embd.weight").data, ck.f32_bytes(Weight::TokenEmbedding).data(),
                            ck.f32_bytes(Weight::TokenEmbedding).size()) == 0);
    for (int l = 0; l < c.n_layers; ++l) {
      const auto name = [l](const char* what) { return "blk." + std::to_string(l) + "." + what + ".weight"; };
      const auto constant = [](int64_t n) {
        return std::vector<float>(static_cast<size_t>(n), 1.0f / static_cast<float>(n));
      };
      EXPECT_EQ(floats(g.tensor(name("attn_norm"))), constant(c.dim));
      EXPECT_EQ(floats(g.tensor(name("attn_sub_norm"))), constant(c.dim));
      EXPECT_EQ(floats(g.tensor(name("ffn_sub_norm"))), constant(c.hidden_dim));
      EXPECT_EQ(floats(g.tensor(name("ffn_down"))), ck.values(Weight::W2, l));
      EXPECT_EQ(floats(g.tensor(name("attn_v"))), ck.values(Weight::Wv, l));
      // attn_q row h*hs + i is wq row h*hs + 2i; row h*hs + hs/2 + i is wq row h*hs + 2i + 1.
      const auto q = floats(g.tensor(name("attn_q")));
      const auto wq = ck.values(Weight::Wq, l);
      const int64_t hs = c.head_size(), dim = c.dim;
      for (int64_t row = 0; row < dim; ++row) {
        const int64_t h = row / hs, i = row % hs;
        const int64_t from = h * hs + (i < hs / 2 ? 2 * i : 2 * (i - hs / 2) + 1);
        ASSERT_TRUE(std::equal(q.begin() + row * dim, q.begin() + (row + 1) * dim, wq.begin() + from * dim)) << row;
      }
      const float s = ck.ternary(Weight::Wk, l).scale;
      for (float v : floats(g.tensor(name("attn_k")))) ASSERT_TRUE(v == 0.0f || v == s || v == -s);
    }
  }
}

}  // namespace
}  // namespace okapi::llama2c
