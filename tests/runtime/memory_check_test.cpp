// Sizes that come from flags are checked before anything is allocated: -c as llama.cpp reads it
// (0: the trained context, negative: a usage error, beyond training: a warning), a context or test
// size that cannot fit is refused with what it needs and what is available (never std::bad_alloc),
// and the estimate behind it grows with what it should.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "model/hparams.hpp"
#include "model/memory_estimate.hpp"
#include "runtime/engine.hpp"
#include "support/measured_run.hpp"
#include "support/paths.hpp"
#include "support/tiny_models.hpp"

namespace okapi::runtime {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxWorkRssKb = 300 * 1024;  // a tiny model's run, sanitizer builds included
const std::string kHugeContext = "2000000000";  // terabytes of KV cache for any model

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

model::HParams trained_on(int64_t n_ctx_train) {
  model::HParams hp;
  hp.n_ctx_train = n_ctx_train;
  return hp;
}

TEST(ContextFlag, ZeroIsTheTrainedContextAndNotGivenIsCapped) {
  EXPECT_EQ(resolve_context(0, trained_on(131072)), 131072);
  EXPECT_EQ(resolve_context(kContextNotGiven, trained_on(131072)), kDefaultContextCap);
  EXPECT_EQ(resolve_context(kContextNotGiven, trained_on(2048)), 2048);
  EXPECT_EQ(resolve_context(77, trained_on(2048)), 77);
  // A model that does not say: the default either way.
  EXPECT_EQ(resolve_context(0, trained_on(0)), kDefaultContextCap);
  EXPECT_EQ(resolve_context(kContextNotGiven, trained_on(0)), kDefaultContextCap);
}

TEST(ContextFlag, NegativeIsAUsageErrorStatingTheRange) {
  try {
    (void)resolve_context(-5, trained_on(2048));
    FAIL() << "-c -5 was accepted";
  } catch (const UsageError& e) {
    EXPECT_TRUE(contains(e.what(), "the context length must be 0 (the model's trained context, 2048) or a positive"))
        << e.what();
    EXPECT_EQ(e.setting(), Setting::ContextLength);  // the CLI adds "(-c)"
  }
  EXPECT_THROW((void)resolve_context(int64_t{1} << 31, trained_on(2048)), UsageError);  // int32 positions
  EXPECT_THROW((void)resolve_context(0, trained_on(int64_t{1} << 40)), UsageError);
}

TEST(MemoryEstimate, GrowsWithContextBatchAndExactCopies) {
  const std::vector<uint8_t> bytes = test::tiny_model("llama");
  const gguf::File file = gguf::File::parse(bytes, "llama");
  const model::HParams hp = model::HParams::from_gguf(file);
  model::RunShape run;
  run.n_ctx = 100;
  const model::MemoryEstimate base = model::estimate_memory(file, hp, run);
  EXPECT_EQ(base.weights, 0.0);  // float mode reads the mapped weights in place
  EXPECT_GT(base.kv, 0.0);
  run.n_ctx = 1000;
  EXPECT_DOUBLE_EQ(model::estimate_memory(file, hp, run).kv, 10 * base.kv);
  run.cache = {kv::CacheType::f16(), kv::CacheType::f16()};
  EXPECT_DOUBLE_EQ(model::estimate_memory(file, hp, run).kv, 5 * base.kv);
  run.n_ctx = 100;
  run.batch = 1;
  const double one_token = model::estimate_memory(file, hp, run).scratch;
  run.batch = 64;
  EXPECT_GT(model::estimate_memory(file, hp, run).scratch, 10 * one_token - 1e6);
  run.exact = true;
  EXPECT_GT(model::estimate_memory(file, hp, run).weights, 0.0);
}

class MemoryCheckCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::make_temp_dir("memory-check");
    model_ = (dir_ / "tiny.gguf").string();
    write(model_, test::tiny_model("llama"));
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void write(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  // A refusal: exit 1, the sizes in the message, no std::bad_alloc, little memory used.
  static void expect_refused(const test::MeasuredRun& r, const std::string& flag) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "okapi: error:")) << r.output;
    EXPECT_TRUE(contains(r.output, "needs")) << r.output;
    EXPECT_TRUE(contains(r.output, "available")) << r.output;
    EXPECT_TRUE(contains(r.output, "try a smaller " + flag)) << r.output;
    EXPECT_FALSE(contains(r.output, "bad_alloc")) << r.output;
    EXPECT_LT(r.work_rss_kb, kMaxWorkRssKb);
  }

  fs::path dir_;
  std::string model_;
};

TEST_F(MemoryCheckCli, HugeContextIsRefusedBeforeAllocating) {
  const auto run = test::run_okapi_measured({"run", "-m", model_, "-n", "1", "-c", kHugeContext});
  expect_refused(run, "-c");
  EXPECT_TRUE(contains(run.output, "KV cache")) << run.output;
  EXPECT_TRUE(contains(run.output, "for a context of " + kHugeContext + " tokens")) << run.output;
  EXPECT_TRUE(contains(run.output, "-ctk/-ctv f16")) << run.output;
  expect_refused(test::run_okapi_measured({"run", "-m", model_, "-n", "1", "-c", kHugeContext, "--exact"}), "-c");
  expect_refused(test::run_okapi_measured({"logits", "-m", model_, "-p", "hi", "-o", (dir_ / "l.bin").string(), "-c",
                                           kHugeContext}),
                 "-c");
  expect_refused(test::run_okapi_measured({"bench", "-m", model_, "-p", kHugeContext, "-n", "0", "-r", "1"}), "-p");
  expect_refused(test::run_okapi_measured({"bench", "-m", model_, "-p", "0", "-n", kHugeContext, "-r", "1"}), "-n");
}

TEST_F(MemoryCheckCli, ZeroContextOfAHugeTrainedContextIsRefused) {
  // Metadata alone (context_length) cannot make the default run allocate: -c not given caps it.
  const std::vector<uint8_t> valid = test::tiny_model("llama");  // the File views these bytes
  const gguf::File file = gguf::File::parse(valid, "llama");
  const std::string path = (dir_ / "long-context.gguf").string();
  write(path, test::with_metadata(file, "llama.context_length", uint64_t{1} << 30));
  const auto plain = test::run_okapi_measured({"run", "-m", path, "-n", "1", "-p", "hi"});
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  expect_refused(test::run_okapi_measured({"run", "-m", path, "-n", "1", "-p", "hi", "-c", "0"}), "-c");
}

TEST_F(MemoryCheckCli, NegativeContextIsRefusedStatingTheRange) {
  const auto r = test::run_okapi_measured({"run", "-m", model_, "-n", "1", "-c", "-5"});
  EXPECT_EQ(r.exit_code, 2) << r.output;  // a usage error, refused while parsing
  EXPECT_TRUE(contains(r.output, "--ctx-size: -5 is out of range [0, ")) << r.output;
}

TEST_F(MemoryCheckCli, ContextBeyondTrainingWarnsAndRuns) {
  const auto r = test::run_okapi_measured({"run", "-m", model_, "-n", "1", "-c", "256"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "okapi: warning: a context of 256 tokens is beyond the model's trained context (128); "
                                 "quality will degrade (-c)"))
      << r.output;
  const auto within = test::run_okapi_measured({"run", "-m", model_, "-n", "1", "-c", "0"});
  EXPECT_EQ(within.exit_code, 0) << within.output;
  EXPECT_FALSE(contains(within.output, "warning")) << within.output;
}

TEST_F(MemoryCheckCli, LongPromptIsEchoedAfterItsBatches) {
  // A prompt of several batches (progress is drawn only on a terminal): stdout is still the
  // prompt followed by the generated text.
  const std::string prompt = "Once upon a time there was a little dog who liked to run in the park";
  const auto r = test::run_okapi_measured({"run", "-m", model_, "-n", "2", "-b", "4", "-p", prompt, "--temp", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind(prompt, 0), 0u) << r.output;
}

}  // namespace
}  // namespace okapi::runtime
