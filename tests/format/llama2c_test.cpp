// llama2.c checkpoints and tokenizer.bin: the real stories260K files, synthetic files of every
// format built here byte by byte, and malformed inputs (each must fail with a message naming the
// field / array, never crash).
#include "format/llama2c.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>

#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "format/convert_llama2c.hpp"
#include "format/gguf.hpp"
#include "support/paths.hpp"

namespace okapi::llama2c {
namespace {

namespace fs = std::filesystem;

fs::path repo_model(const char* name) { return okapi::test::repo_dir() / "models" / name; }

// Appends little-endian values; floats count up so every array has distinct, exact values.
struct Bytes {
  std::vector<uint8_t> data;
  float counter = 1.0f;
  std::map<std::string, float> first_value;  // first float of each array
  std::map<std::string, uint64_t> offset_of;

  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    data.insert(data.end(), p, p + sizeof(T));
  }
  void floats(const std::string& name, int64_t n) {
    first_value[name] = counter;
    offset_of[name] = data.size();
    for (int64_t i = 0; i < n; ++i) put(counter++);
  }
  void zeros_to(size_t size) { data.resize(size, 0); }
};

// dim 8, hidden 12, 2 layers, 2 heads, 1 kv head (head 4, kv_dim 4), vocab 6, seq_len 4.
constexpr int32_t kDim = 8, kHidden = 12, kLayers = 2, kHeads = 2, kKvHeads = 1, kVocab = 6, kSeq = 4;
constexpr int32_t kKvDim = 4, kHead = 4;

void put_config(Bytes& b, int32_t vocab) {
  for (int32_t v : {kDim, kHidden, kLayers, kHeads, kKvHeads, vocab, kSeq}) b.put(v);
}

void put_llama_layers(Bytes& b) {
  b.floats("wq", int64_t{kLayers} * kDim * kDim);
  b.floats("wk", int64_t{kLayers} * kKvDim * kDim);
  b.floats("wv", int64_t{kLayers} * kKvDim * kDim);
  b.floats("wo", int64_t{kLayers} * kDim * kDim);
}

Bytes legacy_file(bool shared) {
  Bytes b;
  put_config(b, shared ? kVocab : -kVocab);
  b.floats("token_embedding_table", int64_t{kVocab} * kDim);
  b.floats("rms_att_weight", int64_t{kLayers} * kDim);
  put_llama_layers(b);
  b.floats("rms_ffn_weight", int64_t{kLayers} * kDim);
  b.floats("w1", int64_t{kLayers} * kHidden * kDim);
  b.floats("w2", int64_t{kLayers} * kDim * kHidden);
  b.floats("w3", int64_t{kLayers} * kHidden * kDim);
  b.floats("rms_final_weight", kDim);
  b.floats("freq_cis_real", int64_t{kSeq} * kHead / 2);
  b.floats("freq_cis_imag", int64_t{kSeq} * kHead / 2);
  if (!shared) b.floats("wcls", int64_t{kVocab} * kDim);
  return b;
}

void put_ak42_header(Bytes& b, int32_t version, uint8_t shared) {
  b.put(kMagic);
  b.put(version);
  put_config(b, kVocab);
  b.put(shared);
  b.zeros_to(256);
}

Bytes version1_file(bool shared) {
  Bytes b;
  put_ak42_header(b, 1, shared ? 1 : 0);
  b.floats("rms_att_weight", int64_t{kLayers} * kDim);
  b.floats("rms_ffn_weight", int64_t{kLayers} * kDim);
  b.floats("rms_final_weight", kDim);
  b.floats("token_embedding_table", int64_t{kVocab} * kDim);
  put_llama_layers(b);
  b.floats("w1", int64_t{kLayers} * kHidden * kDim);
  b.floats("w2", int64_t{kLayers} * kDim * kHidden);
  b.floats("w3", int64_t{kLayers} * kHidden * kDim);
  if (!shared) b.floats("wcls", int64_t{kVocab} * kDim);
  return b;
}

// The ternary value of weight k of matrix `m` in layer `l`, as a code 0 / +1 / -1.
int ternary_of(int m, int l, int64_t k) { return static_cast<int>((k + m + l) % 3) - 1; }

// bitllama2.c layout: final norm, embedding, then per matrix kind, per layer: scale + 2-bit codes.
Bytes bitnet_file() {
  Bytes b;
  put_ak42_header(b, 1, 1);
  b.floats("rms_final_weight", kDim);
  b.floats("token_embedding_table", int64_t{kVocab} * kDim);
  const int64_t shapes[7][2] = {{kDim, kDim}, {kKvDim, kDim}, {kKvDim, kDim}, {kDim, kDim},
                                {kHidden, kDim}, {kDim, kHidden}, {kHidden, kDim}};
  for (int m = 0; m < 7; ++m) {
    for (int l = 0; l < kLayers; ++l) {
      b.put(0.5f + static_cast<float>(m + l));
      const int64_t n = shapes[m][0] * shapes[m][1];
      for (int64_t k = 0; k < n; k += 4) {
        uint8_t byte = 0;
        for (int64_t j = 0; j < 4; ++j) {
          const int t = ternary_of(m, l, k + j);
          const uint8_t code = t == 0 ? 0 : (t > 0 ? 1 : 3);
          byte = static_cast<uint8_t>(byte | (code << (6 - 2 * j)));
        }
        b.put(byte);
      }
    }
  }
  return b;
}

// Expects parse(bytes) to throw an okapi::Error whose message contains every piece.
template <typename Parse>
void expect_error(Parse parse, const std::vector<uint8_t>& bytes, std::initializer_list<std::string_view> pieces) {
  try {
    (void)parse(bytes);
    ADD_FAILURE() << "parsed without error";
  } catch (const Error& e) {
    for (auto piece : pieces) EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
  }
}

void expect_parse_error(const std::vector<uint8_t>& bytes, std::initializer_list<std::string_view> pieces) {
  expect_error([](const std::vector<uint8_t>& b) { return Checkpoint::parse(b, "test.bin"); }, bytes, pieces);
}

void expect_tokenizer_error(const std::vector<uint8_t>& bytes, std::initializer_list<std::string_view> pieces) {
  expect_error([](const std::vector<uint8_t>& b) { return read_tokenizer(b, "tok.bin"); }, bytes, pieces);
}

std::vector<uint8_t> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Llama2cCheckpoint, ReadsStories260K) {
  const Checkpoint ck = Checkpoint::open(repo_model("stories260K.bin"));
  EXPECT_EQ(ck.format(), Format::Legacy);
  const Config& c = ck.config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(ck.find(Weight::Wcls), nullptr);
  ASSERT_EQ(ck.sections().size(), 13u);
  EXPECT_EQ(ck.section(Weight::TokenEmbedding).offset, 28u);
  EXPECT_EQ(ck.section(Weight::TokenEmbedding).nbytes, 512u * 64 * 4);
  EXPECT_EQ(ck.section(Weight::FreqCisReal).nbytes, 512u * 4 * 4);  // seq_len * head_size/2 floats
  const Section& last = ck.sections().back();
  EXPECT_EQ(last.offset + last.nbytes, ck.file_size());
  EXPECT_EQ(ck.layer_shape(Weight::Wk), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(ck.f32_bytes(Weight::W2, 4).size(), 64u * 172 * 4);
  // Views, not copies.
  const auto whole = ck.f32_bytes(Weight::W2, 0);
  EXPECT_EQ(ck.f32_bytes(Weight::W2, 1).data(), whole.data() + whole.size());
  EXPECT_THROW((void)ck.f32_bytes(Weight::W2, 5), Error);
  EXPECT_THROW((void)ck.ternary(Weight::Wq, 0), Error);
}

TEST(Llama2cCheckpoint, ReadsSyntheticLegacyFiles) {
  for (bool shared : {true, false}) {
    SCOPED_TRACE(shared);
    const Bytes b = legacy_file(shared);
    const Checkpoint ck = Checkpoint::parse(b.data);
    EXPECT_EQ(ck.format(), Format::Legacy);
    EXPECT_EQ(ck.config().vocab_size, kVocab);
    EXPECT_EQ(ck.config().shared_classifier, shared);
    EXPECT_EQ(ck.find(Weight::Wcls) != nullptr, !shared);
    for (const Section& s : ck.sections()) {
      const std::string name(weight_name(s.weight));
      EXPECT_EQ(s.offset, b.offset_of.at(name)) << name;
      const auto v = ck.values(s.weight, s.per_layer ? 1 : -1);
      const int64_t per_layer = s.per_layer ? static_cast<int64_t>(v.size()) : 0;
      EXPECT_EQ(v.front(), b.first_value.at(name) + static_cast<float>(per_layer)) << name;
    }
  }
}

TEST(Llama2cCheckpoint, ReadsSyntheticVersion1Files) {
  for (bool shared : {true, false}) {
    SCOPED_TRACE(shared);
    const Bytes b = version1_file(shared);
    const Checkpoint ck = Checkpoint::parse(b.data);
    EXPECT_EQ(ck.format(), Format::Version1);
    EXPECT_EQ(ck.header_bytes(), 256u);
    EXPECT_EQ(ck.config().shared_classifier, shared);
    EXPECT_EQ(ck.find(Weight::FreqCisReal), nullptr);
    for (const Section& s : ck.sections()) {
      const std::string name(weight_name(s.weight));
      EXPECT_EQ(s.offset, b.offset_of.at(name)) << name;
      EXPECT_EQ(ck.values(s.weight, s.per_layer ? 0 : -1).front(), b.first_value.at(name)) << name;
    }
  }
}

TEST(Llama2cCheckpoint, ReadsSyntheticBitnetFile) {
  const Bytes b = bitnet_file();
  const Checkpoint ck = Checkpoint::parse(b.data);
  EXPECT_EQ(ck.format(), Format::BitNet);
  EXPECT_EQ(ck.section(Weight::RmsFinal).offset, 256u);
  EXPECT_EQ(ck.find(Weight::RmsAtt), nullptr);
  const Weight kinds[7] = {Weight::Wq, Weight::Wk, Weight::Wv, Weight::Wo, Weight::W1, Weight::W2, Weight::W3};
  for (int m = 0; m < 7; ++m) {
    for (int l = 0; l < kLayers; ++l) {
      const TernaryMatrix t = ck.ternary(kinds[m], l);
      const float scale = 0.5f + static_cast<float>(m + l);
      EXPECT_EQ(t.scale, scale);
      const auto v = ck.values(kinds[m], l);
      ASSERT_EQ(static_cast<int64_t>(v.size()), t.rows * t.cols);
      for (size_t k = 0; k < v.size(); ++k) {
        const int code = ternary_of(m, l, static_cast<int64_t>(k));
        ASSERT_EQ(v[k], scale * static_cast<float>(code)) << m << " " << l << " " << k;
      }
    }
  }
  EXPECT_THROW((void)ck.f32_bytes(Weight::Wq, 0), Error);
}

TEST(Llama2cCheckpoint, RejectsInvalidTernaryCodeAndScale) {
  Bytes b = bitnet_file();
  const Checkpoint ok = Checkpoint::parse(b.data);
  const TernaryMatrix wk1 = ok.ternary(Weight::Wk, 1);
  const uint64_t at = wk1.codes_offset + 3;
  b.data[at] = 0x80;  // first code of that byte: 0b10
  const Checkpoint bad = Checkpoint::parse(b.data);
  try {
    (void)bad.values(Weight::Wk, 1);
    ADD_FAILURE() << "decoded an invalid code";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0b10"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(at)), std::string::npos) << e.what();
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(b.data.data() + wk1.codes_offset - 4, &nan, 4);
  EXPECT_THROW((void)Checkpoint::parse(b.data).values(Weight::Wk, 1), Error);
}

TEST(Llama2cCheckpoint, RejectsBadHeaders) {
  const Bytes good = legacy_file(true);
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int field = 0; field < 7; ++field) {
    for (int32_t value : {0, -3, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}) {
      if (field == 5 && value == -3) continue;  // a negative vocab_size is the unshared flag
      SCOPED_TRACE(::testing::Message() << names[field] << " = " << value);
      std::vector<uint8_t> bytes = good.data;
      std::memcpy(bytes.data() + 4 * field, &value, 4);
      expect_parse_error(bytes, {names[field], "offset " + std::to_string(4 * field), std::to_string(value)});
    }
  }
  auto with = [&](int field, int32_t value) {
    std::vector<uint8_t> bytes = good.data;
    std::memcpy(bytes.data() + 4 * field, &value, 4);
    return bytes;
  };
  expect_parse_error(with(3, 3), {"n_heads 3", "does not divide dim 8"});
  expect_parse_error(with(4, 3), {"n_kv_heads 3", "does not divide n_heads 2"});
  expect_parse_error(with(3, 8), {"must be even"});  // head size 1
}

TEST(Llama2cCheckpoint, RejectsTruncatedAndPaddedFiles) {
  const auto bytes = read_all(repo_model("stories260K.bin"));
  for (size_t cut : {size_t{0}, size_t{3}, size_t{27}, size_t{28}, size_t{1000}, bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE(cut);
    const std::vector<uint8_t> head(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    if (cut < 28) {
      expect_parse_error(head, {"shorter than the 28-byte"});
    } else {
      expect_parse_error(head, {"should be 1056540 bytes", "truncated"});
    }
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  expect_parse_error(longer, {"1 unexpected bytes", "1056540"});
  // A header claiming a huge model: the size check fails cleanly, without allocating.
  std::vector<uint8_t> huge = bytes;
  const int32_t big = 1 << 20;
  for (int field : {0, 1}) std::memcpy(huge.data() + 4 * field, &big, 4);
  expect_parse_error(huge, {"should be", "truncated"});
}

TEST(Llama2cCheckpoint, RejectsOtherVersionsAndFormats) {
  Bytes v2;
  put_ak42_header(v2, 2, 1);
  expect_parse_error(v2.data, {"version 2", "not supported"});
  Bytes v9;
  put_ak42_header(v9, 9, 1);
  expect_parse_error(v9.data, {"unknown", "version 9"});
  Bytes short_ak42;
  put_ak42_header(short_ak42, 1, 1);
  short_ak42.data.resize(100);
  expect_parse_error(short_ak42.data, {"shorter than its 256-byte header"});
  Bytes bad_flag = version1_file(true);
  bad_flag.data[36] = 7;
  expect_parse_error(bad_flag.data, {"shared_classifier", "offset 36", "7"});
  // ak42 v1 whose size fits neither the fp32 nor the ternary layout.
  Bytes odd = version1_file(true);
  odd.data.resize(odd.data.size() - 4);
  expect_parse_error(odd.data, {"llama2.c fp32", "bitllama2.c ternary"});
  expect_parse_error(read_all(repo_model("stories260K.gguf")), {"GGUF"});
}

// Random header corruption: either a clean okapi::Error or a checkpoint whose every array can be
// read within bounds (run under the sanitizer build to catch out-of-bounds reads).
TEST(Llama2cCheckpoint, SurvivesRandomHeaderCorruption) {
  uint64_t state = 0x9E3779B97F4A7C15ull;
  const auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  size_t parsed = 0, rejected = 0;
  for (const Bytes& original : {legacy_file(true), legacy_file(false), version1_file(true), bitnet_file()}) {
    for (int round = 0; round < 300; ++round) {
      std::vector<uint8_t> bytes = original.data;
      const int flips = 1 + static_cast<int>(next() % 3);
      for (int f = 0; f < flips; ++f) bytes[next() % 40] = static_cast<uint8_t>(next());
      try {
        const Checkpoint ck = Checkpoint::parse(bytes);
        for (const Section& s : ck.sections()) {
          try {
            (void)ck.values(s.weight, s.per_layer ? ck.config().n_layers - 1 : -1);
          } catch (const Error&) {
            // an invalid ternary code after corruption is a legitimate refusal
          }
        }
        ++parsed;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(parsed, 0u);  // flips in padding / unused bytes keep the file valid
}

TEST(Llama2cTokenizer, ReadsTok512) {
  const Tokenizer t = open_tokenizer(repo_model("tok512.bin"));
  EXPECT_EQ(t.max_token_length, 7u);
  ASSERT_EQ(t.tokens.size(), 512u);
  EXPECT_EQ(t.tokens[0].text, "<unk>");
  EXPECT_EQ(t.tokens[1].text, "\n<s>\n");  // llama2.c's export spells the specials this way
  EXPECT_EQ(t.tokens[3].text, "<0x00>");
  EXPECT_EQ(t.tokens[0].offset, 4u);
  size_t with_space = 0;
  for (const Token& token : t.tokens) {
    EXPECT_LE(token.text.size(), 7u);
    with_space += token.text.find(' ') != std::string::npos;
  }
  EXPECT_EQ(with_space, 91u);
  EXPECT_NO_THROW(check_vocab_size(t, 512));
  try {
    check_vocab_size(t, 32000);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("512 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("32000"), std::string::npos) << e.what();
  }
}

TEST(Llama2cTokenizer, RejectsMalformedFiles) {
  const auto good = read_all(repo_model("tok512.bin"));
  // Every cut inside the first records and at the end is a truncation, never a crash.
  for (size_t cut = 0; cut < 64; ++cut) {
    const std::vector<uint8_t> head(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut));
    const bool on_boundary = cut == 17 || cut == 30 || cut == 44 || cut == 58;  // after whole records
    if (cut == 4) {
      expect_tokenizer_error(head, {"no tokens"});
    } else if (!on_boundary) {
      SCOPED_TRACE(cut);
      expect_tokenizer_error(head, {cut < 4 ? "shorter than its 4-byte" : "truncated"});
    }
  }
  const std::vector<uint8_t> minus_one(good.begin(), good.end() - 1);
  expect_tokenizer_error(minus_one, {"token 511", "truncated"});
  auto patched = [&](size_t at, int32_t value) {
    std::vector<uint8_t> bytes = good;
    std::memcpy(bytes.data() + at, &value, 4);
    return bytes;
  };
  expect_tokenizer_error(patched(0, 0), {"max_token_length", "offset 0"});
  expect_tokenizer_error(patched(8, -1), {"token 0", "offset 8", "negative"});
  expect_tokenizer_error(patched(8, 9), {"token 0", "longer than max_token_length 7"});
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> bad_score = good;
  std::memcpy(bad_score.data() + 4, &inf, 4);
  expect_tokenizer_error(bad_score, {"token 0 score", "not a finite"});
}

TEST(Llama2cTokenizer, GgufVocabularyFollowsLlamaCpp) {
  Tokenizer t;
  t.max_token_length = 8;
  for (const char* text : {"x", "\n<s>\n", "\n</s>\n", "<0x0A>", "", " the", "<0xZZ>", "<0x +f", "a b ", "<0x"}) {
    t.tokens.push_back(Token{text, 0.5f, 0});
  }
  const auto v = gguf_vocabulary(t);
  ASSERT_EQ(v.size(), 10u);
  EXPECT_EQ(v[0].text, "<unk>");
  EXPECT_EQ(v[0].type, TokenType::Unknown);
  EXPECT_EQ(v[1].text, "<s>");
  EXPECT_EQ(v[1].type, TokenType::Control);
  EXPECT_EQ(v[2].text, "</s>");
  EXPECT_EQ(v[2].type, TokenType::Control);
  EXPECT_EQ(v[3].type, TokenType::Byte);
  EXPECT_EQ(v[4].type, TokenType::Control);  // empty
  EXPECT_EQ(v[5].text, "\xe2\x96\x81the");
  EXPECT_EQ(v[5].type, TokenType::Normal);
  EXPECT_EQ(v[6].type, TokenType::Normal);
  EXPECT_EQ(v[7].type, TokenType::Byte);  // sscanf skips white space and takes a sign
  EXPECT_EQ(v[8].text, "a\xe2\x96\x81" "b\xe2\x96\x81");
  EXPECT_EQ(v[9].type, TokenType::Normal);
  EXPECT_EQ(v[5].score, 0.5f);
}

// Interleaved RoPE (llama2.c: pairs 2i, 2i+1) on W x must give the same q.k as NEOX RoPE
// (pairs i, i + hs/2) on the permuted W x.
TEST(Llama2cConvert, NeoxPermutationPreservesRopeDotProducts) {
  const int64_t hs = 8, heads = 2, rows = hs * heads;
  std::vector<float> q(rows), k(rows);
  for (int64_t i = 0; i < rows; ++i) {
    q[i] = std::sin(static_cast<float>(i) * 1.3f + 0.2f);
    k[i] = std::cos(static_cast<float>(i) * 0.7f - 0.4f);
  }
  // n_cols 1: each "row" is one element, so permuting rows permutes the vector.
  const auto qp = permute_for_neox(q, rows, 1, hs);
  const auto kp = permute_for_neox(k, rows, 1, hs);
  for (int pos : {0, 1, 5, 17}) {
    auto rope = [&](std::vector<float> v, bool neox) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < hs / 2; ++i) {
          const double theta = pos * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(hs));
          const int64_t a = h * hs + (neox ? i : 2 * i), b = h * hs + (neox ? i + hs / 2 : 2 * i + 1);
          const double x = v[a], y = v[b];
          v[a] = static_cast<float>(x * std::cos(theta) - y * std::sin(theta));
          v[b] = static_cast<float>(x * std::sin(theta) + y * std::cos(theta));
        }
      }
      return v;
    };
    const auto qi = rope(q, false), ki = rope(k, false), qn = rope(qp, true), kn = rope(kp, true);
    for (int64_t h = 0; h < heads; ++h) {
      double interleaved = 0, neox = 0;
      for (int64_t i = h * hs; i < (h + 1) * hs; ++i) {
        interleaved += double{qi[i]} * ki[i];
        neox += double{qn[i]} * kn[i];
      }
      EXPECT_NEAR(interleaved, neox, 1e-5) << "pos " << pos << " head " << h;
    }
  }
  EXPECT_THROW((void)permute_for_neox(q, rows, 1, 3), Error);
}

TEST(Llama2cConvert, UnsharedClassifierBecomesOutputWeight) {
  Tokenizer tok;
  tok.max_token_length = 4;
  for (const char* text : {"<unk>", "<s>", "</s>", "a", " b", "c"}) tok.tokens.push_back(Token{text, -1.0f, 0});
  for (bool legacy : {true, false}) {
    SCOPED_TRACE(legacy);
    const Bytes b = legacy ? legacy_file(false) : version1_file(false);
    const Checkpoint ck = Checkpoint::parse(b.data);
    const auto bytes = build_gguf(ck, tok, {}).to_bytes();
    const gguf::File g = gguf::File::parse(bytes);
    EXPECT_EQ(g.architecture(), "llama");
    EXPECT_EQ(g.tensors().size(), 3u + 9u * kLayers);
    const auto first = [&](const char* name) {
      float v;
      std::memcpy(&v, g.tensor(name).data, 4);
      return v;
    };
    EXPECT_EQ(first("output.weight"), b.first_value.at("wcls"));
    EXPECT_EQ(first("token_embd.weight"), b.first_value.at("token_embedding_table"));
    EXPECT_EQ(first("blk.1.attn_k.weight"), b.first_value.at("wk") + kKvDim * kDim);
    EXPECT_EQ(first("blk.1.ffn_norm.weight"), b.first_value.at("rms_ffn_weight") + kDim);
    EXPECT_EQ(g.tensor("blk.0.attn_k.weight").shape, (std::vector<int64_t>{kDim, kKvDim}));
    EXPECT_EQ(g.tensor("blk.0.ffn_down.weight").shape, (std::vector<int64_t>{kHidden, kDim}));
    EXPECT_EQ(g.tensor("output.weight").shape, (std::vector<int64_t>{kDim, kVocab}));
    EXPECT_EQ(g.at("llama.rope.dimension_count").as_uint(), static_cast<uint64_t>(kHead));
    EXPECT_EQ(g.at("llama.attention.head_count_kv").as_uint(), static_cast<uint64_t>(kKvHeads));
    EXPECT_EQ(g.at("tokenizer.ggml.tokens").as_string_array()[4], "\xe2\x96\x81" "b");
  }
  tok.tokens.pop_back();
  EXPECT_THROW((void)build_gguf(Checkpoint::parse(legacy_file(true).data), tok, {}), Error);
}

TEST(Llama2cDescribe, DescribesCheckpointsAndTokenizers) {
  const Description d = describe_file(repo_model("stories260K.bin"));
  EXPECT_NE(d.kind.find("legacy"), std::string::npos);
  EXPECT_EQ(d.file_size, 1056540u);
  ASSERT_EQ(d.fields.size(), 7u);
  EXPECT_EQ(d.fields[3].name, "n_heads");
  EXPECT_EQ(d.fields[3].value, 8);
  EXPECT_EQ(d.fields[3].offset, 12u);
  ASSERT_EQ(d.entries.size(), 13u);
  EXPECT_EQ(d.entries[2].name, "wq");
  EXPECT_EQ(d.entries[2].shape, (std::vector<int64_t>{5, 64, 64}));
  EXPECT_EQ(d.entries[2].offset, 28u + 512 * 64 * 4 + 5 * 64 * 4);

  const Description t = describe_file(repo_model("tok512.bin"));
  EXPECT_EQ(t.kind, "llama2.c tokenizer");
  EXPECT_EQ(t.fields[1].name, "n_tokens");
  EXPECT_EQ(t.fields[1].value, 512);
  EXPECT_EQ(t.entries.size(), 512u);
  EXPECT_EQ(t.entries[0].name, "<unk>");
  EXPECT_EQ(t.entries[0].nbytes, 13u);

  const Description v = describe(Checkpoint::parse(version1_file(false).data));
  EXPECT_EQ(v.fields.front().name, "magic");
  EXPECT_EQ(v.fields.back().name, "shared_classifier");
  EXPECT_EQ(v.fields.back().value, 0);
  EXPECT_EQ(v.entries.back().name, "wcls");

  const fs::path dir = okapi::test::make_temp_dir("llama2c-describe");
  const fs::path garbage = dir / "garbage.bin";
  std::ofstream(garbage, std::ios::binary) << "this is not a model at all, just some text";
  try {
    (void)describe_file(garbage);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Llama2cCheckpoint, ReadsSharedBitnetModels) {
  OKAPI_REQUIRE_SHARED();
  struct Expected {
    const char* file;
    int32_t dim;
    float wq0_scale;
  };
  for (const Expected& e : {Expected{"bitnet-1M-tinystories.bin", 128, 0.766062f},
                            Expected{"bitnet-3M-tinystories.bin", 256, 0.0f}}) {
    SCOPED_TRACE(e.file);
    const Checkpoint ck = Checkpoint::open(okapi::shared_dir() / "models" / e.file);
    EXPECT_EQ(ck.format(), Format::BitNet);
    const Config& c = ck.config();
    EXPECT_EQ(c.dim, e.dim);
    EXPECT_EQ(c.hidden_dim, 256);
    EXPECT_EQ(c.n_layers, 8);
    EXPECT_EQ(c.n_heads, 8);
    EXPECT_EQ(c.n_kv_heads, 4);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.seq_len, 512);
    if (e.wq0_scale != 0.0f) {
      EXPECT_NEAR(ck.ternary(Weight::Wq, 0).scale, e.wq0_scale, 1e-5);
    }
    // Every matrix decodes (no 0b10 codes), and each holds all three values.
    for (Weight w : {Weight::Wq, Weight::Wk, Weight::Wv, Weight::Wo, Weight::W1, Weight::W2, Weight::W3}) {
      for (int l = 0; l < c.n_layers; ++l) {
        const float s = ck.ternary(w, l).scale;
        EXPECT_GT(s, 0.0f);
        size_t counts[3] = {0, 0, 0};
        for (float v : ck.values(w, l)) counts[v == 0.0f ? 1 : (v > 0 ? 2 : 0)] += 1;
        EXPECT_GT(counts[0] * counts[1] * counts[2], 0u) << weight_name(w) << " " << l;
      }
    }
  }
}

}  // namespace
}  // namespace okapi::llama2c
