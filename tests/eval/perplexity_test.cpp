// Perplexity against llama-perplexity's golden numbers (stories260K, 40 chunks at c = 128 / 256),
// per chunk and final value ± standard error; the save / KL-divergence round trip.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "eval/perplexity.hpp"
#include "runtime/engine.hpp"
#include "support/cache_types.hpp"
#include "support/paths.hpp"

namespace okapi::eval {
namespace {

using test::read_file;

void check_against_golden(int64_t n_ctx) {
  const auto golden = shared_dir() / "golden/public";
  const auto expected = nlohmann::json::parse(read_file(golden / fmt::format("ppl/stories260K__c{}.json", n_ctx)));
  const auto engine = runtime::Engine::load(golden / "models/stories260K.gguf", {2, test::cache_types("f16", "f16")});  // llama.cpp's cache
  PerplexityOptions options;
  options.n_ctx = n_ctx;
  options.batch_size = n_ctx;
  options.n_chunks = 40;
  const PerplexityResult r = compute_perplexity(
      *engine, read_text_file(golden / "ppl/tinystories_valid_excerpt.txt"), options);
  EXPECT_EQ(r.n_tokens_text, expected["total_tokens_in_text"].get<int64_t>());
  ASSERT_EQ(r.n_chunks, 40);
  EXPECT_EQ(r.scored, 40 * expected["scored_tokens_per_chunk"].get<int64_t>());
  const double golden_ppl = expected["final_ppl"].get<double>();
  EXPECT_LE(std::abs(r.ppl - golden_ppl) / golden_ppl, 5e-4) << r.ppl << " vs " << golden_ppl;
  EXPECT_NEAR(r.ppl_stderr, expected["final_ppl_stderr"].get<double>(), 2e-4);
  const auto& chunks = expected["per_chunk_mean_nll_exact"];
  ASSERT_EQ(chunks.size(), r.chunk_mean_nll.size());
  for (size_t i = 0; i < chunks.size(); ++i)
    EXPECT_NEAR(r.chunk_mean_nll[i], chunks[i].get<double>(), 5e-4) << "chunk " << i;
}

TEST(Perplexity, MatchesLlamaCppAtContext128) {
  OKAPI_REQUIRE_SHARED();
  check_against_golden(128);
}

TEST(Perplexity, MatchesLlamaCppAtContext256) {
  OKAPI_REQUIRE_SHARED();
  check_against_golden(256);
}

std::string repo_text() {
  // Enough TinyStories-like text from the repo's own data for a few chunks of 32 tokens.
  std::string text;
  for (int i = 0; i < 12; ++i)
    text += "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ";
  return text;
}

TEST(Perplexity, SavedLogitsCompareToThemselvesWithZeroDivergence) {
  const auto dir = test::make_temp_dir("ppl");
  const auto engine = runtime::Engine::load(test::repo_dir() / "models/stories260K.gguf", {1});
  PerplexityOptions options;
  options.n_ctx = 32;
  options.batch_size = 16;  // two batches per chunk
  options.save_logits = dir / "base.bin";
  const PerplexityResult base = compute_perplexity(*engine, repo_text(), options);
  ASSERT_GT(base.n_chunks, 2);
  EXPECT_GT(base.ppl, 1.0);
  EXPECT_LT(base.ppl, 10.0);  // the model knows this text well
  options.save_logits.clear();
  options.kl_divergence = dir / "base.bin";
  options.batch_size = 32;  // one batch: same numbers up to summation order
  const PerplexityResult again = compute_perplexity(*engine, repo_text(), options);
  ASSERT_TRUE(again.kl.has_value());
  EXPECT_NEAR(again.ppl, base.ppl, 1e-4 * base.ppl);
  EXPECT_LT(std::abs(again.kl->kld_mean), 1e-6);
  EXPECT_DOUBLE_EQ(again.kl->same_top_fraction, 1.0);
  EXPECT_NEAR(again.kl->ppl_base, base.ppl, 1e-4 * base.ppl);

  // A different context cannot be compared.
  options.n_ctx = 16;
  EXPECT_THROW(compute_perplexity(*engine, repo_text(), options), Error);
  std::filesystem::remove_all(dir);
}

TEST(Perplexity, TextShorterThanTwoContextsIsAnError) {
  const auto engine = runtime::Engine::load(test::repo_dir() / "models/stories260K.gguf", {});
  PerplexityOptions options;
  options.n_ctx = 512;
  EXPECT_THROW(compute_perplexity(*engine, "Once upon a time", options), Error);
}

}  // namespace
}  // namespace okapi::eval
