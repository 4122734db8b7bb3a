// The one generation loop (Scheduler + Sequence) on one slot, as okapi run drives it: greedy generation reproduces llama2.c/llama.cpp's stories260K story byte for byte,
// seeded sampling is deterministic, and bad inputs are clear errors.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/error.hpp"
#include "runtime/default_model.hpp"
#include "runtime/engine.hpp"
#include "runtime/scheduler.hpp"
#include "sample/sampler.hpp"
#include "support/paths.hpp"

namespace okapi::runtime {
namespace {

const std::filesystem::path kRepoModel = test::repo_dir() / "models" / "stories260K.gguf";

using test::read_file;

GenerationResult generate(const std::filesystem::path& model, const std::string& prompt, sample::SamplerConfig config,
                          int64_t n_predict, int threads = 1, int64_t n_ctx = 512) {
  const auto engine = Engine::load(model, {threads});
  SchedulerOptions options;
  options.n_ctx_per_slot = n_ctx;
  options.worker_thread = false;
  Scheduler scheduler(*engine, options);
  SequenceRequest request;
  request.prompt = tokenize_prompt(engine->tokenizer(), prompt);
  request.sampling = config;
  request.max_tokens = n_predict;
  return runtime::generate(scheduler, std::move(request));
}

sample::SamplerConfig greedy() {
  sample::SamplerConfig config;
  config.temperature = 0.0f;
  return config;
}

TEST(Generate, GreedyStoryMatchesReference) {
  const std::string expected = read_file(test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt");
  ASSERT_FALSE(expected.empty());
  const GenerationResult r = generate(kRepoModel, "Once upon a time", greedy(), 200);
  EXPECT_EQ(r.text, expected);
  EXPECT_EQ(r.tokens.size(), 200u);
  EXPECT_EQ(r.stop, StopReason::TokenLimit);
  EXPECT_EQ(r.stats.prompt_tokens, 5);  // BOS + "Once upon a time"
  EXPECT_GT(r.stats.generation_tokens_per_second(), 0.0);
}

TEST(Generate, GreedyStoryMatchesSharedGolden) {
  OKAPI_REQUIRE_SHARED();
  const auto golden = shared_dir() / "golden/public";
  const std::string expected = read_file(golden / "greedy/stories260K-once-upon-a-time.txt");
  const GenerationResult r = generate(golden / "models/stories260K.gguf", "Once upon a time", greedy(), 200);
  EXPECT_EQ(r.text, expected);
}

TEST(Generate, TwoThreadsKeepGreedyText) {
  const std::string expected = read_file(test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt");
  const GenerationResult two = generate(kRepoModel, "Once upon a time", greedy(), 200, 2);
  EXPECT_EQ(two.text, expected);
}

TEST(Generate, SeededSamplingIsDeterministic) {
  sample::SamplerConfig config;  // llama.cpp defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05
  config.seed = 1234;
  const GenerationResult a = generate(kRepoModel, "Once upon a time", config, 64);
  const GenerationResult b = generate(kRepoModel, "Once upon a time", config, 64);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.text, b.text);
  config.seed = 99;
  config.temperature = 1.5f;
  const GenerationResult c = generate(kRepoModel, "Once upon a time", config, 64);
  EXPECT_NE(a.tokens, c.tokens);
}

TEST(Generate, StopsWhenContextIsFull) {
  const GenerationResult r = generate(kRepoModel, "Once upon a time", greedy(), -1, 1, 16);
  EXPECT_EQ(r.stop, StopReason::ContextFull);
  EXPECT_EQ(r.stats.prompt_tokens + static_cast<int64_t>(r.tokens.size()), 17);  // the last token needs no cell
}

TEST(Generate, PromptLongerThanContextIsAnError) {
  const auto engine = Engine::load(kRepoModel, {});
  SchedulerOptions options;
  options.n_ctx_per_slot = 4;
  options.worker_thread = false;
  Scheduler scheduler(*engine, options);
  SequenceRequest request;
  request.prompt = tokenize_prompt(engine->tokenizer(), "Once upon a time there was a dog");
  request.sampling = greedy();
  try {
    runtime::generate(scheduler, std::move(request));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context"), std::string::npos) << e.what();
  }
}

TEST(Engine, MissingModelAndBadOptionsAreErrors) {
  EXPECT_THROW(Engine::load("/nonexistent/model.gguf", {}), Error);
  EXPECT_THROW(Engine::load(kRepoModel, {0}), Error);
  EXPECT_THROW((void)kv::CacheType::parse("q3"), Error);  // where a cache type's name comes in
}

TEST(Engine, DefaultModelIsFound) {
  EXPECT_TRUE(std::filesystem::is_regular_file(default_model_path()));
}

}  // namespace
}  // namespace okapi::runtime
