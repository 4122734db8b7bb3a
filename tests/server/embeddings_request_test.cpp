// The embeddings and rerank request bodies and responses (server/embeddings.hpp), without a
// model: a fake tokenizer gives one token per character between [CLS]=1 and [SEP]=2.
#include <gtest/gtest.h>

#include <cstring>

#include "server/api_error.hpp"
#include "server/embeddings.hpp"

namespace okapi::server {
namespace {

constexpr int32_t kCls = 1, kSep = 2;

std::vector<int32_t> fake_tokens(std::string_view text) {
  std::vector<int32_t> tokens{kCls};
  for (const char c : text) tokens.push_back(10 + static_cast<unsigned char>(c) % 50);
  tokens.push_back(kSep);
  return tokens;
}

std::vector<int32_t> fake_pair(std::string_view query, std::string_view document) {
  auto tokens = fake_tokens(query);
  const auto second = fake_tokens(document);
  tokens.insert(tokens.end(), second.begin() + 1, second.end());
  return tokens;
}

EmbeddingLimits limits() {
  EmbeddingLimits l;
  l.n_vocab = 100;
  l.max_input_tokens = 8;
  l.max_input_reason = "a forward pass, -b / -ub 8";
  l.max_inputs = 4;
  l.width = 3;
  l.end_tokens = {kSep};
  return l;
}

EmbeddingsRequest parse(const std::string& body, bool openai = true, EmbeddingLimits l = limits()) {
  return parse_embeddings_request(Json::parse(body), openai, l, fake_tokens);
}

// The ApiError parsing `body` throws: status, param and message ("" if none).
struct Refusal {
  int status = 0;
  std::string param, message, code;
};
Refusal refusal(const std::string& body, bool openai = true, EmbeddingLimits l = limits()) {
  try {
    parse(body, openai, l);
  } catch (const ApiError& e) {
    return {e.status(), e.param(), e.what(), e.code()};
  }
  return {};
}

TEST(EmbeddingsRequest, InputShapes) {
  auto r = parse(R"({"input": "ab"})");
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0], fake_tokens("ab"));
  EXPECT_EQ(r.prompt_tokens, 4);
  EXPECT_EQ(r.shape, EmbeddingsShape::OpenAI);

  r = parse(R"({"input": ["a", "bcd"]})");
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[1], fake_tokens("bcd"));
  EXPECT_EQ(r.prompt_tokens, 3 + 5);

  // Token ids are taken as they are (no [CLS]/[SEP] added), as llama-server.
  r = parse(R"({"input": [5, 6, 7]})");
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0], (std::vector<int32_t>{5, 6, 7}));
  r = parse(R"({"input": [[5], [6, 7], "x"]})");
  ASSERT_EQ(r.inputs.size(), 3u);
  EXPECT_EQ(r.inputs[1], (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(r.inputs[2], fake_tokens("x"));

  // llama-server's `content` answers in the native shape, whatever the route.
  r = parse(R"({"content": "a"})", true);
  EXPECT_EQ(r.shape, EmbeddingsShape::Native);
  EXPECT_EQ(parse(R"({"input": "a"})", false).shape, EmbeddingsShape::Native);
}

TEST(EmbeddingsRequest, FieldsAndDefaults) {
  auto r = parse(R"({"input": "a", "encoding_format": "base64", "model": "m", "embd_normalize": -1, "dimensions": 3})");
  EXPECT_TRUE(r.base64);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.normalize, -1);
  r = parse(R"({"input": "a", "encoding_format": "float"})");
  EXPECT_FALSE(r.base64);
  EXPECT_EQ(r.normalize, 2);
  EXPECT_TRUE(r.model.empty());
}

TEST(EmbeddingsRequest, BadInputsAre400sNamingTheField) {
  EXPECT_EQ(refusal(R"({})").param, "input");
  EXPECT_EQ(refusal(R"({"input": null})").status, 400);
  EXPECT_EQ(refusal(R"({"input": ""})").param, "input");
  EXPECT_EQ(refusal(R"({"input": []})").param, "input");
  EXPECT_EQ(refusal(R"({"input": 5})").param, "input");
  EXPECT_EQ(refusal(R"({"input": {"a": 1}})").param, "input");
  EXPECT_EQ(refusal(R"({"content": ""})").param, "content");
  // An empty string inside the array names its index.
  auto e = refusal(R"({"input": ["a", "", "b"]})");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("input[1]"), std::string::npos) << e.message;
  e = refusal(R"({"input": [[5], []]})");
  EXPECT_NE(e.message.find("input[1]"), std::string::npos) << e.message;
  e = refusal(R"({"input": ["a", [5, "x"]]})");
  EXPECT_NE(e.message.find("input[1]"), std::string::npos) << e.message;
  // Token ids out of range, negative or not integers.
  for (const char* body : {R"({"input": [5, 100]})", R"({"input": [[5], [-1]]})", R"({"input": [1.5]})",
                           R"({"input": [18446744073709551615]})"}) {
    e = refusal(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, "input") << body;
    EXPECT_NE(e.message.find("[0, 100)"), std::string::npos) << e.message;
  }
  EXPECT_EQ(refusal(R"({"input": "a", "encoding_format": "int8"})").param, "encoding_format");
  EXPECT_EQ(refusal(R"({"input": "a", "dimensions": 2})").param, "dimensions");
  EXPECT_EQ(refusal(R"({"input": "a", "dimensions": "3"})").param, "dimensions");
  EXPECT_EQ(refusal(R"({"input": "a", "embd_normalize": "x"})").param, "embd_normalize");
  EXPECT_EQ(refusal(R"({"input": "a", "truncate": 1})").param, "truncate");
  EXPECT_EQ(refusal(R"({"input": "a", "model": 3})").param, "model");
}

TEST(EmbeddingsRequest, TooManyInputsSaysTheLimit) {
  EXPECT_EQ(refusal(R"({"input": ["a", "b", "c", "d"]})").status, 0);
  const auto e = refusal(R"({"input": ["a", "b", "c", "d", "e"]})");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("5 inputs"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("at most 4"), std::string::npos) << e.message;
}

TEST(EmbeddingsRequest, LongInputIs400UnlessTruncateIsAsked) {
  // "abcdefg" is 9 tokens with [CLS] and [SEP]; 8 fit.
  auto e = refusal(R"({"input": ["ab", "abcdefg"]})");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_NE(e.message.find("input[1] has 9 tokens"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("-b / -ub 8"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("truncate"), std::string::npos) << e.message;
  // Cut, keeping [SEP] last.
  auto r = parse(R"({"input": ["ab", "abcdefg"], "truncate": true})");
  ASSERT_EQ(r.inputs[1].size(), 8u);
  EXPECT_EQ(r.inputs[1].front(), kCls);
  EXPECT_EQ(r.inputs[1].back(), kSep);
  EXPECT_EQ(r.inputs[1][6], fake_tokens("abcdefg")[6]);
  EXPECT_EQ(r.prompt_tokens, 4 + 8);
  // Token ids without an end token are cut plainly.
  r = parse(R"({"input": [[3, 4, 5, 6, 7, 8, 9, 10, 11]], "truncate": true})");
  EXPECT_EQ(r.inputs[0], (std::vector<int32_t>{3, 4, 5, 6, 7, 8, 9, 10}));
  // A text far beyond the limit is refused before tokenizing.
  EmbeddingLimits l = limits();
  l.max_bytes_per_token = 2;
  bool tokenized = false;
  try {
    parse_embeddings_request(Json{{"input", std::string(100, 'x')}}, true, l, [&](std::string_view t) {
      tokenized = true;
      return fake_tokens(t);
    });
    FAIL() << "no error";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status(), 400);
    EXPECT_NE(std::string(error.what()).find("at least 50 tokens"), std::string::npos) << error.what();
  }
  EXPECT_FALSE(tokenized);
}

TEST(EmbeddingsRequest, PoolingNoneOnlyNativeAndBounded) {
  EmbeddingLimits l = limits();
  l.per_token = true;
  EXPECT_NE(refusal(R"({"input": "a"})", true, l).message.find("not OAI compatible"), std::string::npos);
  EXPECT_EQ(refusal(R"({"input": "a"})", false, l).status, 0);
  l.max_output_values = 3 * 6;  // six tokens of three values
  EXPECT_EQ(refusal(R"({"input": ["a", "b"]})", false, l).status, 0);
  EXPECT_EQ(refusal(R"({"input": ["a", "b", "c"]})", false, l).status, 400);
}

TEST(EmbeddingsResponse, OpenAiFloatAndBase64) {
  EmbeddingsRequest request = parse(R"({"input": ["a", "b"]})");
  std::vector<runtime::EmbeddingOutput> outputs(2);
  outputs[0] = {3, {0.1f, -2.5f, 3e-8f}};
  outputs[1] = {3, {1.0f, 0.0f, -0.0f}};
  const Json floats = Json::parse(embeddings_response(request, outputs, false, "served.gguf"));
  EXPECT_EQ(floats["model"], "served.gguf");
  EXPECT_EQ(floats["object"], "list");
  EXPECT_EQ(floats["usage"]["prompt_tokens"], 6);
  EXPECT_EQ(floats["usage"]["total_tokens"], 6);
  ASSERT_EQ(floats["data"].size(), 2u);
  EXPECT_EQ(floats["data"][1]["index"], 1);
  EXPECT_EQ(floats["data"][1]["object"], "embedding");
  // Shortest text that reads back as the same float32.
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(floats["data"][0]["embedding"][i].get<float>(), outputs[0].values[i]);

  request.base64 = true;
  request.model = "asked-for";
  const Json b64 = Json::parse(embeddings_response(request, outputs, false, "served.gguf"));
  EXPECT_EQ(b64["model"], "asked-for");
  EXPECT_EQ(b64["data"][0]["encoding_format"], "base64");
  EXPECT_EQ(b64["data"][1]["embedding"], base64_floats(outputs[1].values));
}

TEST(EmbeddingsResponse, Base64IsLittleEndianFloat32) {
  // 1.0f = 00 00 80 3f; 2.0f = 00 00 00 40.
  EXPECT_EQ(base64_floats(std::vector<float>{1.0f}), "AACAPw==");
  EXPECT_EQ(base64_floats(std::vector<float>{1.0f, 2.0f}), "AACAPwAAAEA=");
  EXPECT_EQ(base64_floats(std::vector<float>{1.0f, 2.0f, 1.0f}), "AACAPwAAAEAAAIA/");
  EXPECT_EQ(base64_floats(std::vector<float>{}), "");
}

TEST(EmbeddingsResponse, NativeShapeIsRowsOfVectors) {
  EmbeddingsRequest request = parse(R"({"content": ["a"]})");
  std::vector<runtime::EmbeddingOutput> outputs(1);
  outputs[0] = {2, {1, 2, 3, 4, 5, 6}};
  const Json per_token = Json::parse(embeddings_response(request, outputs, true, "m"));
  ASSERT_TRUE(per_token.is_array());
  EXPECT_EQ(per_token[0]["index"], 0);
  EXPECT_EQ(per_token[0]["embedding"], Json::parse("[[1,2,3],[4,5,6]]"));
  outputs[0] = {2, {1, 2, 3}};
  const Json pooled = Json::parse(embeddings_response(request, outputs, false, "m"));
  EXPECT_EQ(pooled[0]["embedding"], Json::parse("[[1,2,3]]"));
}

TEST(RerankRequest, ShapesAndErrors) {
  const auto l = limits();
  auto r = parse_rerank_request(Json::parse(R"({"query": "q", "documents": ["ab", {"text": "c"}], "top_n": 1})"), l,
                                fake_pair);
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0], fake_pair("q", "ab"));
  EXPECT_EQ(r.documents[1], "c");
  EXPECT_EQ(r.top_n, 1u);
  EXPECT_FALSE(r.tei);
  EXPECT_EQ(r.prompt_tokens, 6 + 5);
  r = parse_rerank_request(Json::parse(R"({"query": "q", "texts": ["a"]})"), l, fake_pair);
  EXPECT_TRUE(r.tei);
  EXPECT_EQ(r.top_n, 1u);

  const auto param_of = [&](const std::string& body) {
    try {
      parse_rerank_request(Json::parse(body), l, fake_pair);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << body;
      return e.param();
    }
    return std::string("(none)");
  };
  EXPECT_EQ(param_of(R"({"documents": ["a"]})"), "query");
  EXPECT_EQ(param_of(R"({"query": 1, "documents": ["a"]})"), "query");
  EXPECT_EQ(param_of(R"({"query": "q"})"), "documents");
  EXPECT_EQ(param_of(R"({"query": "q", "documents": []})"), "documents");
  EXPECT_EQ(param_of(R"({"query": "q", "documents": [1]})"), "documents");
  EXPECT_EQ(param_of(R"({"query": "q", "documents": [{"title": "a"}]})"), "documents");
  EXPECT_EQ(param_of(R"({"query": "q", "documents": ["a"], "top_n": -1})"), "top_n");
  EXPECT_EQ(param_of(R"({"query": "q", "documents": ["a", "b", "c", "d", "e"]})"), "documents");
  EXPECT_EQ(param_of(R"({"query": "q", "documents": ["abcdefg"]})"), "documents");
  EXPECT_EQ(param_of(R"({"query": "q", "documents": ["abcdefg"], "truncate": true})"), "(none)");
}

TEST(RerankResponse, SortedByScoreTopNAndDocuments) {
  RerankRequest request =
      parse_rerank_request(Json::parse(R"({"query": "q", "documents": ["a", "b", "c"], "top_n": 2,
                                           "return_documents": true})"),
                           limits(), fake_pair);
  std::vector<runtime::EmbeddingOutput> outputs(3);
  outputs[0] = {4, {-1.5f}};
  outputs[1] = {4, {2.0f}};
  outputs[2] = {4, {0.25f}};
  const Json body = rerank_response(request, outputs, "reranker.gguf");
  EXPECT_EQ(body["model"], "reranker.gguf");
  EXPECT_EQ(body["object"], "list");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 3 * 5);  // [CLS] q [SEP] d [SEP] each
  ASSERT_EQ(body["results"].size(), 2u);
  EXPECT_EQ(body["results"][0]["index"], 1);
  EXPECT_EQ(body["results"][0]["relevance_score"], 2.0);
  EXPECT_EQ(body["results"][0]["document"]["text"], "b");
  EXPECT_EQ(body["results"][1]["index"], 2);

  request.return_documents = false;
  request.top_n = 0;
  EXPECT_TRUE(rerank_response(request, outputs, "m")["results"].empty());
  request.top_n = 3;
  EXPECT_FALSE(rerank_response(request, outputs, "m")["results"][0].contains("document"));
  // TEI: a bare array with `score` (and `text` with return_text).
  request.tei = true;
  request.return_text = true;
  const Json tei = rerank_response(request, outputs, "m");
  ASSERT_TRUE(tei.is_array());
  EXPECT_EQ(tei[2]["index"], 0);
  EXPECT_EQ(tei[2]["score"], -1.5);
  EXPECT_EQ(tei[2]["text"], "a");
}

}  // namespace
}  // namespace okapi::server
