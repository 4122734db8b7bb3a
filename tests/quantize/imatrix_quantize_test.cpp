// okapi quantize with importance matrices against llama-quantize (../shared/peers): the per-tensor
// types of every IQ mix and of K mixes with an imatrix on synthetic models whose rows fit the
// i-quants (n_embd 256), whose rows force fallbacks, with grouped-query attention and with eight
// experts; whole files byte-identical to llama-quantize's with the same importance matrix; and
// the refusals (importance matrix required, --include/--exclude-weights together, bad
// --tensor-type, malformed imatrix files, requantizing).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "kernels/format_table.hpp"
#include "quantize/mix.hpp"
#include "quantize/model_quantizer.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "support/peer_quantize.hpp"

namespace okapi::quantize {
namespace {

namespace fs = std::filesystem;

// A synthetic model and llama-imatrix's importance matrix for it.
struct PeerModel {
  fs::path model;
  fs::path imatrix;
};

synth::Preset wide_preset(std::string_view name, int64_t n_ff, int64_t n_head_kv) {
  synth::Preset p = test::tiny_preset(name);
  p.n_embd = 256;
  p.n_head = 8;
  p.n_head_kv = n_head_kv;
  if (p.head_dim > 0) p.head_dim = 32;
  p.n_ff = n_ff;
  if (p.n_ff_exp > 0) p.n_ff_exp = n_ff;
  return p;
}

// One directory for the whole run (the models and peer outputs are shared by the test suites),
// removed at the end.
fs::path& shared_dir() {
  static fs::path dir;
  return dir;
}

class RemoveSharedDir : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!shared_dir().empty()) fs::remove_all(shared_dir());
  }
};
::testing::Environment* const kRemoveSharedDir = ::testing::AddGlobalTestEnvironment(new RemoveSharedDir);

class ImatrixQuantizeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (shared_dir().empty()) shared_dir() = test::make_temp_dir("imatrix-quantize");
    dir_ = shared_dir();
  }

  // Made once per test suite and kept: llama-imatrix runs are the expensive part.
  static const PeerModel& model(const std::string& name) {
    static std::map<std::string, PeerModel> models;
    if (const auto it = models.find(name); it != models.end()) return it->second;
    synth::Preset preset;
    int64_t n_layer = 8;
    if (name == "llama") {
      preset = wide_preset("tinyllama-1.1b", 512, 8);  // no GQA, 8 layers: the n_layer / 8 rules bite
    } else if (name == "llama-gqa") {
      preset = wide_preset("tinyllama-1.1b", 512, 2);  // n_gqa 4
      n_layer = 4;
    } else if (name == "llama-fallback") {
      preset = wide_preset("tinyllama-1.1b", 320, 8);  // ffn_down rows of 320: 32-blocks only
      n_layer = 4;
    } else if (name == "mixtral") {
      preset = wide_preset("mixtral-8x7b", 256, 2);  // 8 experts
      n_layer = 4;
    } else if (name == "qwen3moe") {
      preset = wide_preset("qwen3-30b-a3b", 256, 2);
      preset.n_expert = 4;
      preset.n_expert_used = 2;
      n_layer = 2;
    } else {
      throw Error("unknown test model " + name);
    }
    PeerModel m;
    m.model = test::write_synth_model(preset, "", "F32", n_layer, dir_ / (name + "-F32.gguf"));
    m.imatrix = dir_ / (name + ".imatrix.gguf");
    test::peer_imatrix(m.model, test::write_calibration_text(dir_ / "calibration.txt", 600), m.imatrix, 64);
    return models.emplace(name, m).first->second;
  }

  static std::map<std::string, DType> types_of(const fs::path& file) {
    std::map<std::string, DType> out;
    const gguf::File f = gguf::File::open(file);
    for (const auto& t : f.tensors()) out[t.name] = t.type;
    return out;
  }

  // okapi's choice for every tensor of `input` in `mix`.
  static std::map<std::string, DType> okapi_types(const fs::path& input, const std::string& mix, bool imatrix) {
    const gguf::File f = gguf::File::open(input);
    std::vector<TensorDesc> descs;
    for (const auto& t : f.tensors()) descs.push_back(TensorDesc{t.name, t.type, t.shape});
    MixOptions options;
    options.file_type = mix_by_name(mix).file_type;
    options.has_imatrix = imatrix;
    const auto choices = choose_tensor_types(model_facts(f), descs, options);
    std::map<std::string, DType> out;
    for (size_t i = 0; i < descs.size(); ++i) out[descs[i].name] = choices[i].type;
    return out;
  }

  static void expect_same_types(const std::string& model_name, const std::string& mix) {
    const PeerModel& m = model(model_name);
    const fs::path out = dir_ / (model_name + "-" + mix + ".peer.gguf");
    if (!fs::exists(out)) test::peer_quantize(m.model, out, mix, m.imatrix);
    const auto peer = types_of(out);
    const auto ours = okapi_types(m.model, mix, true);
    ASSERT_EQ(peer.size(), ours.size()) << model_name << " " << mix;
    for (const auto& [name, type] : peer) {
      ASSERT_TRUE(ours.count(name)) << name;
      EXPECT_EQ(dtype_name(ours.at(name)), dtype_name(type)) << model_name << " " << mix << ": " << name;
    }
  }

  // The first type `mix` needs on `input` whose importance-weighted quantizer the format table
  // lacks (ggml weights every quantized type but Q8_0 and the ternary ones), or nullopt.
  static std::optional<DType> missing_quantizer(const fs::path& input, const std::string& mix) {
    for (const auto& [name, type] : okapi_types(input, mix, true)) {
      if (type == DType::F32 || type == DType::F16 || type == DType::BF16 || type == DType::Q8_0) continue;
      const quant::Format* f = quant::find_format(type);
      if (f == nullptr || f->quantize_weighted == nullptr) return type;
    }
    return std::nullopt;
  }

  // okapi's file and llama-quantize's, same input, mix and importance matrix: byte for byte.
  static void expect_byte_identical(const std::string& model_name, const std::string& mix,
                                    const std::vector<std::string>& peer_args = {},
                                    const QuantizeOptions& extra = {}) {
    const PeerModel& m = model(model_name);
    if (const auto missing = missing_quantizer(m.model, mix)) {
      GTEST_SKIP() << mix << " needs " << dtype_name(*missing)
                   << ", which has no importance-weighted quantizer (quantize_weighted) in this branch's table";
    }
    const std::string tag = model_name + "-" + mix + (peer_args.empty() ? "" : "-flags");
    const fs::path peer = dir_ / (tag + ".peer.gguf");
    const fs::path ours = dir_ / (tag + ".okapi.gguf");
    if (!fs::exists(peer)) test::peer_quantize(m.model, peer, mix, m.imatrix, peer_args);
    QuantizeOptions options = extra;
    options.mix.file_type = mix_by_name(mix).file_type;
    options.imatrix.file = m.imatrix.string();
    options.order = TensorOrder::LlamaCpp;
    options.n_threads = 2;
    quantize_model(m.model, ours, options);
    const std::string a = test::read_file(peer);
    const std::string b = test::read_file(ours);
    ASSERT_EQ(a.size(), b.size()) << tag;
    if (a != b) {
      // Name the first tensor that differs.
      const gguf::File fa = gguf::File::open(peer);
      const gguf::File fb = gguf::File::open(ours);
      for (size_t i = 0; i < fa.tensors().size() && i < fb.tensors().size(); ++i) {
        const auto& ta = fa.tensors()[i];
        const auto& tb = fb.tensors()[i];
        const bool same = ta.name == tb.name && ta.type == tb.type && ta.nbytes == tb.nbytes &&
                          std::equal(ta.data, ta.data + ta.nbytes, tb.data);
        if (!same) {
          ADD_FAILURE() << tag << ": first difference in tensor " << ta.name << " (" << dtype_name(ta.type)
                        << ") vs okapi's " << tb.name << " (" << dtype_name(tb.type) << ")";
          return;
        }
      }
      ADD_FAILURE() << tag << ": metadata differs";
    }
  }

  static fs::path dir_;
};

fs::path ImatrixQuantizeTest::dir_;

// ---- Per-tensor types: every IQ mix and K mixes with an importance matrix ----

constexpr const char* kIqMixes[] = {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M",
                                    "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M", "IQ4_NL", "IQ4_XS"};

TEST_F(ImatrixQuantizeTest, IqMixTypesMatchLlamaQuantize) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  for (const char* mix : kIqMixes) expect_same_types("llama", mix);
}

TEST_F(ImatrixQuantizeTest, IqMixTypesWithGqaMatchLlamaQuantize) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  for (const char* mix : {"IQ2_XXS", "IQ2_M", "IQ3_XXS", "IQ3_S", "IQ4_XS"}) expect_same_types("llama-gqa", mix);
}

TEST_F(ImatrixQuantizeTest, FallbackTypesMatchLlamaQuantize) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  for (const char* mix : {"IQ2_XXS", "IQ3_XS", "IQ4_XS", "Q2_K", "Q4_K_M", "Q6_K"}) {
    expect_same_types("llama-fallback", mix);
  }
  // The IQ mixes fall back to IQ4_NL where the rows fit no 256-block.
  const auto types = okapi_types(model("llama-fallback").model, "IQ4_XS", true);
  EXPECT_EQ(types.at("blk.0.ffn_down.weight"), DType::IQ4_NL);
  EXPECT_EQ(types.at("blk.0.ffn_up.weight"), DType::IQ4_XS);
}

TEST_F(ImatrixQuantizeTest, ExpertMixTypesMatchLlamaQuantize) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  for (const char* mix : {"IQ2_XXS", "IQ3_M", "IQ4_XS", "Q4_K_M"}) expect_same_types("mixtral", mix);
  expect_same_types("qwen3moe", "MXFP4_MOE");
  const auto types = okapi_types(model("qwen3moe").model, "MXFP4_MOE", true);
  EXPECT_EQ(types.at("blk.0.ffn_down_exps.weight"), DType::MXFP4);
  EXPECT_EQ(types.at("blk.0.attn_q.weight"), DType::Q8_0);
}

TEST_F(ImatrixQuantizeTest, KMixTypesWithImatrixMatchLlamaQuantize) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  // Q4_0 / Q5_0 guard the first ffn_down layers only with an importance matrix.
  for (const char* mix : {"Q2_K_S", "Q4_0", "Q5_0", "Q3_K_M"}) expect_same_types("llama", mix);
  EXPECT_EQ(okapi_types(model("llama").model, "Q4_0", true).at("blk.0.ffn_down.weight"), DType::Q4_1);
  EXPECT_EQ(okapi_types(model("llama").model, "Q4_0", false).at("blk.0.ffn_down.weight"), DType::Q4_0);
}

// ---- Whole files, byte for byte ----

TEST_F(ImatrixQuantizeTest, KAndLegacyMixesAreByteIdenticalWithImatrix) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  for (const char* mix : {"Q4_K_M", "Q2_K", "Q3_K_M", "Q5_K_S", "Q6_K", "Q4_0", "Q4_1", "Q5_1"}) {
    // Under the sanitizers one K mix and one legacy mix: the quantizers are the same code for all.
    if (okapi::test::sanitized_run() && std::string_view(mix) != "Q4_K_M" && std::string_view(mix) != "Q4_1") continue;
    expect_byte_identical("llama", mix);
  }
}

TEST_F(ImatrixQuantizeTest, ExpertsUseTheirOwnImportanceRows) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  expect_byte_identical("mixtral", "Q4_K_M");
}

TEST_F(ImatrixQuantizeTest, FlagsAreByteIdentical) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  QuantizeOptions options;
  options.mix.tensor_types = {parse_tensor_type_override("ATTN_V=q8_0"), parse_tensor_type_override("ffn_up=q5_k")};
  options.mix.output_tensor_type = DType::Q4_K;
  options.imatrix.exclude_weights = {"ffn_down"};
  expect_byte_identical("llama", "Q3_K_S",
                        {"--tensor-type", "ATTN_V=q8_0", "--tensor-type", "ffn_up=q5_k", "--output-tensor-type",
                         "q4_k", "--exclude-weights", "ffn_down"},
                        options);
}

class IqMixBytes : public ImatrixQuantizeTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(IqMixBytes, ByteIdenticalToLlamaQuantize) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  // Under the sanitizers (-O0, ~40 s per mix) one mix per family; the Release run checks all.
  static constexpr std::string_view kSanitizedMixes[] = {"IQ1_M", "IQ2_XS", "IQ3_S", "IQ4_XS"};
  if (okapi::test::sanitized_run() && std::find(std::begin(kSanitizedMixes), std::end(kSanitizedMixes), GetParam()) ==
                             std::end(kSanitizedMixes))
    GTEST_SKIP() << "one IQ mix per family under the sanitizers; the Release run checks this one";
  expect_byte_identical("llama", GetParam());
}

INSTANTIATE_TEST_SUITE_P(IqMixes, IqMixBytes, ::testing::ValuesIn(kIqMixes),
                         [](const auto& param_info) { return std::string(param_info.param); });

// ---- Refusals ----

TEST_F(ImatrixQuantizeTest, LowBitMixesNeedAnImportanceMatrix) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  const PeerModel& m = model("llama");
  for (const char* mix : {"IQ2_XXS", "IQ1_S", "Q2_K_S"}) {
    QuantizeOptions options;
    options.mix.file_type = mix_by_name(mix).file_type;
    try {
      quantize_model(m.model, dir_ / "refused.gguf", options);
      ADD_FAILURE() << mix << " quantized without an importance matrix";
    } catch (const Error& e) {
      EXPECT_EQ(e.setting(), Setting::Imatrix) << e.what();
      EXPECT_NE(std::string(e.what()).find("needs an importance matrix"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--imatrix"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir_ / "refused.gguf"));
    // llama-quantize refuses it too.
    EXPECT_THROW(test::peer_quantize(m.model, dir_ / "refused-peer.gguf", mix), std::runtime_error) << mix;
  }
  // An importance matrix left empty by --include-weights counts as none.
  QuantizeOptions options;
  options.mix.file_type = FileType::MOSTLY_IQ2_XXS;
  options.imatrix.file = m.imatrix.string();
  options.imatrix.include_weights = {"no-such-tensor"};
  EXPECT_THROW(quantize_model(m.model, dir_ / "refused.gguf", options), Error);
}

TEST_F(ImatrixQuantizeTest, IncludeAndExcludeTogetherAreRefused) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  const PeerModel& m = model("llama");
  QuantizeOptions options;
  options.mix.file_type = FileType::MOSTLY_Q4_K_M;
  options.imatrix.file = m.imatrix.string();
  options.imatrix.include_weights = {"attn"};
  options.imatrix.exclude_weights = {"ffn"};
  EXPECT_THROW(quantize_model(m.model, dir_ / "x.gguf", options), Error);
}

TEST(TensorTypeFlag, ParsesLikeLlamaQuantize) {
  const TensorTypeOverride o = parse_tensor_type_override("BLK\\.0\\.ATTN_V=Q8_0");
  EXPECT_EQ(o.pattern, "blk\\.0\\.attn_v");
  EXPECT_EQ(o.type, DType::Q8_0);
  for (const char* bad : {"attn_v", "=q8_0", "attn_v=", "attn_v=q9_9", "attn_v(=q8_0"}) {
    try {
      (void)parse_tensor_type_override(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.setting(), Setting::TensorType) << e.what();
    }
  }
}

TEST(TensorTypeFlag, FirstMatchingPatternWinsAndSkipsTheRules) {
  const ModelFacts facts{"llama", 8, 8, 8, 0};
  std::vector<TensorDesc> tensors;
  for (int il = 0; il < 8; ++il) {
    tensors.push_back({fmt::format("blk.{}.attn_v.weight", il), DType::F32, {256, 256}});
    tensors.push_back({fmt::format("blk.{}.ffn_down.weight", il), DType::F32, {512, 256}});
  }
  MixOptions options;
  options.file_type = FileType::MOSTLY_Q4_K_M;
  options.tensor_types = {parse_tensor_type_override("blk\\.0\\.=q8_0"), parse_tensor_type_override("attn_v=q5_0")};
  const auto choices = choose_tensor_types(facts, tensors, options);
  EXPECT_EQ(choices[0].type, DType::Q8_0);   // blk.0.attn_v: the first pattern
  EXPECT_EQ(choices[1].type, DType::Q8_0);   // blk.0.ffn_down
  EXPECT_EQ(choices[2].type, DType::Q5_0);   // blk.1.attn_v
  EXPECT_EQ(choices[3].type, DType::Q6_K);   // blk.1.ffn_down: the rules (use_more_bits, layer 1 of 8)
}

TEST_F(ImatrixQuantizeTest, MalformedImatrixFilesAreRefused) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  const PeerModel& m = model("llama");
  const std::string bytes = test::read_file(m.imatrix);
  const fs::path truncated = dir_ / "truncated.imatrix.gguf";
  {
    std::ofstream out(truncated, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  QuantizeOptions options;
  options.mix.file_type = FileType::MOSTLY_Q4_K_M;
  options.imatrix.file = truncated.string();
  EXPECT_THROW(quantize_model(m.model, dir_ / "x.gguf", options), Error);
  EXPECT_FALSE(fs::exists(dir_ / "x.gguf"));
  options.imatrix.file = (dir_ / "missing.imatrix").string();
  EXPECT_THROW(quantize_model(m.model, dir_ / "x.gguf", options), Error);
  // An importance matrix of another model: its entries do not fit the tensors.
  options.imatrix.file = model("llama-fallback").imatrix.string();
  try {
    quantize_model(m.model, dir_ / "x.gguf", options);
    ADD_FAILURE() << "an imatrix of another shape was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.setting(), Setting::Imatrix) << e.what();
  }
}

TEST_F(ImatrixQuantizeTest, RequantizingNeedsAllowRequantize) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  const PeerModel& m = model("llama");
  const fs::path q8 = dir_ / "llama-Q8_0.gguf";
  QuantizeOptions options;
  options.mix.file_type = FileType::MOSTLY_Q8_0;
  quantize_model(m.model, q8, options);
  options.mix.file_type = FileType::MOSTLY_Q4_K_M;
  try {
    quantize_model(q8, dir_ / "requantized.gguf", options);
    ADD_FAILURE() << "requantized without --allow-requantize";
  } catch (const Error& e) {
    EXPECT_EQ(e.setting(), Setting::AllowRequantize) << e.what();
  }
  options.allow_requantize = true;
  EXPECT_NO_THROW(quantize_model(q8, dir_ / "requantized.gguf", options));
}

}  // namespace
}  // namespace okapi::quantize
