// Hidden states captured from the real forward pass of stories260K: rows line up with their
// tokens (layer 0 is the token's embedding), the output head rebuilt from the file gives the
// engine's logits, GTC runs on them with logits, and short texts / oversized captures are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "compress/spectra.hpp"
#include "core/error.hpp"
#include "eval/hidden_states.hpp"
#include "eval/perplexity.hpp"
#include "eval/trajectory_cache.hpp"
#include "format/model_file.hpp"
#include "model/model.hpp"
#include "support/paths.hpp"

namespace okapi::eval {
namespace {

std::unique_ptr<model::Model> stories260k() {
  return model::Model::load(gguf::open_model(test::repo_dir() / "models/stories260K.gguf"));
}

std::string story() { return okapi::read_text_file(test::repo_dir() / "examples/story.txt"); }

TEST(HiddenStates, RowsLineUpWithTokensAndTheHeadGivesTheEngineLogits) {
  const auto model = stories260k();
  HiddenStateOptions options;
  options.max_tokens = 150;
  options.n_ctx = 64;
  const HiddenStates s = capture_hidden_states(*model, story(), options);
  const int64_t d = model->hparams().n_embd;
  ASSERT_EQ(s.n_tokens, 150);
  EXPECT_EQ(s.n_layer, model->hparams().n_layer);
  EXPECT_EQ(s.n_ctx, 64);
  ASSERT_EQ(s.layers.size(), static_cast<size_t>(s.n_layer + 1));
  ASSERT_EQ(s.token_ids.size(), 150u);
  // 63 rows a chunk (the first of each skipped): positions 1..63, 1..63, 1..24.
  EXPECT_EQ(s.positions[0], 1);
  EXPECT_EQ(s.positions[62], 63);
  EXPECT_EQ(s.positions[63], 1);
  EXPECT_EQ(s.positions[149], 24);

  // Layer 0 is the residual before any block: the token's embedding row.
  const std::vector<float> embd = compress::dequantized_matrix(model->file().tensor("token_embd.weight"), "test");
  for (const int64_t t : {int64_t{0}, int64_t{70}, int64_t{149}}) {
    const float* row = embd.data() + s.token_ids[static_cast<size_t>(t)] * d;
    for (int64_t i = 0; i < d; ++i) ASSERT_FLOAT_EQ(s.row(0, t)[i], row[i]) << "token " << t;
  }
  // Later layers differ from layer 0 and hold finite values.
  double change = 0;
  for (int64_t i = 0; i < d; ++i) {
    ASSERT_TRUE(std::isfinite(s.row(s.n_layer, 5)[i]));
    change += std::fabs(s.row(s.n_layer, 5)[i] - s.row(0, 5)[i]);
  }
  EXPECT_GT(change, 0.0);

  const OutputHead head(*model);
  ASSERT_EQ(s.last_row_logits.size(), static_cast<size_t>(head.n_vocab()));
  std::vector<float> mine(static_cast<size_t>(head.n_vocab()));
  head.logits(s.row(s.n_layer, s.n_tokens - 1), mine.data());
  for (size_t v = 0; v < mine.size(); ++v) EXPECT_NEAR(mine[v], s.last_row_logits[v], 1e-3) << v;

  const GtcReport r = measure_trajectory_cache(s, &head, GtcOptions{});
  ASSERT_EQ(r.logits.size(), static_cast<size_t>(s.n_layer));
  for (const Transition& t : r.logits) {
    EXPECT_EQ(t.to, s.n_layer);
    for (const PredictionScore& sc : t.scores) {
      EXPECT_GE(sc.top1, 0.0);
      EXPECT_LE(sc.top1, 1.0);
      EXPECT_GE(sc.kl, 0.0);
    }
  }
  // The last block's step and its logits row are the same transition.
  EXPECT_EQ(r.steps.back().score(Predictor::Nearest).top1, r.logits.back().score(Predictor::Nearest).top1);
}

TEST(HiddenStates, RefusesShortTextsAndOversizedCaptures) {
  const auto model = stories260k();
  HiddenStateOptions options;
  try {
    capture_hidden_states(*model, "Once upon a time", options);
    FAIL() << "a four-word text was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least 64 are needed"), std::string::npos) << e.what();
  }
  options.max_bytes = 1000;
  try {
    capture_hidden_states(*model, story(), options);
    FAIL() << "a capture over max_bytes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ask for fewer tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace okapi::eval
