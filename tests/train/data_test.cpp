// Training data: tokenization equals the tokenizer's own output, the shard cache is used and
// self-healing, the split is by position, and the window sampler is seeded and restorable.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "core/error.hpp"
#include "eval/perplexity.hpp"
#include "support/paths.hpp"
#include "train/data.hpp"

namespace okapi::train {
namespace {

namespace fs = std::filesystem;

const fs::path kTok512 = test::repo_dir() / "models" / "tok512.bin";
const fs::path kStory = test::repo_dir() / "examples" / "story.txt";

std::vector<fs::path> cache_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  return out;
}

TEST(TrainData, TokenizesLikeTheTokenizerWithBosAndCachesTheShard) {
  const auto dir = test::make_temp_dir("train-data");
  const TrainingTokenizer tok = load_training_tokenizer(kTok512);
  EXPECT_EQ(tok.vocab_size(), 512);
  ASSERT_TRUE(tok.llama2c.has_value());
  tokenizer::EncodeOptions options;
  const auto expected = tok.tokenizer.encode(okapi::read_text_file(kStory), options);
  ASSERT_GT(expected.size(), 500u);
  EXPECT_EQ(expected[0], tok.tokenizer.vocab().bos);

  bool hit = true;
  EXPECT_EQ(tokenize_cached(kStory, tok, dir / "cache", &hit), expected);
  EXPECT_FALSE(hit);
  ASSERT_EQ(cache_files(dir / "cache").size(), 1u);
  EXPECT_EQ(tokenize_cached(kStory, tok, dir / "cache", &hit), expected);
  EXPECT_TRUE(hit);

  // A damaged shard is not trusted: it is re-tokenized and rewritten.
  const fs::path shard = cache_files(dir / "cache")[0];
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x7f');
  }
  EXPECT_EQ(tokenize_cached(kStory, tok, dir / "cache", &hit), expected);
  EXPECT_FALSE(hit);
  EXPECT_EQ(tokenize_cached(kStory, tok, dir / "cache", &hit), expected);
  EXPECT_TRUE(hit);
  fs::remove_all(dir);
}

TEST(TrainData, DifferentTextGetsADifferentShard) {
  const auto dir = test::make_temp_dir("train-data-key");
  const TrainingTokenizer tok = load_training_tokenizer(kTok512);
  std::ofstream(dir / "a.txt") << "Once upon a time there was a cat.";
  std::ofstream(dir / "b.txt") << "Once upon a time there was a dog.";
  const auto a = tokenize_cached(dir / "a.txt", tok, dir / "cache");
  const auto b = tokenize_cached(dir / "b.txt", tok, dir / "cache");
  EXPECT_NE(a, b);
  EXPECT_EQ(cache_files(dir / "cache").size(), 2u);
  fs::remove_all(dir);
}

TEST(TrainData, SplitsByPositionWithTheLastTenthHeldOut) {
  const auto dir = test::make_temp_dir("train-split");
  const TrainingTokenizer tok = load_training_tokenizer(kTok512);
  const std::vector<fs::path> files = {kStory, kStory};
  const Dataset data = build_dataset(files, tok, dir / "cache", 0.1, 16);
  const auto one = tokenize_cached(kStory, tok, dir / "cache");
  const size_t n = 2 * one.size();
  EXPECT_EQ(data.held_out.size(), static_cast<size_t>(std::ceil(0.1 * static_cast<double>(n))));
  EXPECT_EQ(data.train.size() + data.held_out.size(), n);
  EXPECT_EQ(data.cache_hits, 1);  // the second file is the first's shard
  // Concatenation in order: the second document starts with BOS right after the first.
  EXPECT_EQ(data.train[one.size()], tok.tokenizer.vocab().bos);
  EXPECT_TRUE(std::equal(data.held_out.begin(), data.held_out.end(), one.end() - static_cast<long>(data.held_out.size())));
  EXPECT_EQ(data.sha256.size(), 64u);
  EXPECT_THROW(build_dataset(files, tok, dir / "cache", 0.1, 400), Error);  // held-out part too short
  EXPECT_THROW(build_dataset(files, tok, dir / "cache", 1.5, 16), Error);
  EXPECT_THROW(build_dataset({}, tok, dir / "cache", 0.1, 16), Error);
  fs::remove_all(dir);
}

TEST(TrainData, RngIsDeterministicAndRestorable) {
  Rng a(42), b(42), c(43);
  std::vector<uint64_t> sa, sc;
  for (int i = 0; i < 8; ++i) sa.push_back(a.next()), sc.push_back(c.next());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b.next(), sa[static_cast<size_t>(i)]);
  EXPECT_NE(sa, sc);
  const Rng::State saved = a.state();
  const uint64_t x = a.next();
  a.set_state(saved);
  EXPECT_EQ(a.next(), x);
  std::set<uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const uint64_t v = a.below(7);
    ASSERT_LT(v, 7u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 7u);
}

TEST(TrainData, WindowsAreShiftedSlicesAndTheSamplerResumesExactly) {
  std::vector<int32_t> train(300);
  for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<int32_t>(i);
  const int64_t batch = 3, seq = 10;
  WindowSampler s(train, seq, 7);
  std::vector<int32_t> tokens(batch * seq), targets(tokens.size());
  s.next_batch(batch, tokens, targets);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      const auto i = static_cast<size_t>(b * seq + t);
      EXPECT_EQ(targets[i], tokens[i] + 1);
      if (t > 0) {
        EXPECT_EQ(tokens[i], tokens[i - 1] + 1);
      }
    }
    EXPECT_LE(targets[static_cast<size_t>(b * seq + seq - 1)], 299);
  }
  const WindowSampler::State saved = s.state();
  EXPECT_EQ(saved.windows_drawn, 3u);
  std::vector<int32_t> next_tokens(tokens.size()), next_targets(tokens.size());
  s.next_batch(batch, next_tokens, next_targets);
  WindowSampler resumed(train, seq, 999);  // the seed is overridden by the restored state
  resumed.restore(saved);
  std::vector<int32_t> again(tokens.size()), again_targets(tokens.size());
  resumed.next_batch(batch, again, again_targets);
  EXPECT_EQ(again, next_tokens);
  EXPECT_EQ(again_targets, next_targets);
  EXPECT_THROW(s.next_batch(batch + 1, tokens, targets), Error);
  EXPECT_THROW(WindowSampler(std::span<const int32_t>(train.data(), 5), seq, 1), Error);
}

TEST(TrainData, EvalWindowsAreConsecutiveAndCapped) {
  std::vector<int32_t> held(95);
  for (size_t i = 0; i < held.size(); ++i) held[i] = static_cast<int32_t>(i);
  const EvalWindows all = make_eval_windows(held, 10, 0);
  EXPECT_EQ(all.count, 9);  // 9 * 10 + 1 <= 95
  EXPECT_EQ(all.tokens[10], 10);
  EXPECT_EQ(all.targets[89], 90);
  EXPECT_EQ(make_eval_windows(held, 10, 4).count, 4);
  EXPECT_THROW(make_eval_windows(held, 100, 0), Error);
}

TEST(TrainData, BadTokenizerPathsAreClearErrors) {
  EXPECT_THROW(load_training_tokenizer("/nonexistent/tok.bin"), Error);
  const auto dir = test::make_temp_dir("train-badtok");
  std::ofstream(dir / "junk.bin") << "definitely not a tokenizer";
  EXPECT_THROW(load_training_tokenizer(dir / "junk.bin"), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::train
