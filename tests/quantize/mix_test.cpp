// The per-tensor type choice of the quantization mixes, against llama-quantize's own choices
// (golden tensor_types.json / dequant JSON) and against hand-made models for the rules the goldens
// do not reach (many layers, MoE, fallbacks, overrides).
#include "quantize/mix.hpp"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "support/golden_files.hpp"
#include "support/paths.hpp"

namespace okapi::quantize {
namespace {

using json = nlohmann::ordered_json;

json load_json(const std::filesystem::path& path) { return test::load_ordered_json(path); }

std::filesystem::path golden() { return test::golden_dir() / "public"; }
std::filesystem::path ik_golden() { return test::golden_dir() / "ik" / "public"; }

DType type_named(const std::string& name) {
  const auto type = dtype_from_name(name);
  if (!type) throw Error("unknown type name " + name);
  return *type;
}

// Tensor names, input types and shapes of a model, in file order, from its dequant JSON.
std::vector<TensorDesc> tensors_of(const std::filesystem::path& dequant_json) {
  std::vector<TensorDesc> out;
  const json doc = load_json(dequant_json);
  for (const auto& [name, t] : doc["tensors"].items()) {
    out.push_back(TensorDesc{name, type_named(t["type"].get<std::string>()), t["shape"].get<std::vector<int64_t>>()});
  }
  return out;
}

// name -> type; `types` maps tensor names to type names (tensor_types.json or a dequant JSON's
// "tensors" with a "type" member).
std::map<std::string, DType> expected_types(const json& types) {
  std::map<std::string, DType> out;
  for (const auto& [name, t] : types.items()) {
    out[name] = type_named(t.is_string() ? t.get<std::string>() : t["type"].get<std::string>());
  }
  return out;
}

void expect_choices(const ModelFacts& facts, const std::vector<TensorDesc>& tensors, const MixOptions& options,
                    const std::map<std::string, DType>& expected, const std::string& label) {
  const auto choices = choose_tensor_types(facts, tensors, options);
  ASSERT_EQ(choices.size(), tensors.size());
  ASSERT_EQ(expected.size(), tensors.size()) << label;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto it = expected.find(tensors[i].name);
    ASSERT_NE(it, expected.end()) << label << ": " << tensors[i].name;
    EXPECT_EQ(dtype_name(choices[i].type), dtype_name(it->second)) << label << ": " << tensors[i].name;
  }
}

const ModelFacts kLlamaGqa{"llama", 4, 8, 2, 0};

TEST(MixGolden, LlamaGqaMixesMatchLlamaQuantize) {
  OKAPI_REQUIRE_SHARED();
  const auto tensors = tensors_of(golden() / "dequant" / "golden-llama-gqa-F32.json");
  const json types = load_json(golden() / "models" / "tensor_types.json");
  for (const char* mix : {"Q2_K", "Q3_K_M", "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q4_0", "Q4_1", "Q5_0",
                          "Q5_1", "F16", "BF16"}) {
    const std::string file = std::string("golden-llama-gqa-") + mix + ".gguf";
    MixOptions options;
    options.file_type = mix_by_name(mix).file_type;
    EXPECT_EQ(static_cast<uint32_t>(options.file_type), types[file]["file_type"].get<uint32_t>()) << mix;
    expect_choices(kLlamaGqa, tensors, options, expected_types(types[file]["tensors"]), mix);
  }
}

TEST(MixGolden, BitnetTernaryMixesKeepTiedEmbeddingQ6K) {
  OKAPI_REQUIRE_SHARED();
  const auto tensors = tensors_of(golden() / "dequant" / "golden-bitnet-F32.json");
  const json types = load_json(golden() / "models" / "tensor_types.json");
  for (const char* mix : {"TQ1_0", "TQ2_0"}) {
    const std::string file = std::string("golden-bitnet-") + mix + ".gguf";
    MixOptions options;
    options.file_type = mix_by_name(mix).file_type;
    EXPECT_EQ(static_cast<uint32_t>(options.file_type), types[file]["file_type"].get<uint32_t>()) << mix;
    expect_choices(ModelFacts{"bitnet", 2, 4, 4, 0}, tensors, options, expected_types(types[file]["tensors"]), mix);
  }
}

TEST(MixGolden, Qwen2Q8FromF16) {
  OKAPI_REQUIRE_SHARED();
  const auto tensors = tensors_of(golden() / "dequant" / "golden-qwen2-F16.json");
  const json types = load_json(golden() / "models" / "tensor_types.json");
  MixOptions options;
  options.file_type = FileType::MOSTLY_Q8_0;
  const auto choices = choose_tensor_types(ModelFacts{"qwen2", 1, 4, 2, 0}, tensors, options);
  expect_choices(ModelFacts{"qwen2", 1, 4, 2, 0}, tensors, options,
                 expected_types(types["golden-qwen2-Q8_0.gguf"]["tensors"]), "qwen2 Q8_0");
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(choices[i].convert, tensors[i].type == DType::F16) << tensors[i].name;  // F16 -> Q8_0 only
  }
}

// stories260K: n_embd 64 (output Q6_K does not fit 256 -> Q8_0) and n_ff 172 (ffn_down fits no
// block type -> F16). These two files were not made by llama-quantize (which refuses 172-wide Q4_0
// and Q8_0 rows), but they show the fallback okapi implements.
TEST(MixGolden, Stories260KFallbacks) {
  OKAPI_REQUIRE_SHARED();
  const auto tensors = tensors_of(golden() / "dequant" / "stories260K.json");
  const json types = load_json(golden() / "models" / "tensor_types.json");
  const ModelFacts facts{"llama", 5, 8, 4, 0};
  for (const auto& [mix, file] :
       {std::pair{"Q8_0", "stories260K-q8_0mix.gguf"}, {"Q4_0", "stories260K-q4_0mix.gguf"}}) {
    MixOptions options;
    options.file_type = mix_by_name(mix).file_type;
    expect_choices(facts, tensors, options, expected_types(types[file]["tensors"]), file);
    const auto choices = choose_tensor_types(facts, tensors, options);
    for (size_t i = 0; i < tensors.size(); ++i) {
      EXPECT_EQ(choices[i].fell_back, tensors[i].name.find("ffn_down") != std::string::npos ||
                                          (tensors[i].name == "output.weight" && std::string(mix) == "Q4_0"))
          << file << " " << tensors[i].name;
    }
  }
}

// ik_llama.cpp made these; its mix rules agree with llama.cpp's for these models.
TEST(MixGolden, IkQwen3AndGemma3) {
  OKAPI_REQUIRE_SHARED();
  const auto qwen3 = tensors_of(ik_golden() / "dequant" / "golden-qwen3-F32.json");
  const ModelFacts qwen3_facts{"qwen3", 2, 4, 2, 0};
  for (const char* mix : {"Q4_K_M", "Q8_0"}) {
    MixOptions options;
    options.file_type = mix_by_name(mix).file_type;
    const json golden_types = load_json(ik_golden() / "dequant" / (std::string("golden-qwen3-") + mix + ".json"));
    expect_choices(qwen3_facts, qwen3, options, expected_types(golden_types["tensors"]), std::string("qwen3 ") + mix);
  }
  const auto gemma3 = tensors_of(ik_golden() / "dequant" / "golden-gemma3-F32.json");
  MixOptions options;
  options.file_type = FileType::MOSTLY_Q8_0;
  const json golden_types = load_json(ik_golden() / "dequant" / "golden-gemma3-Q8_0.json");
  expect_choices(ModelFacts{"gemma3", 6, 2, 1, 0}, gemma3, options, expected_types(golden_types["tensors"]),
                 "gemma3 Q8_0");
}

// A llama-style model with `n_layer` blocks of 4096-wide weights (no shared data needed).
std::vector<TensorDesc> synthetic_llama(int n_layer, int64_t n_embd = 4096, int64_t n_ff = 11008,
                                        bool tied = false) {
  std::vector<TensorDesc> t;
  t.push_back({"token_embd.weight", DType::F16, {n_embd, 32000}});
  for (int i = 0; i < n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    t.push_back({p + "attn_norm.weight", DType::F32, {n_embd}});
    t.push_back({p + "attn_q.weight", DType::F16, {n_embd, n_embd}});
    t.push_back({p + "attn_k.weight", DType::F16, {n_embd, n_embd / 4}});
    t.push_back({p + "attn_v.weight", DType::F16, {n_embd, n_embd / 4}});
    t.push_back({p + "attn_output.weight", DType::F16, {n_embd, n_embd}});
    t.push_back({p + "ffn_norm.weight", DType::F32, {n_embd}});
    t.push_back({p + "ffn_gate.weight", DType::F16, {n_embd, n_ff}});
    t.push_back({p + "ffn_up.weight", DType::F16, {n_embd, n_ff}});
    t.push_back({p + "ffn_down.weight", DType::F16, {n_ff, n_embd}});
  }
  t.push_back({"output_norm.weight", DType::F32, {n_embd}});
  if (!tied) t.push_back({"output.weight", DType::F16, {n_embd, 32000}});
  return t;
}

DType type_of(const std::vector<TensorDesc>& tensors, const std::vector<TensorChoice>& choices,
              const std::string& name) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == name) return choices[i].type;
  }
  throw Error("no tensor " + name);
}

TEST(MixRules, Q4KMUsesMoreBitsOnFirstLastAndEveryThirdLayer) {
  const auto tensors = synthetic_llama(32);
  MixOptions options;
  options.file_type = FileType::MOSTLY_Q4_K_M;
  const auto choices = choose_tensor_types(ModelFacts{"llama", 32, 32, 8, 0}, tensors, options);
  // use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2.
  for (int i = 0; i < 32; ++i) {
    const bool more = i < 4 || i >= 28 || (i - 4) % 3 == 2;
    const DType want = more ? DType::Q6_K : DType::Q4_K;
    const std::string p = "blk." + std::to_string(i) + ".";
    EXPECT_EQ(type_of(tensors, choices, p + "attn_v.weight"), want) << i;
    EXPECT_EQ(type_of(tensors, choices, p + "ffn_down.weight"), want) << i;
    EXPECT_EQ(type_of(tensors, choices, p + "attn_q.weight"), DType::Q4_K) << i;
  }
  EXPECT_EQ(type_of(tensors, choices, "output.weight"), DType::Q6_K);
  EXPECT_EQ(type_of(tensors, choices, "token_embd.weight"), DType::Q4_K);
  EXPECT_EQ(type_of(tensors, choices, "blk.0.attn_norm.weight"), DType::F32);
}

TEST(MixRules, Q3KMAndQ2KByLayer) {
  const auto tensors = synthetic_llama(32);
  MixOptions options;
  options.file_type = FileType::MOSTLY_Q3_K_M;
  const ModelFacts gqa4{"llama", 32, 32, 8, 0};
  auto choices = choose_tensor_types(gqa4, tensors, options);
  EXPECT_EQ(type_of(tensors, choices, "blk.0.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(tensors, choices, "blk.1.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(tensors, choices, "blk.2.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(type_of(tensors, choices, "blk.1.ffn_down.weight"), DType::Q5_K);  // i < 32/16
  EXPECT_EQ(type_of(tensors, choices, "blk.2.ffn_down.weight"), DType::Q4_K);
  EXPECT_EQ(type_of(tensors, choices, "blk.5.attn_output.weight"), DType::Q4_K);
  EXPECT_EQ(type_of(tensors, choices, "blk.5.ffn_up.weight"), DType::Q3_K);

  options.file_type = FileType::MOSTLY_Q2_K;
  choices = choose_tensor_types(ModelFacts{"llama", 32, 32, 32, 0}, tensors, options);  // no GQA
  EXPECT_EQ(type_of(tensors, choices, "blk.7.attn_v.weight"), DType::Q3_K);
  choices = choose_tensor_types(gqa4, tensors, options);
  EXPECT_EQ(type_of(tensors, choices, "blk.7.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(type_of(tensors, choices, "blk.7.ffn_down.weight"), DType::Q3_K);
  EXPECT_EQ(type_of(tensors, choices, "blk.7.ffn_gate.weight"), DType::Q2_K);

  options.file_type = FileType::MOSTLY_Q2_K_S;
  choices = choose_tensor_types(gqa4, tensors, options);
  EXPECT_EQ(type_of(tensors, choices, "blk.3.ffn_down.weight"), DType::Q4_K);  // i < 32/8
  EXPECT_EQ(type_of(tensors, choices, "blk.4.ffn_down.weight"), DType::Q2_K);
  EXPECT_EQ(type_of(tensors, choices, "blk.4.attn_v.weight"), DType::Q4_K);

  options.file_type = FileType::MOSTLY_Q3_K_L;
  choices = choose_tensor_types(gqa4, tensors, options);
  EXPECT_EQ(type_of(tensors, choices, "blk.9.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(tensors, choices, "blk.9.ffn_down.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(tensors, choices, "blk.9.attn_output.weight"), DType::Q5_K);

  options.file_type = FileType::MOSTLY_Q3_K_S;
  choices = choose_tensor_types(gqa4, tensors, options);
  EXPECT_EQ(type_of(tensors, choices, "blk.9.attn_v.weight"), DType::Q3_K);
  EXPECT_EQ(type_of(tensors, choices, "output.weight"), DType::Q6_K);
}

TEST(MixRules, Llama70BAndFalconAndEightExperts) {
  const auto tensors = synthetic_llama(80, 8192, 28672);
  MixOptions options;
  options.file_type = FileType::MOSTLY_Q3_K_S;
  auto choices = choose_tensor_types(ModelFacts{"llama", 80, 64, 8, 0}, tensors, options);
  EXPECT_EQ(type_of(tensors, choices, "blk.40.attn_v.weight"), DType::Q5_K);  // 70B attn_v bump
  choices = choose_tensor_types(ModelFacts{"llama", 80, 64, 64, 0}, tensors, options);  // 65B: no GQA
  EXPECT_EQ(type_of(tensors, choices, "blk.40.attn_v.weight"), DType::Q3_K);

  const auto small = synthetic_llama(16);
  options.file_type = FileType::MOSTLY_Q4_K_M;
  choices = choose_tensor_types(ModelFacts{"falcon", 16, 32, 8, 0}, small, options);
  EXPECT_EQ(type_of(small, choices, "output.weight"), DType::Q8_0);
  EXPECT_EQ(type_of(small, choices, "blk.0.ffn_down.weight"), DType::Q6_K);  // i < 16/16
  EXPECT_EQ(type_of(small, choices, "blk.1.ffn_down.weight"), DType::Q5_K);  // use_more_bits
  EXPECT_EQ(type_of(small, choices, "blk.3.ffn_down.weight"), DType::Q4_K);

  choices = choose_tensor_types(ModelFacts{"llama", 16, 32, 8, 8}, small, options);
  EXPECT_EQ(type_of(small, choices, "blk.3.attn_v.weight"), DType::Q8_0);
  EXPECT_EQ(type_of(small, choices, "blk.3.attn_k.weight"), DType::Q8_0);
  EXPECT_EQ(type_of(small, choices, "blk.3.attn_output.weight"), DType::Q5_K);
}

bool more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// MoE: the layer comes from the tensor name (llama.cpp: experts need not be consecutive), so two
// ffn_down tensors of one layer both get that layer's type; a name without "blk.N." is an error.
TEST(MixRules, ExpertLayerFromName) {
  std::vector<TensorDesc> tensors;
  for (int i = 0; i < 8; ++i) {
    tensors.push_back({"blk." + std::to_string(i) + ".ffn_down_exps.weight", DType::F16, {1024, 256, 4}});
    tensors.push_back({"blk." + std::to_string(i) + ".ffn_down_shexp.weight", DType::F16, {1024, 256}});
  }
  MixOptions options;
  options.file_type = FileType::MOSTLY_Q4_K_M;
  const auto choices = choose_tensor_types(ModelFacts{"llama", 8, 8, 8, 4}, tensors, options);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t layer = static_cast<int64_t>(i / 2);
    EXPECT_EQ(choices[i].type, more_bits(layer, 8) ? DType::Q6_K : DType::Q4_K) << tensors[i].name;
  }
  // Without experts the running count decides: the second tensor of a layer counts as the next.
  const auto dense = choose_tensor_types(ModelFacts{"llama", 8, 8, 8, 0}, tensors, options);
  EXPECT_EQ(dense[1].type, DType::Q4_K);  // counter 1: not first/last eighth, (1-1)%3 != 2
  std::vector<TensorDesc> bad{{"ffn_down_exps.weight", DType::F16, {1024, 256, 4}}};
  EXPECT_THROW(choose_tensor_types(ModelFacts{"llama", 8, 8, 8, 4}, bad, options), Error);
  std::vector<TensorDesc> outside{{"blk.9.ffn_down_exps.weight", DType::F16, {1024, 256, 4}}};
  EXPECT_THROW(choose_tensor_types(ModelFacts{"llama", 8, 8, 8, 4}, outside, options), Error);
}

TEST(MixRules, FallbacksWhenRowsDoNotFitTheBlock) {
  // n_embd 64 / n_ff 172 (stories260K): 256-blocks never fit the 64-wide rows.
  const auto tensors = synthetic_llama(4, 64, 172);
  MixOptions options;
  const ModelFacts facts{"llama", 4, 8, 4, 0};
  const std::vector<std::pair<FileType, std::pair<DType, DType>>> cases = {
      // mix -> (attn_q type, ffn_down type)
      {FileType::MOSTLY_Q2_K, {DType::Q4_0, DType::F16}},
      {FileType::MOSTLY_Q3_K_S, {DType::Q4_0, DType::F16}},
      {FileType::MOSTLY_Q4_K_S, {DType::Q5_0, DType::F16}},
      {FileType::MOSTLY_Q5_K_M, {DType::Q5_1, DType::F16}},
      {FileType::MOSTLY_Q6_K, {DType::Q8_0, DType::F16}},
      {FileType::MOSTLY_TQ2_0, {DType::Q4_0, DType::F16}},
      {FileType::MOSTLY_Q8_0, {DType::Q8_0, DType::F16}},  // llama.cpp refuses 172-wide Q8_0
  };
  for (const auto& [ft, want] : cases) {
    options.file_type = ft;
    const auto choices = choose_tensor_types(facts, tensors, options);
    const std::string label = std::string(mix_spec(ft).name);
    EXPECT_EQ(type_of(tensors, choices, "blk.1.attn_q.weight"), want.first) << label;
    EXPECT_EQ(type_of(tensors, choices, "blk.1.ffn_down.weight"), want.second) << label;
    EXPECT_EQ(type_of(tensors, choices, "output.weight"), DType::Q8_0) << label;
  }
  // F16 and friends fit any row.
  options.file_type = FileType::MOSTLY_BF16;
  const auto choices = choose_tensor_types(facts, tensors, options);
  EXPECT_EQ(type_of(tensors, choices, "blk.1.ffn_down.weight"), DType::BF16);
}

TEST(MixRules, PureGivesEveryWeightTheTypeAndFallsBackOnMisfits) {
  auto tensors = synthetic_llama(4);
  MixOptions options;
  options.file_type = FileType::MOSTLY_Q4_K_M;
  options.pure = true;
  auto choices = choose_tensor_types(ModelFacts{"llama", 4, 32, 8, 0}, tensors, options);
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(choices[i].type, tensors[i].shape.size() == 1 ? DType::F32 : DType::Q4_K) << tensors[i].name;
  }
  // llama.cpp applies its fallback also with --pure (tensor_type_fallback runs after the rules).
  tensors = synthetic_llama(4, 64, 172);
  choices = choose_tensor_types(ModelFacts{"llama", 4, 8, 4, 0}, tensors, options);
  EXPECT_EQ(type_of(tensors, choices, "blk.1.attn_q.weight"), DType::Q5_0);
  EXPECT_EQ(type_of(tensors, choices, "blk.1.ffn_down.weight"), DType::F16);
  EXPECT_EQ(type_of(tensors, choices, "output.weight"), DType::Q5_0);
}

TEST(MixRules, OverridesAndLeaveOutputTensor) {
  const auto tensors = synthetic_llama(4);
  const ModelFacts facts{"llama", 4, 32, 8, 0};
  MixOptions options;
  options.file_type = FileType::MOSTLY_Q4_0;
  options.output_tensor_type = DType::Q8_0;
  options.token_embedding_type = DType::F16;
  auto choices = choose_tensor_types(facts, tensors, options);
  EXPECT_EQ(type_of(tensors, choices, "output.weight"), DType::Q8_0);
  EXPECT_EQ(type_of(tensors, choices, "token_embd.weight"), DType::F16);
  EXPECT_FALSE(choices[0].convert);  // token_embd is already F16: copied unchanged

  options = MixOptions{};
  options.file_type = FileType::MOSTLY_Q4_0;
  options.quantize_output_tensor = false;
  choices = choose_tensor_types(facts, tensors, options);
  EXPECT_EQ(type_of(tensors, choices, "output.weight"), DType::F16);
  EXPECT_FALSE(choices.back().convert);

  // Tied embeddings: token_embd takes the output tensor's type.
  const auto tied = synthetic_llama(4, 4096, 11008, true);
  options = MixOptions{};
  options.file_type = FileType::MOSTLY_Q4_0;
  choices = choose_tensor_types(facts, tied, options);
  EXPECT_EQ(type_of(tied, choices, "token_embd.weight"), DType::Q6_K);
  options.output_tensor_type = DType::Q5_0;
  choices = choose_tensor_types(facts, tied, options);
  EXPECT_EQ(type_of(tied, choices, "token_embd.weight"), DType::Q5_0);

  // An explicit type that does not fit the rows is an error, not a silent fallback.
  const auto narrow = synthetic_llama(2, 64, 128);
  options = MixOptions{};
  options.file_type = FileType::MOSTLY_Q8_0;
  options.output_tensor_type = DType::Q6_K;
  EXPECT_THROW(choose_tensor_types(ModelFacts{"llama", 2, 8, 8, 0}, narrow, options), Error);
}

TEST(MixRules, QuantizeFilter) {
  const MixOptions options;
  const std::vector<int64_t> matrix{256, 256};
  EXPECT_TRUE(is_quantizable("blk.0.attn_q.weight", matrix, options));
  EXPECT_FALSE(is_quantizable("blk.0.attn_q.bias", matrix, options));
  EXPECT_FALSE(is_quantizable("blk.0.attn_norm.weight", matrix, options));
  EXPECT_FALSE(is_quantizable("blk.0.attn_q.weight", std::vector<int64_t>{256}, options));
  EXPECT_FALSE(is_quantizable("blk.0.attn_q.weight", std::vector<int64_t>{256, 1, 1}, options));
  EXPECT_TRUE(is_quantizable("blk.0.ffn_up_exps.weight", std::vector<int64_t>{256, 512, 8}, options));
  EXPECT_FALSE(is_quantizable("blk.0.ffn_gate_inp.weight", matrix, options));
  EXPECT_FALSE(is_quantizable("position_embd.weight", matrix, options));
  EXPECT_FALSE(is_quantizable("blk.3.ssm_conv1d.weight", matrix, options));
  EXPECT_TRUE(is_quantizable("output.weight", matrix, options));
  MixOptions leave;
  leave.quantize_output_tensor = false;
  EXPECT_FALSE(is_quantizable("output.weight", matrix, leave));
}

TEST(MixNames, LookupAliasesAndErrors) {
  EXPECT_EQ(mix_by_name("q4_k_m").file_type, FileType::MOSTLY_Q4_K_M);
  EXPECT_EQ(mix_by_name("Q4_K").file_type, FileType::MOSTLY_Q4_K_M);
  EXPECT_EQ(static_cast<uint32_t>(mix_by_name("Q4_K_M").file_type), 15u);
  EXPECT_EQ(static_cast<uint32_t>(mix_by_name("TQ2_0").file_type), 37u);
  EXPECT_EQ(static_cast<uint32_t>(mix_by_name("BF16").file_type), 32u);
  EXPECT_EQ(mix_by_name("F32").default_type, DType::F32);
  try {
    mix_by_name("Q7_K");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q7_K"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("Q4_K_M"), std::string::npos);  // lists the valid ones
  }
  // llama.h's numbers for the IQ mixes.
  EXPECT_EQ(static_cast<uint32_t>(mix_by_name("IQ2_XS").file_type), 20u);
  EXPECT_EQ(static_cast<uint32_t>(mix_by_name("iq3_m").file_type), 27u);
  EXPECT_EQ(static_cast<uint32_t>(mix_by_name("MXFP4_MOE").file_type), 38u);
  EXPECT_EQ(mix_by_name("IQ2_S").default_type, DType::IQ2_XS);
  EXPECT_EQ(mix_by_name("IQ3_XS").default_type, DType::IQ3_S);
  EXPECT_EQ(output_type_by_name("q6_k"), DType::Q6_K);
  EXPECT_EQ(output_type_by_name("iq4_nl"), DType::IQ4_NL);
  EXPECT_THROW(output_type_by_name("q8_1"), Error);
}

TEST(MixOrder, LlamaCppOrderIsNonBlockThenByLayerNumber) {
  const std::vector<TensorDesc> tensors = {
      {"token_embd.weight", DType::F32, {4}}, {"blk.10.a", DType::F32, {4}}, {"blk.2.b", DType::F32, {4}},
      {"blk.2.a", DType::F32, {4}},           {"output.weight", DType::F32, {4}},
  };
  const auto order = llama_cpp_tensor_order(tensors);
  EXPECT_EQ(order, (std::vector<size_t>{4, 0, 3, 2, 1}));
}

}  // namespace
}  // namespace okapi::quantize
