// Anthropic's Messages API: requests converted to OpenAI chat bodies (with 400s naming the field
// for wrong shapes), and the message and event-stream shapes written back.
#include <gtest/gtest.h>

#include "server/anthropic_api.hpp"
#include "server/request_params.hpp"

namespace okapi::server::anthropic {
namespace {

Json convert(const std::string& body, bool count_tokens = false) {
  return to_openai_chat(parse_body(body), count_tokens);
}

// The status and param of the ApiError that converting `body` throws (0 and "" if none).
std::pair<int, std::string> error_of(const std::string& body) {
  try {
    convert(body);
  } catch (const ApiError& e) {
    return {e.status(), e.param()};
  }
  return {0, ""};
}

TEST(AnthropicApi, SystemAndSimpleMessages) {
  const Json out = convert(R"({"model": "m", "max_tokens": 50, "system": "Be brief.",
                               "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})");
  EXPECT_EQ(out["messages"], Json::parse(R"([{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "Hi"},
                                             {"role": "assistant", "content": "Hello"}])"));
  EXPECT_EQ(out["max_tokens"], 50);
  // System text blocks are joined; max_tokens defaults to 4096 as llama-server's.
  const Json blocks = convert(R"({"system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B", "cache_control": {}}],
                                  "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(blocks["messages"][0]["content"], "AB");
  EXPECT_EQ(blocks["max_tokens"], 4096);
}

TEST(AnthropicApi, BillingHeaderStampIsBlanked) {
  const Json out = convert(R"({"system": "x-anthropic-billing-header: cc_version=2.1; cch=a5145;You are Claude Code.",
                               "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(out["messages"][0]["content"], "x-anthropic-billing-header: cc_version=2.1; cch=fffff;You are Claude Code.");
}

TEST(AnthropicApi, ToolUseAndResultsBecomeToolCallsAndToolMessages) {
  const Json out = convert(R"({"messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "Look it up.", "signature": "s"},
                                        {"type": "text", "text": "Checking."},
                                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [{"type": "text", "text": "Here:"},
                                   {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "Sunny"}, {"type": "text", "text": ", 25C"}]},
                                   {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true, "content": "City not found"}]}]})");
  const Json& m = out["messages"];
  ASSERT_EQ(m.size(), 5u) << m.dump();
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[1]["content"], Json::parse(R"([{"type": "text", "text": "Checking."}])"));
  EXPECT_EQ(m[1]["reasoning_content"], "Look it up.");
  EXPECT_EQ(m[1]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(m[1]["tool_calls"][0]["function"]["arguments"].get<std::string>()), Json::parse(R"({"city": "Paris"})"));
  // Tool results first (they answer the previous turn), text-only results joined, then the user's words.
  EXPECT_EQ(m[2], Json::parse(R"({"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny, 25C"})"));
  EXPECT_EQ(m[3], Json::parse(R"({"role": "tool", "tool_call_id": "toolu_2", "content": "City not found"})"));
  EXPECT_EQ(m[4]["role"], "user");
  EXPECT_EQ(m[4]["content"][0]["text"], "Here:");
  // An assistant turn of only a call has empty content.
  const Json call_only = convert(R"({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f"}]}]})");
  EXPECT_EQ(call_only["messages"][0]["content"], "");
  EXPECT_EQ(call_only["messages"][0]["tool_calls"][0]["function"]["arguments"], "{}");
}

TEST(AnthropicApi, ImagesBecomeImageUrlParts) {
  const Json out = convert(R"({"messages": [{"role": "user", "content": [
      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
      {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
      {"type": "text", "text": "What?"}]}]})");
  const Json& parts = out["messages"][0]["content"];
  EXPECT_EQ(parts[0]["image_url"]["url"], "data:image/png;base64,AAAA");
  EXPECT_EQ(parts[1]["image_url"]["url"], "https://example.com/a.png");
  EXPECT_TRUE(has_image(out));
  // ... in a tool result too (which then keeps its parts).
  const Json in_result = convert(R"({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
      "content": [{"type": "text", "text": "File"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}]}]}]})");
  EXPECT_TRUE(has_image(in_result));
  EXPECT_FALSE(has_image(convert(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]})")));
}

TEST(AnthropicApi, ToolsToolChoiceAndThinking) {
  const Json out = convert(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"name": "calc", "description": "Math", "input_schema": {"type": "object", "properties": {"e": {"type": "string"}}}}],
      "tool_choice": {"type": "tool", "name": "calc", "disable_parallel_tool_use": true},
      "thinking": {"type": "enabled", "budget_tokens": 1024}, "stop_sequences": ["END"],
      "temperature": 0.5, "top_p": 0.9, "top_k": 40, "stream": true, "metadata": {"user_id": "u"}})");
  EXPECT_EQ(out["tools"][0], Json::parse(R"({"type": "function", "function": {"name": "calc", "description": "Math",
                                             "parameters": {"type": "object", "properties": {"e": {"type": "string"}}}}})"));
  EXPECT_EQ(out["tool_choice"], Json::parse(R"({"type": "function", "function": {"name": "calc"}})"));
  EXPECT_EQ(out["parallel_tool_calls"], false);
  EXPECT_EQ(out["thinking_budget_tokens"], 1024);
  EXPECT_EQ(out["stop"], Json::parse(R"(["END"])"));
  EXPECT_EQ(out["top_k"], 40);
  EXPECT_EQ(out["stream"], true);
  EXPECT_FALSE(out.contains("metadata"));
  const auto choice = [](const std::string& c) {
    return convert(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}], "tool_choice": )" + c + "}");
  };
  EXPECT_EQ(choice(R"({"type": "any"})")["tool_choice"], "required");
  EXPECT_EQ(choice(R"({"type": "auto"})")["tool_choice"], "auto");
  EXPECT_EQ(choice(R"({"type": "none"})")["tool_choice"], "none");
  EXPECT_EQ(choice(R"({"type": "auto"})")["parallel_tool_calls"], true);  // Anthropic's default
  // A tool without a schema takes any object.
  EXPECT_EQ(choice(R"({"type": "auto"})")["tools"][0]["function"]["parameters"]["type"], "object");
  EXPECT_EQ(convert(R"({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "disabled"}})")["thinking_budget_tokens"], 0);
}

TEST(AnthropicApi, CountTokensBodyHasNoGenerationFields) {
  const Json out = convert(R"({"messages": [{"role": "user", "content": "x"}], "stop_sequences": 5})", true);
  EXPECT_FALSE(out.contains("max_tokens"));
  EXPECT_FALSE(out.contains("stop"));
}

TEST(AnthropicApi, EmptyMessagesAreOneEmptyUserTurn) {
  EXPECT_EQ(convert(R"({"messages": []})")["messages"], Json::parse(R"([{"role": "user", "content": ""}])"));
}

TEST(AnthropicApi, WrongShapesAre400NamingTheField) {
  EXPECT_EQ(error_of(R"({"max_tokens": 5})"), std::make_pair(400, std::string("messages")));
  EXPECT_EQ(error_of(R"({"messages": {}})"), std::make_pair(400, std::string("messages")));
  EXPECT_EQ(error_of(R"({"messages": ["hi"]})"), std::make_pair(400, std::string("messages[0]")));
  EXPECT_EQ(error_of(R"({"messages": [{"role": "tool", "content": "x"}]})"), std::make_pair(400, std::string("messages[0].role")));
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user"}]})"), std::make_pair(400, std::string("messages[0].content")));
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": 5}]})"), std::make_pair(400, std::string("messages[0].content")));
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})"),
            std::make_pair(400, std::string("messages[0].content[0].type")));
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]})"),
            std::make_pair(400, std::string("messages[0].content[0].text")));
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": [{"type": "tool_use", "name": "f"}]}]})"),
            std::make_pair(400, std::string("messages[0].content[0]")));
  EXPECT_EQ(error_of(R"({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": "x"}]}]})"),
            std::make_pair(400, std::string("messages[0].content[0].input")));
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})"),
            std::make_pair(400, std::string("messages[0].content[0].tool_use_id")));
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]})"),
            std::make_pair(400, std::string("messages[0].content[0].source.type")));
  EXPECT_EQ(error_of(R"({"messages": [], "system": 5})"), std::make_pair(400, std::string("system")));
  EXPECT_EQ(error_of(R"({"messages": [], "system": [{"type": "image"}]})"), std::make_pair(400, std::string("system[0]")));
  EXPECT_EQ(error_of(R"({"messages": [], "tools": {}})"), std::make_pair(400, std::string("tools")));
  EXPECT_EQ(error_of(R"({"messages": [], "tools": [{"description": "x"}]})"), std::make_pair(400, std::string("tools[0].name")));
  EXPECT_EQ(error_of(R"({"messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]})"),
            std::make_pair(400, std::string("tools[0].type")));
  EXPECT_EQ(error_of(R"({"messages": [], "tools": [{"name": "f", "input_schema": "x"}]})"),
            std::make_pair(400, std::string("tools[0].input_schema")));
  EXPECT_EQ(error_of(R"({"messages": [], "tool_choice": "auto"})"), std::make_pair(400, std::string("tool_choice")));
  EXPECT_EQ(error_of(R"({"messages": [], "tool_choice": {"type": "some"}})"), std::make_pair(400, std::string("tool_choice.type")));
  EXPECT_EQ(error_of(R"({"messages": [], "tool_choice": {"type": "tool"}})"), std::make_pair(400, std::string("tool_choice.name")));
  EXPECT_EQ(error_of(R"({"messages": [], "thinking": {"type": "enabled", "budget_tokens": -1}})"),
            std::make_pair(400, std::string("thinking.budget_tokens")));
  EXPECT_EQ(error_of(R"({"messages": [], "thinking": {"type": "on"}})"), std::make_pair(400, std::string("thinking.type")));
  EXPECT_EQ(error_of(R"({"messages": [], "stop_sequences": [1]})"), std::make_pair(400, std::string("stop_sequences")));
  EXPECT_EQ(error_of(R"({"messages": [], "metadata": "u"})"), std::make_pair(400, std::string("metadata")));
  EXPECT_EQ(error_of(R"({"messages": [], "metadata": {"user_id": 3}})"), std::make_pair(400, std::string("metadata.user_id")));
}

TEST(AnthropicApi, ErrorShape) {
  EXPECT_EQ(error_body(400, "bad"), Json::parse(R"({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}})"));
  EXPECT_STREQ(error_type(401), "authentication_error");
  EXPECT_STREQ(error_type(404), "not_found_error");
  EXPECT_STREQ(error_type(413), "request_too_large");
  EXPECT_STREQ(error_type(503), "overloaded_error");
  EXPECT_STREQ(error_type(500), "api_error");
}

TEST(AnthropicApi, StopReasons) {
  using runtime::StopReason;
  EXPECT_STREQ(stop_reason(StopReason::EndOfGeneration, false, ""), "end_turn");
  EXPECT_STREQ(stop_reason(StopReason::EndOfGeneration, true, ""), "tool_use");
  EXPECT_STREQ(stop_reason(StopReason::StopString, false, "END"), "stop_sequence");
  EXPECT_STREQ(stop_reason(StopReason::StopString, false, ""), "end_turn");  // a template's own stop
  EXPECT_STREQ(stop_reason(StopReason::TokenLimit, true, ""), "max_tokens");
  EXPECT_STREQ(stop_reason(StopReason::ContextFull, false, ""), "max_tokens");
}

TEST(AnthropicApi, WholeMessage) {
  runtime::GenerationStats stats;
  stats.prompt_tokens = 12;
  stats.cached_tokens = 4;
  stats.generated_tokens = 7;
  chat::ChatMessage message;
  message.reasoning_content = "2+2 is 4.";
  message.content = "4";
  message.tool_calls.push_back({"calc", R"({"e": "2+2"})", "toolu_1"});
  message.tool_calls.push_back({"calc", "not json", "toolu_2"});
  const Json j = message_json({"msg_1", 0, "m"}, message, "tool_use", "", stats);
  EXPECT_EQ(j, Json::parse(R"({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
      "content": [{"type": "thinking", "thinking": "2+2 is 4.", "signature": ""}, {"type": "text", "text": "4"},
                  {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {"e": "2+2"}},
                  {"type": "tool_use", "id": "toolu_2", "name": "calc", "input": {}}],
      "stop_reason": "tool_use", "stop_sequence": null,
      "usage": {"input_tokens": 8, "cache_read_input_tokens": 4, "output_tokens": 7}})"));
  EXPECT_EQ(message_json({"msg_1", 0, "m"}, {}, "stop_sequence", "END", stats)["stop_sequence"], "END");
  EXPECT_EQ(message_json({"msg_1", 0, "m"}, {}, "end_turn", "", stats)["content"], Json::array());
}

std::vector<std::string> names(const std::vector<Event>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.name + (e.data.contains("delta") && e.data["delta"].contains("type")
                                                           ? ":" + e.data["delta"]["type"].get<std::string>()
                                                           : ""));
  return out;
}

TEST(AnthropicApi, StreamBlocksFollowOneAnother) {
  MessageStream stream({"msg_1", 0, "m"});
  const auto start = stream.start(9);
  ASSERT_EQ(start.size(), 2u);
  EXPECT_EQ(start[0].data["message"]["usage"]["input_tokens"], 9);
  EXPECT_EQ(start[0].data["message"]["content"], Json::array());
  EXPECT_EQ(start[1].name, "ping");
  std::vector<Event> all;
  const auto add = [&](const std::vector<Event>& events) { all.insert(all.end(), events.begin(), events.end()); };
  add(stream.push({{{"reasoning_content", "Think"}}, {{"reasoning_content", "ing"}}}));
  add(stream.push({{{"content", "Hi"}}}));
  add(stream.push({Json::parse(R"({"tool_calls": [{"index": 0, "id": "toolu_a", "type": "function", "function": {"name": "f", "arguments": ""}}]})"),
                   Json::parse(R"({"tool_calls": [{"index": 0, "function": {"arguments": "{\"x\":"}}]})"),
                   Json::parse(R"({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]})"),
                   Json::parse(R"({"tool_calls": [{"index": 1, "id": "toolu_b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]})")}));
  runtime::GenerationStats stats;
  stats.prompt_tokens = 9;
  stats.generated_tokens = 20;
  add(stream.finish("tool_use", "", stats));
  EXPECT_EQ(names(all), (std::vector<std::string>{
                            "content_block_start", "content_block_delta:thinking_delta", "content_block_delta:thinking_delta",
                            "content_block_delta:signature_delta", "content_block_stop",
                            "content_block_start", "content_block_delta:text_delta", "content_block_stop",
                            "content_block_start", "content_block_delta:input_json_delta", "content_block_delta:input_json_delta",
                            "content_block_stop", "content_block_start", "content_block_delta:input_json_delta",
                            "content_block_stop", "message_delta", "message_stop"}));
  // Indices count the blocks; a block's deltas and stop carry its index.
  EXPECT_EQ(all[0].data["index"], 0);
  EXPECT_EQ(all[0].data["content_block"], Json::parse(R"({"type": "thinking", "thinking": ""})"));
  EXPECT_EQ(all[5].data["index"], 1);
  EXPECT_EQ(all[6].data["delta"]["text"], "Hi");
  EXPECT_EQ(all[8].data["index"], 2);
  EXPECT_EQ(all[8].data["content_block"], Json::parse(R"({"type": "tool_use", "id": "toolu_a", "name": "f", "input": {}})"));
  EXPECT_EQ(all[9].data["delta"]["partial_json"], "{\"x\":");
  EXPECT_EQ(all[12].data["index"], 3);
  EXPECT_EQ(all[14].data["index"], 3);
  EXPECT_EQ(all[15].data["delta"], Json::parse(R"({"stop_reason": "tool_use", "stop_sequence": null})"));
  EXPECT_EQ(all[15].data["usage"]["output_tokens"], 20);
  EXPECT_EQ(sse(all[16]), "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
}

TEST(AnthropicApi, StreamWithNothingSaidHasNoBlocks) {
  MessageStream stream({"msg_1", 0, "m"});
  EXPECT_TRUE(stream.push({}).empty());
  EXPECT_EQ(names(stream.finish("max_tokens", "", {})), (std::vector<std::string>{"message_delta", "message_stop"}));
}

}  // namespace
}  // namespace okapi::server::anthropic
