// Exact mode's quality (seed 000: "perplexity of exact mode within 0.1% of float mode on
// stories260K"): perplexity with --exact against float mode with an F32 KV cache, on the repo's
// example text and (with ../shared) on 5k tokens of TinyStories validation text.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <utility>

#include "eval/perplexity.hpp"
#include "runtime/engine.hpp"
#include "support/paths.hpp"

namespace okapi::test {
namespace {

double perplexity(bool exact, kv::ExactScores attention, const std::string& text, int64_t n_ctx, int64_t chunks) {
  runtime::EngineOptions options;
  options.threads = 2;
  options.exact = exact;
  options.exact_attention = attention;
  const auto engine = runtime::Engine::load(repo_dir() / "models/stories260K.gguf", options);
  eval::PerplexityOptions p;
  p.n_ctx = n_ctx;
  p.n_chunks = chunks;
  return eval::compute_perplexity(*engine, text, p).ppl;
}

void expect_within_a_tenth_of_a_percent(const std::string& text, int64_t n_ctx, int64_t chunks, const char* name) {
  const double float_ppl = perplexity(false, kv::ExactScores::Ntt, text, n_ctx, chunks);
  for (const auto& [attention, attention_name] :
       {std::pair{kv::ExactScores::Ntt, "ntt"}, std::pair{kv::ExactScores::Direct, "direct"}}) {
    const double exact_ppl = perplexity(true, attention, text, n_ctx, chunks);
    const double relative = (exact_ppl - float_ppl) / float_ppl;
    std::printf("%s -c %lld: float PPL %.6f, exact (%s) PPL %.6f, relative difference %+.2e\n", name,
                static_cast<long long>(n_ctx), float_ppl, attention_name, exact_ppl, relative);
    EXPECT_LT(std::fabs(relative), 1e-3) << name << " " << attention_name;
  }
}

TEST(ExactQuality, PerplexityWithinATenthOfAPercentOfFloatOnTheExampleText) {
  const std::string text = okapi::read_text_file(repo_dir() / "examples/story.txt");
  expect_within_a_tenth_of_a_percent(text, 64, -1, "examples/story.txt");
  expect_within_a_tenth_of_a_percent(text, 128, -1, "examples/story.txt");
}

TEST(ExactQuality, PerplexityWithinATenthOfAPercentOfFloatOnTinyStories) {
  OKAPI_REQUIRE_SHARED();
  const std::string text = okapi::read_text_file(shared_dir() / "text/tinystories-valid-head.txt");
  expect_within_a_tenth_of_a_percent(text, 256, 20, "tinystories-valid-head.txt (20 x 256 tokens)");
}

}  // namespace
}  // namespace okapi::test
