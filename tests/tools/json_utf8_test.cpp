// Every --json writer turns bytes that are not UTF-8 into valid JSON instead of aborting: seeded
// random byte strings (cut sequences, overlongs, surrogates, 0xFF, NUL...) as run prompts,
// tokenize input, GGUF metadata keys / strings / vocab tokens / tensor names, llama2.c tokens and
// a model file name. Each output must parse, exit 0, and give back the exact original bytes
// through its "invalid_utf8" list (core/json_output.hpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/utf8.hpp"
#include "format/gguf.hpp"
#include "support/cli.hpp"
#include "support/json_repairs.hpp"
#include "support/paths.hpp"
#include "support/random_data.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using test::shell_quote;

const fs::path kModel = test::repo_dir() / "models" / "stories260K.gguf";
const fs::path kTok = test::repo_dir() / "models" / "tok512.bin";

class JsonUtf8 : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("json-utf8"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs okapi with stdout captured apart from stderr; returns stdout, checks the exit code.
  std::string okapi_stdout(const std::string& args) const {
    const fs::path out = dir_ / "stdout.txt";
    // Braces: run_command's trailing 2>&1 then applies to the group, so stderr stays out of `out`.
    const auto r = test::run_command("{ " + shell_quote(test::cli_path().string()) + " " + args + " > " +
                                     shell_quote(out.string()) + "; }");
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    return test::read_file(out);
  }

  // Parses okapi's JSON (failing the test, not throwing, when it is not JSON).
  static ordered_json parsed(const std::string& text) {
    ordered_json j = ordered_json::parse(text, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << text;
    return j;
  }

  fs::path write_file(const std::string& name, const std::string& bytes) const {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  fs::path dir_;
};

// `n` distinct non-empty random names of at most `max_bytes` bytes.
std::vector<std::string> random_names(std::mt19937& rng, size_t n, size_t max_bytes) {
  std::vector<std::string> names;
  for (size_t i = 0; i < n; ++i) {
    std::string suffix = "#";  // appended, not "#" + ...: GCC 12 warns (-Wrestrict) on that
    suffix += std::to_string(i);
    names.push_back(test::utf8_torture_bytes(rng, 8).substr(0, max_bytes - suffix.size()) + suffix);
  }
  return names;
}

TEST_F(JsonUtf8, InspectGivesBackEveryGgufStringExactly) {
  std::mt19937 rng(11);
  for (int round = 0; round < 3; ++round) {
    const auto keys = random_names(rng, 12, 200);
    const auto tensor_names = random_names(rng, 6, gguf::kMaxTensorName);
    std::vector<std::string> values, tokens;
    gguf::Writer writer;
    gguf::Array vocab{gguf::ValueType::STRING, {}};
    for (int i = 0; i < 40; ++i) {
      tokens.push_back(test::utf8_torture_bytes(rng, 6));
      vocab.items.emplace_back(tokens.back());
    }
    writer.set("tokenizer.ggml.tokens", vocab);
    for (const auto& key : keys) {
      values.push_back(test::utf8_torture_bytes(rng, 10));
      writer.set(key, values.back());
    }
    const std::vector<float> data(4, 1.0f);
    for (const auto& name : tensor_names) {
      writer.add_tensor(name, DType::F32, {4},
                        std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(data.data()),
                                             reinterpret_cast<const uint8_t*>(data.data() + data.size())));
    }
    const fs::path file = dir_ / "random.gguf";
    writer.write(file);

    const ordered_json j = parsed(okapi_stdout("inspect --json --full-arrays " + shell_quote(file.string())));
    const auto repairs = test::checked_repairs(j);
    for (size_t i = 0; i < tokens.size(); ++i) {
      EXPECT_EQ(test::original_string(j, repairs, "/metadata/0/value/items/" + std::to_string(i)), tokens[i]);
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string at = "/metadata/" + std::to_string(i + 1);
      EXPECT_EQ(test::original_string(j, repairs, at + "/key"), keys[i]);
      EXPECT_EQ(test::original_string(j, repairs, at + "/value"), values[i]);
    }
    for (size_t i = 0; i < tensor_names.size(); ++i) {
      EXPECT_EQ(test::original_string(j, repairs, "/tensors/" + std::to_string(i) + "/name"), tensor_names[i]);
    }
    EXPECT_FALSE(repairs.empty());
    (void)parsed(okapi_stdout("inspect --json " + shell_quote(file.string())));  // arrays cut short
  }
}

TEST_F(JsonUtf8, InspectGivesBackEveryLlama2cTokenExactly) {
  std::mt19937 rng(12);
  std::vector<std::string> tokens;
  std::string bytes;
  const auto put_i32 = [&bytes](int32_t v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put_i32(64);  // max_token_length
  for (int i = 0; i < 60; ++i) {
    tokens.push_back(test::utf8_torture_bytes(rng, 8).substr(0, 64));
    const float score = -static_cast<float>(i);
    bytes.append(reinterpret_cast<const char*>(&score), sizeof(score));
    put_i32(static_cast<int32_t>(tokens.back().size()));
    bytes += tokens.back();
  }
  const fs::path file = write_file("tokenizer.bin", bytes);
  const ordered_json j = parsed(okapi_stdout("inspect --json " + shell_quote(file.string())));
  const auto repairs = test::checked_repairs(j);
  ASSERT_EQ(j.at("entries").size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(test::original_string(j, repairs, "/entries/" + std::to_string(i) + "/name"), tokens[i]);
  }
  EXPECT_FALSE(repairs.empty());
}

TEST_F(JsonUtf8, RunGivesBackAPromptOfAnyBytes) {
  std::mt19937 rng(13);
  for (int i = 0; i < 10; ++i) {
    // argv cannot carry NUL; the shell passes every other byte through "$(cat FILE)" ("p": never empty).
    std::string prompt = "p";
    prompt += test::utf8_torture_bytes(rng, 10, /*allow_nul=*/false);
    const fs::path file = write_file("prompt.txt", prompt);
    const ordered_json j = parsed(okapi_stdout("run -m " + shell_quote(kModel.string()) + " --prompt=\"$(cat " +
                                               shell_quote(file.string()) + ")\" -n 8 -c 128 --temp 1.5 --seed " +
                                               std::to_string(i) + " --json"));
    const auto repairs = test::checked_repairs(j);
    EXPECT_EQ(test::original_string(j, repairs, "/prompt"), prompt);
    EXPECT_EQ(repairs.count("/prompt") == 1, !is_valid_utf8(prompt));
  }
}

TEST_F(JsonUtf8, TokenizeGivesBackEveryPiece) {
  std::mt19937 rng(14);
  size_t repaired = 0;
  for (int i = 0; i < 10; ++i) {
    const fs::path file = write_file("text.bin", test::utf8_torture_bytes(rng, 16));
    for (const fs::path& model : {kTok, kModel}) {
      const ordered_json j = parsed(okapi_stdout("tokenize -m " + shell_quote(model.string()) + " -f " +
                                                 shell_quote(file.string()) + " --json"));
      repaired += test::checked_repairs(j).size();
      EXPECT_EQ(j.at("pieces").size(), j.at("ids").size());
    }
  }
  EXPECT_GT(repaired, 0u);  // byte-fallback pieces of bad input are bad UTF-8 themselves
}

TEST_F(JsonUtf8, AModelFileNameThatIsNotUtf8IsGivenBackExactly) {
  const fs::path model = dir_ / "m\xff\xc3(\xed\xa0\x80.gguf";
  fs::copy_file(kModel, model);
  const std::string m = shell_quote(model.string());
  const auto expect_model_field = [&](const ordered_json& j, const std::string& field, const std::string& want) {
    EXPECT_EQ(test::original_string(j, test::checked_repairs(j), field), want);
  };
  expect_model_field(parsed(okapi_stdout("run -m " + m + " -n 2 --json")), "/model", model.string());
  expect_model_field(parsed(okapi_stdout("inspect --json " + m)), "/file", model.string());
  std::istringstream lines(okapi_stdout("bench -m " + m + " -p 4 -n 2 -r 1 --json"));
  for (std::string line; std::getline(lines, line);) {
    expect_model_field(parsed(line), "/model_filename", model.string());
  }
  const fs::path out = dir_ / "logits.bin";
  (void)okapi_stdout("logits -m " + m + " --tokens 1,2 -o " + shell_quote(out.string()));
  expect_model_field(parsed(test::read_file(dir_ / "logits.json")), "/model", model.string());
}

}  // namespace
}  // namespace okapi
