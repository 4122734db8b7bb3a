// `okapi logits` end to end on the repo's stories260K: the .bin holds [n_tokens x n_vocab]
// float32 equal to the library's logits, the .json the ids and top-10; bad input exits non-zero.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "kv/kv_store.hpp"
#include "backend/cpu_ops.hpp"
#include "model/evaluate.hpp"
#include "model/model.hpp"
#include "support/paths.hpp"

namespace okapi::test {
namespace {

int run_cli(const std::string& args, const std::filesystem::path& log) {
  const std::string cmd = cli_path().string() + " logits " + args + " > " + log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(LogitsVerb, WritesLogitsAndJson) {
  const auto dir = make_temp_dir("logits_verb");
  const auto model = repo_dir() / "models/stories260K.gguf";
  const auto out = dir / "out.bin";
  ASSERT_EQ(run_cli("-m " + model.string() + " --tokens 1,403,407,261,378 -o " + out.string() + " -t 2 -b 2 -c 16",
                    dir / "log.txt"),
            0)
      << slurp(dir / "log.txt");
  const nlohmann::json j = nlohmann::json::parse(slurp(dir / "out.json"));
  EXPECT_EQ(j.at("tokens").get<std::vector<int32_t>>(), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(j.at("n_vocab").get<int64_t>(), 512);
  EXPECT_EQ(j.at("top10").size(), 5u);
  EXPECT_EQ(j.at("model_sha256").get<std::string>().size(), 64u);
  const std::string bin = slurp(out);
  ASSERT_EQ(bin.size(), 5u * 512u * sizeof(float));

  // Same numbers as the library (token by token, F32 cache).
  const auto m = model::Model::load(gguf::File::open(model));
  auto kv = kv::make_f32_store({5, 4, 8, 8, 16}, isa());
  backend::CpuOps ops;
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378};
  const auto expected = model::evaluate_all(*m, ops, *kv, tokens, 1);
  std::vector<float> got(expected.size());
  std::memcpy(got.data(), bin.data(), bin.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expected[i], 1e-4) << i;
  EXPECT_EQ(j.at("top10").at(4).at(0).at("id").get<int32_t>(),
            static_cast<int32_t>(std::max_element(got.end() - 512, got.end()) - (got.end() - 512)));

  // The prompt path and the llama.cpp-style cache flags; --force: out.json is there from the first run.
  ASSERT_EQ(run_cli("-m " + model.string() + " -p \"Once upon a time\" -o " + out.string() +
                        " -ctk f16 -ctv f16 --force",
                    dir / "log.txt"),
            0)
      << slurp(dir / "log.txt");
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "out.json")).at("cache_type_k").get<std::string>(), "f16");
  std::filesystem::remove_all(dir);
}

TEST(LogitsVerb, BadInputIsAnError) {
  const auto dir = make_temp_dir("logits_verb_bad");
  const auto model = repo_dir() / "models/stories260K.gguf";
  const auto out = (dir / "out.bin").string();
  EXPECT_EQ(run_cli("-m " + model.string() + " --tokens 1,999 -o " + out, dir / "log.txt"), 1);
  EXPECT_NE(slurp(dir / "log.txt").find("out of range"), std::string::npos) << slurp(dir / "log.txt");
  EXPECT_EQ(run_cli("-m " + model.string() + " --tokens 1,2,3,4 -c 2 -o " + out, dir / "log.txt"), 1);
  EXPECT_NE(slurp(dir / "log.txt").find("context"), std::string::npos) << slurp(dir / "log.txt");
  // Usage errors (a malformed list, an unknown cache type) exit with 2.
  EXPECT_EQ(run_cli("-m " + model.string() + " --tokens 1,x -o " + out, dir / "log.txt"), 2);
  EXPECT_EQ(run_cli("-m " + model.string() + " --tokens 1 -ctk q9 -o " + out, dir / "log.txt"), 2);
  EXPECT_NE(slurp(dir / "log.txt").find("q9"), std::string::npos) << slurp(dir / "log.txt");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace okapi::test
