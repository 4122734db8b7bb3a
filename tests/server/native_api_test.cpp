// llama-server's native API shapes: prompts of text, ids, both, or several; logit_bias in both
// forms; completion_probabilities; timings; response_fields; generation_settings; Vertex names.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "server/api_error.hpp"
#include "server/native_shapes.hpp"

namespace okapi::server {
namespace {

// A stand-in tokenizer: one token per byte (id = byte + 10), BOS (1) before a first text.
std::vector<TokenId> bytes_of(std::string_view text, bool first) {
  std::vector<TokenId> out;
  if (first) out.push_back(1);
  for (const unsigned char c : text) out.push_back(static_cast<TokenId>(c) + 10);
  return out;
}
std::vector<TokenId> plain(std::string_view text) { return bytes_of(text, false); }

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e.status();
  }
  return 0;
}

TEST(NativePrompts, TextIdsMixedAndSeveral) {
  using P = std::vector<std::vector<TokenId>>;
  EXPECT_EQ(native_prompts(Json("ab"), 300, bytes_of), (P{{1, 107, 108}}));
  EXPECT_EQ(native_prompts(Json::parse("[5, 6]"), 300, bytes_of), (P{{5, 6}}));
  // Ids and text in one array are one prompt; only a first text gets the BOS.
  EXPECT_EQ(native_prompts(Json::parse(R"([5, "a", 6, "b"])"), 300, bytes_of), (P{{5, 107, 6, 108}}));
  EXPECT_EQ(native_prompts(Json::parse(R"(["a", 6])"), 300, bytes_of), (P{{1, 107, 6}}));
  // An array without ids is several prompts, each of any form.
  EXPECT_EQ(native_prompts(Json::parse(R"(["a", [5, 6], {"prompt_string": "b"}])"), 300, bytes_of),
            (P{{1, 107}, {5, 6}, {1, 108}}));
}

TEST(NativePrompts, MalformedOnesAre400) {
  for (const char* bad : {R"([])", R"([5, 300])", R"([-1])", R"({"x": 1})", R"([[5], 2.5])", R"(3.5)", R"(true)",
                          R"({"prompt_string": "a", "multimodal_data": ["AAAA"]})", R"([[]])",
                          R"([18446744073709551615])"}) {
    EXPECT_EQ(status_of([&] { native_prompts(Json::parse(bad), 300, bytes_of); }), 400) << bad;
  }
}

TEST(NativeLogitBias, BothFormsIdsTextsAndBans) {
  const auto bias = native_logit_bias(Json::parse(R"([[5, -1.5], ["ab", false], [999, 1], ["x"], [6, "y"]])"), 300, plain);
  ASSERT_EQ(bias.size(), 3u);
  EXPECT_EQ(bias[0], (std::pair<TokenId, float>{5, -1.5f}));
  EXPECT_EQ(bias[1].first, 107);
  EXPECT_TRUE(std::isinf(bias[1].second) && bias[1].second < 0);
  EXPECT_EQ(bias[2].first, 108);
  const auto object = native_logit_bias(Json::parse(R"({"7": 2, "a": -100, "9x": false})"), 300, plain);
  ASSERT_EQ(object.size(), 4u);
  EXPECT_EQ(object[0], (std::pair<TokenId, float>{7, 2.0f}));
  EXPECT_EQ(object[1], (std::pair<TokenId, float>{107, -100.0f}));
  EXPECT_EQ(object[2].first, '9' + 10);  // "9x" is a text: its two tokens
  EXPECT_EQ(object[3].first, 'x' + 10);
  EXPECT_EQ(status_of([] { native_logit_bias(Json("no"), 300, plain); }), 400);
}

TEST(NativeParams, IgnoreEosBansEndTokensAndFieldsAreChecked) {
  const auto p = parse_native_params(Json::parse(R"({"ignore_eos": true, "n_probs": 3, "id_slot": 1})"), 300, 2, {2}, plain);
  ASSERT_EQ(p.logit_bias.size(), 1u);
  EXPECT_EQ(p.logit_bias[0].first, 2);
  EXPECT_EQ(p.n_probs, 3);
  EXPECT_EQ(p.id_slot, 1);
  const Json settings = native_generation_settings({}, 8, {}, false, p, 0);
  ASSERT_EQ(settings["logit_bias"].size(), 1u);
  EXPECT_TRUE(settings["logit_bias"][0]["bias"].is_null());  // -infinity, as llama-server writes it
  EXPECT_EQ(settings["n_predict"], 8);
  // logprobs stands for n_probs when that is absent.
  EXPECT_EQ(parse_native_params(Json::parse(R"({"logprobs": 4})"), 300, 1, {}, plain).n_probs, 4);
  for (const char* bad : {R"({"id_slot": 2})", R"({"n_probs": -1})", R"({"n_probs": 100000})", R"({"samplers": 3})",
                          R"({"response_fields": "content"})", R"({"cache_prompt": 1})"})
    EXPECT_EQ(status_of([&] { parse_native_params(Json::parse(bad), 300, 2, {}, plain); }), 400) << bad;
}

TEST(NativeShapes, ProbabilitiesTimingsAndFields) {
  runtime::TokenLogprob t;
  t.id = 5;
  t.token = "\xC3";  // half a character: the token text is cut, the bytes are whole
  t.logprob = std::log(0.5f);
  t.top = {{"a", std::log(0.5f)}, {"b", -std::numeric_limits<float>::infinity()}};
  t.top_ids = {5, 6};
  const Json pre = native_probabilities({t}, false);
  EXPECT_EQ(pre[0]["token"], "");
  EXPECT_EQ(pre[0]["bytes"], Json::array({0xC3}));
  EXPECT_EQ(pre[0]["top_logprobs"][1]["id"], 6);
  EXPECT_EQ(pre[0]["top_logprobs"][1]["logprob"].get<float>(), std::numeric_limits<float>::lowest());
  const Json post = native_probabilities({t}, true);
  EXPECT_NEAR(post[0]["prob"].get<double>(), 0.5, 1e-6);
  EXPECT_TRUE(post[0].contains("top_probs"));

  runtime::GenerationStats s;
  s.prompt_tokens = 10;
  s.cached_tokens = 4;
  s.generated_tokens = 16;
  s.prompt_seconds = 0.5;
  s.generation_seconds = 1.5;
  const Json timings = native_timings(s);
  EXPECT_EQ(timings["prompt_n"], 6);
  EXPECT_EQ(timings["cache_n"], 4);
  EXPECT_NEAR(timings["predicted_per_second"].get<double>(), 15 / 1.5, 1e-9);  // the first token is free
  s.generated_tokens = 1;
  EXPECT_EQ(native_timings(s)["predicted_per_token_ms"], 0.0);

  const Json res = {{"content", "x"}, {"generation_settings", {{"n_predict", 32}}}};
  const Json picked = native_select_fields(res, {"content", "generation_settings/n_predict", "missing", "content/deeper"});
  EXPECT_EQ(picked, (Json{{"content", "x"}, {"generation_settings/n_predict", 32}}));
}

TEST(NativeShapes, VertexRouteNames) {
  EXPECT_EQ(gcp_route_alias("/v1/chat/completions"), "chatCompletions");
  EXPECT_EQ(gcp_route_alias("/completion"), "completion");
  EXPECT_EQ(gcp_route_alias("/apply-template"), "applyTemplate");
  EXPECT_EQ(gcp_route_alias("/slots/:id_slot"), "slots");
}

}  // namespace
}  // namespace okapi::server
