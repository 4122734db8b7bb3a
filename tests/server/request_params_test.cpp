// Request bodies: every field okapi reads is type- and range-checked into a 400 naming it;
// unknown fields are ignored; chat content parts are joined.
#include <gtest/gtest.h>

#include "server/api_error.hpp"
#include "server/request_params.hpp"

namespace okapi::server {
namespace {

// The status and param of the ApiError that parsing `body` throws (0 and "" if none).
std::pair<int, std::string> error_of(const std::string& body, bool chat = true) {
  try {
    const Json j = parse_body(body);
    parse_generation_params(j, chat, {});
    if (chat) parse_chat_input(j);
  } catch (const ApiError& e) {
    return {e.status(), e.param()};
  }
  return {0, ""};
}

TEST(RequestParams, NestingDeeperThanTheLimitIs400BeforeParsing) {
  const auto nested = [](size_t depth) {
    return "{\"messages\": " + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
  };
  // At the limit: parsed (and refused later only for what the messages are).
  EXPECT_NO_THROW(parse_body(nested(kMaxJsonDepth)));
  EXPECT_EQ(error_of(nested(kMaxJsonDepth + 1)).first, 400);
  // A million '[' (73 MB of nested arrays when parsed) is refused at once, with a message.
  try {
    parse_body(std::string(1'000'000, '['));
    FAIL() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("deeper than 128"), std::string::npos) << e.what();
  }
  // Brackets inside strings (escaped quotes included) do not count.
  const std::string in_string = "{\"prompt\": \"\\\"" + std::string(1000, '[') + "\"}";
  EXPECT_NO_THROW(parse_body(in_string)) << in_string.substr(0, 20);
}

TEST(RequestParams, InvalidJsonAndUtf8Are400) {
  EXPECT_EQ(error_of("{").first, 400);
  EXPECT_EQ(error_of("[1, 2]").first, 400);
  EXPECT_EQ(error_of("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}").first, 400);
  EXPECT_EQ(error_of("").first, 400);
  // A number beyond double is nlohmann's out_of_range, not a parse_error (found by request_fuzz).
  EXPECT_EQ(error_of(R"({"prompt": [0, 266e6666633324]})", false).first, 400);
}

TEST(RequestParams, WrongTypesNameTheField) {
  const std::string ok_messages = R"("messages": [{"role": "user", "content": "hi"}])";
  EXPECT_EQ(error_of("{" + ok_messages + R"(, "max_tokens": "x"})"), std::make_pair(400, std::string("max_tokens")));
  EXPECT_EQ(error_of("{" + ok_messages + R"(, "temperature": -1})"), std::make_pair(400, std::string("temperature")));
  EXPECT_EQ(error_of("{" + ok_messages + R"(, "top_p": 1.5})"), std::make_pair(400, std::string("top_p")));
  EXPECT_EQ(error_of("{" + ok_messages + R"(, "stop": 3})"), std::make_pair(400, std::string("stop")));
  EXPECT_EQ(error_of("{" + ok_messages + R"(, "stream": "yes"})"), std::make_pair(400, std::string("stream")));
  EXPECT_EQ(error_of("{" + ok_messages + ", \"stop\": \"" + std::string(300, 'x') + "\"}"),
            std::make_pair(400, std::string("stop")));
  EXPECT_EQ(error_of("{" + ok_messages + R"(, "n": 0})"), std::make_pair(400, std::string("n")));
  EXPECT_EQ(error_of("{" + ok_messages + R"(, "n": 129})"), std::make_pair(400, std::string("n")));
  EXPECT_EQ(error_of("{" + ok_messages + R"(, "n": "2"})"), std::make_pair(400, std::string("n")));
  EXPECT_EQ(error_of("{" + ok_messages + R"(, "max_tokens": 0})"), std::make_pair(400, std::string("max_tokens")));
  EXPECT_EQ(error_of("{" + ok_messages + R"(, "seed": 1.5})"), std::make_pair(400, std::string("seed")));
  EXPECT_EQ(error_of("{" + ok_messages + R"(, "top_logprobs": 3})"),
            std::make_pair(400, std::string("top_logprobs")));
  EXPECT_EQ(error_of("{" + ok_messages + R"(, "max_tokens": 18446744073709551615})"),
            std::make_pair(400, std::string("max_tokens")));
  EXPECT_EQ(error_of(R"({"messages": "hi"})"), std::make_pair(400, std::string("messages")));
  EXPECT_EQ(error_of(R"({"messages": []})"), std::make_pair(400, std::string("messages")));
  EXPECT_EQ(error_of(R"({"messages": [{"content": "hi"}]})"), std::make_pair(400, std::string("messages[0].role")));
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": 5}]})"),
            std::make_pair(400, std::string("messages[0].content")));
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
            std::make_pair(400, std::string("messages[0].content")));
}

TEST(RequestParams, UnknownFieldsAreIgnoredAndValuesRead) {
  const Json body = parse_body(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
      {"type": "text", "text": "b"}]}], "frobnicate": {"x": 1}, "temperature": 0, "max_tokens": 7, "seed": 42,
      "stop": ["x", "y"], "stream": true, "stream_options": {"include_usage": true}, "logprobs": true,
      "top_logprobs": 2, "top_k": 5})");
  const GenerationParams p = parse_generation_params(body, true, {});
  EXPECT_EQ(p.sampling.temperature, 0.0f);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.sampling.seed, 42u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_EQ(p.top_logprobs, 2);
  EXPECT_EQ(p.sampling.top_k, 5);
  const ChatInput in = parse_chat_input(body);
  EXPECT_EQ(in.messages[0]["content"], "a\nb");
  EXPECT_TRUE(in.add_generation_prompt);
  EXPECT_TRUE(in.tools.is_null());
}

TEST(RequestParams, NIsTheNumberOfChoices) {
  EXPECT_EQ(parse_generation_params(parse_body(R"({"prompt": "x"})"), false, {}).n, 1);
  EXPECT_EQ(parse_generation_params(parse_body(R"({"prompt": "x", "n": 3})"), false, {}).n, 3);
}

TEST(RequestParams, CompletionsLogprobsIsACount) {
  const GenerationParams p = parse_generation_params(parse_body(R"({"prompt": "x", "logprobs": 3})"), false, {});
  EXPECT_EQ(p.top_logprobs, 3);
  EXPECT_EQ(error_of(R"({"prompt": "x", "logprobs": 99})", false).second, "logprobs");
}

TEST(RequestParams, ErrorBodyHasOpenAiShape) {
  const ApiError e(400, "invalid_request_error", "bad", "max_tokens");
  const Json body = e.body();
  EXPECT_EQ(body["error"]["message"], "bad");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "max_tokens");
  EXPECT_EQ(body["error"]["code"], 400);
}

}  // namespace
}  // namespace okapi::server
