// Whole-model quantization against llama-quantize's outputs (per-tensor bytes and, in
// llama.cpp's tensor order, whole files), plus determinism, ordering and failure behaviour.
#include "quantize/model_quantizer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "core/sha256.hpp"
#include "support/golden_files.hpp"
#include "support/paths.hpp"
#include "support/peer_quantize.hpp"

namespace okapi::quantize {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

json load_json(const fs::path& path) { return test::load_ordered_json(path); }

fs::path golden() { return test::golden_dir() / "public"; }
fs::path golden_model(const std::string& name) { return golden() / "models" / name; }
const fs::path kStories = okapi::test::repo_dir() / "models" / "stories260K.gguf";

std::string file_sha256(const fs::path& path) {
  const MappedFile file(path);
  return sha256_hex(file.data(), file.size());
}

// name -> sha256 from SHA256SUMS.
std::map<std::string, std::string> golden_file_sums() {
  std::map<std::string, std::string> sums;
  std::ifstream in(golden() / "models" / "SHA256SUMS");
  std::string sha, name;
  while (in >> sha >> name) sums[name] = sha;
  return sums;
}

class ModelQuantizerTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = okapi::test::make_temp_dir("quantizer"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

QuantizeOptions options_for(const std::string& mix, TensorOrder order = TensorOrder::LlamaCpp, int threads = 2) {
  QuantizeOptions options;
  options.mix.file_type = mix_by_name(mix).file_type;
  options.order = order;
  options.n_threads = threads;
  return options;
}

// Every tensor of `out` has the golden's type and raw bytes (dequant JSON or quantize JSON).
void expect_tensors_match(const fs::path& out, const json& expected, const std::string& label) {
  const gguf::File file = gguf::File::open(out);
  ASSERT_EQ(file.tensors().size(), expected.size()) << label;
  for (const auto& t : file.tensors()) {
    ASSERT_TRUE(expected.contains(t.name)) << label << ": " << t.name;
    const json& want = expected[t.name];
    EXPECT_EQ(std::string(dtype_name(t.type)), want["type"].get<std::string>()) << label << ": " << t.name;
    EXPECT_EQ(sha256_hex(t.data, static_cast<size_t>(t.nbytes)), want["raw_sha256"].get<std::string>())
        << label << ": " << t.name;
  }
}

TEST_F(ModelQuantizerTest, LlamaGqaMixesAreByteIdenticalToLlamaQuantize) {
  OKAPI_REQUIRE_SHARED();
  const auto sums = golden_file_sums();
  for (const char* mix : {"Q2_K", "Q3_K_M", "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q4_0", "Q4_1", "Q5_0",
                          "Q5_1", "F16", "BF16"}) {
    const std::string stem = std::string("golden-llama-gqa-") + mix;
    const fs::path out = dir_ / (stem + ".gguf");
    const auto report = quantize_model(golden_model("golden-llama-gqa-F32.gguf"), out, options_for(mix));
    expect_tensors_match(out, load_json(golden() / "dequant" / (stem + ".json"))["tensors"], mix);
    // In llama.cpp's tensor order the whole file, metadata included, is llama-quantize's.
    EXPECT_EQ(file_sha256(out), sums.at(stem + ".gguf")) << mix;
    EXPECT_EQ(report.output_file_bytes, fs::file_size(out)) << mix;
    fs::remove(out);
  }
  // In the input's order the tensors are the same bytes; only the layout in the file differs.
  const fs::path out = dir_ / "input-order.gguf";
  quantize_model(golden_model("golden-llama-gqa-F32.gguf"), out, options_for("Q4_K_M", TensorOrder::Input));
  expect_tensors_match(out, load_json(golden() / "dequant" / "golden-llama-gqa-Q4_K_M.json")["tensors"], "input order");
  const gguf::File in = gguf::File::open(golden_model("golden-llama-gqa-F32.gguf"));
  const gguf::File q = gguf::File::open(out);
  for (size_t i = 0; i < in.tensors().size(); ++i) EXPECT_EQ(q.tensors()[i].name, in.tensors()[i].name);
}

TEST_F(ModelQuantizerTest, BitnetTernaryMixes) {
  OKAPI_REQUIRE_SHARED();
  const auto sums = golden_file_sums();
  for (const char* mix : {"TQ1_0", "TQ2_0"}) {
    const std::string stem = std::string("golden-bitnet-") + mix;
    const fs::path out = dir_ / (stem + ".gguf");
    quantize_model(golden_model("golden-bitnet-F32.gguf"), out, options_for(mix));
    expect_tensors_match(out, load_json(golden() / "dequant" / (stem + ".json"))["tensors"], mix);
    EXPECT_EQ(file_sha256(out), sums.at(stem + ".gguf")) << mix;
  }
}

TEST_F(ModelQuantizerTest, Qwen2F16ToQ8) {
  OKAPI_REQUIRE_SHARED();
  const fs::path out = dir_ / "qwen2-Q8_0.gguf";
  quantize_model(golden_model("golden-qwen2-F16.gguf"), out, options_for("Q8_0"));
  expect_tensors_match(out, load_json(golden() / "dequant" / "golden-qwen2-Q8_0.json")["tensors"], "qwen2");
  EXPECT_EQ(file_sha256(out), golden_file_sums().at("golden-qwen2-Q8_0.gguf"));
}

// ik_llama.cpp's files: Q8_0 is byte-identical; for Q4_K_M only the type choice agrees, because
// ik_llama's k-quant quantizers search scales differently from llama.cpp's (whose bytes okapi
// reproduces, see above).
TEST_F(ModelQuantizerTest, IkQwen3AndGemma3) {
  OKAPI_REQUIRE_SHARED();
  const fs::path ik = okapi::shared_dir() / "golden" / "ik" / "public";
  for (const char* model : {"qwen3", "gemma3"}) {
    const std::string stem = std::string("golden-") + model;
    const fs::path out = dir_ / (stem + "-Q8_0.gguf");
    quantize_model(ik / "models" / (stem + "-F32.gguf"), out, options_for("Q8_0", TensorOrder::Input));
    expect_tensors_match(out, load_json(ik / "dequant" / (stem + "-Q8_0.json"))["tensors"], stem);
  }
  const fs::path out = dir_ / "qwen3-Q4_K_M.gguf";
  quantize_model(ik / "models" / "golden-qwen3-F32.gguf", out, options_for("Q4_K_M", TensorOrder::Input));
  const json expected = load_json(ik / "dequant" / "golden-qwen3-Q4_K_M.json")["tensors"];
  const gguf::File q = gguf::File::open(out);
  ASSERT_EQ(q.tensors().size(), expected.size());
  for (const auto& t : q.tensors()) {
    EXPECT_EQ(std::string(dtype_name(t.type)), expected[t.name]["type"].get<std::string>()) << t.name;
  }
}

TEST_F(ModelQuantizerTest, PureRunsMatchQuantizeGoldens) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  const json index = load_json(golden() / "quantize" / "index.json");
  for (const auto& entry : index["files"]) {
    const json expected = load_json(golden() / "quantize" / entry["file"].get<std::string>());
    const std::string mix = expected["type"].get<std::string>();
    const std::string label = entry["file"].get<std::string>();
    QuantizeOptions options = options_for(mix);
    options.mix.pure = true;
    const fs::path out = dir_ / "pure.gguf";
    quantize_model(golden_model(expected["input_file"].get<std::string>()), out, options);
    expect_tensors_match(out, expected["tensors"], label);
    EXPECT_EQ(file_sha256(out), expected["output_file_sha256"].get<std::string>()) << label;
    EXPECT_EQ(fs::file_size(out), expected["output_file_size"].get<uint64_t>()) << label;
  }
  // Rows of 64 for a 256 block: llama-quantize falls back also with --pure (to Q4_0 here), and
  // so does okapi, byte for byte.
  QuantizeOptions options = options_for("TQ2_0");
  options.mix.pure = true;
  quantize_model(golden_model("stories260K-ff192.gguf"), dir_ / "pure-fallback.gguf", options);
  test::peer_quantize(golden_model("stories260K-ff192.gguf"), dir_ / "pure-fallback-peer.gguf", "TQ2_0", {},
                      {"--pure"});
  EXPECT_EQ(file_sha256(dir_ / "pure-fallback.gguf"), file_sha256(dir_ / "pure-fallback-peer.gguf"));
}

std::vector<uint8_t> float_bytes(const std::vector<float>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return std::vector<uint8_t>(p, p + v.size() * sizeof(float));
}

// Pseudo-random weights, large enough that conversion is split across threads.
fs::path write_synthetic_model(const fs::path& path) {
  gguf::Writer w;
  w.set("general.architecture", "llama");
  w.set("llama.block_count", uint32_t{1});
  w.set("llama.attention.head_count", uint32_t{4});
  uint32_t state = 12345;
  auto random_floats = [&state](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) {
      state = state * 1664525u + 1013904223u;
      x = static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) / static_cast<float>(1 << 26);
    }
    return v;
  };
  w.add_tensor("token_embd.weight", DType::F32, {256, 1024}, float_bytes(random_floats(256 * 1024)));
  w.add_tensor("blk.0.attn_norm.weight", DType::F32, {256}, float_bytes(random_floats(256)));
  w.add_tensor("blk.0.ffn_down.weight", DType::F32, {1024, 256}, float_bytes(random_floats(1024 * 256)));
  w.add_tensor("blk.0.attn_v.weight", DType::F32, {256, 1024}, float_bytes(random_floats(256 * 1024)));
  w.write(path);
  return path;
}

TEST_F(ModelQuantizerTest, OutputIndependentOfThreadCount) {
  const fs::path model = write_synthetic_model(dir_ / "synthetic.gguf");
  for (const char* mix : {"Q4_K_M", "Q5_0", "TQ1_0", "BF16"}) {
    quantize_model(model, dir_ / "t1.gguf", options_for(mix, TensorOrder::Input, 1));
    quantize_model(model, dir_ / "t3.gguf", options_for(mix, TensorOrder::Input, 3));
    quantize_model(model, dir_ / "t4.gguf", options_for(mix, TensorOrder::Input, 4));
    const std::string one = file_sha256(dir_ / "t1.gguf");
    EXPECT_EQ(one, file_sha256(dir_ / "t3.gguf")) << mix;
    EXPECT_EQ(one, file_sha256(dir_ / "t4.gguf")) << mix;
  }
}

TEST_F(ModelQuantizerTest, KeepsInputOrderAndMetadata) {
  const fs::path out = dir_ / "q.gguf";
  std::vector<std::string> warnings;
  size_t last_done = 0;
  QuantizeObserver observer;
  observer.on_warning = [&](const std::string& w) { warnings.push_back(w); };
  observer.on_tensor = [&](size_t done, size_t total, const std::string&) {
    EXPECT_EQ(done, last_done + 1);
    EXPECT_EQ(total, 48u);
    last_done = done;
  };
  const auto report = quantize_model(kStories, out, options_for("Q4_K_M", TensorOrder::Input), observer);
  EXPECT_EQ(last_done, 48u);
  const gguf::File in = gguf::File::open(kStories);
  const gguf::File q = gguf::File::open(out);
  ASSERT_EQ(q.tensors().size(), in.tensors().size());
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    EXPECT_EQ(q.tensors()[i].name, in.tensors()[i].name);
    EXPECT_EQ(q.tensors()[i].shape, in.tensors()[i].shape);
    EXPECT_EQ(report.tensors[i].output_type, q.tensors()[i].type);
  }
  // stories260K: 64-wide rows fall back from the 256-blocks, 172-wide ffn_down to F16.
  EXPECT_EQ(q.tensor("blk.0.attn_q.weight").type, DType::Q5_0);
  EXPECT_EQ(q.tensor("blk.0.ffn_down.weight").type, DType::F16);
  EXPECT_EQ(q.tensor("output.weight").type, DType::Q8_0);
  EXPECT_EQ(q.tensor("blk.0.attn_norm.weight").type, DType::F32);
  EXPECT_FALSE(warnings.empty());  // the fallbacks are reported
  EXPECT_EQ(q.at("general.file_type").as_uint(), 15u);
  EXPECT_EQ(q.at("general.quantization_version").as_uint(), 2u);
  EXPECT_EQ(q.metadata().size(), in.metadata().size() + 2);  // the input has neither key
  for (const auto& kv : in.metadata()) {
    const gguf::Value* v = q.find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    EXPECT_EQ(v->to_display(), kv.value.to_display()) << kv.key;
  }
  // Unconverted tensors are copied byte for byte.
  EXPECT_EQ(sha256_hex(q.tensor("blk.0.attn_norm.weight").bytes()),
            sha256_hex(in.tensor("blk.0.attn_norm.weight").bytes()));
}

TEST_F(ModelQuantizerTest, RequantizingNeedsAllowRequantizeThenWarnsAndWorks) {
  const fs::path q8 = dir_ / "q8.gguf";
  quantize_model(kStories, q8, options_for("Q8_0", TensorOrder::Input));
  std::vector<std::string> warnings;
  QuantizeObserver observer;
  observer.on_warning = [&](const std::string& w) { warnings.push_back(w); };
  const fs::path q4 = dir_ / "q4.gguf";
  QuantizeOptions options = options_for("Q4_0", TensorOrder::Input);
  try {
    quantize_model(q8, q4, options, observer);
    ADD_FAILURE() << "requantized without allow_requantize (llama-quantize refuses it)";
  } catch (const Error& e) {
    EXPECT_EQ(e.setting(), Setting::AllowRequantize) << e.what();
  }
  EXPECT_FALSE(fs::exists(q4));
  options.allow_requantize = true;
  quantize_model(q8, q4, options, observer);
  bool said_requantize = false;
  for (const auto& w : warnings) said_requantize |= w.find("requantiz") != std::string::npos;
  EXPECT_TRUE(said_requantize);
  const gguf::File q = gguf::File::open(q4);
  EXPECT_EQ(q.tensor("blk.1.attn_q.weight").type, DType::Q4_0);
  EXPECT_EQ(q.tensor("blk.1.ffn_down.weight").type, DType::F16);  // F16 in q8 already: copied
  EXPECT_EQ(q.at("general.file_type").as_uint(), 2u);
}

TEST_F(ModelQuantizerTest, RefusesOutputEqualToInput) {
  fs::copy_file(kStories, dir_ / "m.gguf");
  const std::string before = file_sha256(dir_ / "m.gguf");
  EXPECT_THROW(quantize_model(dir_ / "m.gguf", dir_ / "m.gguf", options_for("Q8_0")), Error);
  EXPECT_THROW(quantize_model(dir_ / "m.gguf", dir_ / "." / "m.gguf", options_for("Q8_0")), Error);
  EXPECT_EQ(file_sha256(dir_ / "m.gguf"), before);
}

TEST_F(ModelQuantizerTest, MissingInputAndUnwritableOutput) {
  EXPECT_THROW(quantize_model(dir_ / "absent.gguf", dir_ / "o.gguf", options_for("Q8_0")), Error);
  EXPECT_THROW(quantize_model(kStories, dir_ / "no-such-dir" / "o.gguf", options_for("Q8_0")), Error);
  EXPECT_FALSE(fs::exists(dir_ / "o.gguf"));
}

// A failure in the middle of writing (a NaN weight) leaves an existing output untouched and no
// temporary file behind.
TEST_F(ModelQuantizerTest, FailureLeavesExistingOutputIntact) {
  gguf::Writer w;
  w.set("general.architecture", "llama");
  std::vector<float> good(64 * 4, 0.5f);
  std::vector<float> bad(64 * 4, 0.25f);
  bad[77] = std::numeric_limits<float>::quiet_NaN();
  w.add_tensor("blk.0.attn_q.weight", DType::F32, {64, 4}, float_bytes(good));
  w.add_tensor("blk.0.attn_k.weight", DType::F32, {64, 4}, float_bytes(bad));
  w.write(dir_ / "nan.gguf");
  const fs::path out = dir_ / "out.gguf";
  std::ofstream(out) << "previous contents";
  try {
    quantize_model(dir_ / "nan.gguf", out, options_for("Q8_0"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_k.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
  }
  std::ifstream in(out);
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(contents, "previous contents");
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 2u);  // nan.gguf and out.gguf only
}

TEST(ModelFacts, ReadsHeadCountsAndDefaults) {
  const gguf::File f = gguf::File::open(kStories);
  const ModelFacts facts = model_facts(f);
  EXPECT_EQ(facts.arch, "llama");
  EXPECT_EQ(facts.n_layer, 5);
  EXPECT_EQ(facts.n_head, 8);
  EXPECT_EQ(facts.n_head_kv, 4);
  EXPECT_EQ(facts.n_expert, 0);
  EXPECT_EQ(facts.n_gqa(), 2);
}

}  // namespace
}  // namespace okapi::quantize
