// The Responses API's pieces without a server: input items as chat messages, the response store's
// LRU bound, the writer's items and events; and the chat request details llama-server's suite
// checks (prefill / continue_final_message, the error fields of an over-long prompt).
#include <gtest/gtest.h>

#include "server/api_error.hpp"
#include "server/request_params.hpp"
#include "server/responses_api.hpp"

namespace okapi::server {
namespace {

// The param of the 400 that reading `body` throws ("" if none).
std::string bad_param(const Json& body, const Json& previous = Json()) {
  try {
    parse_responses_request(body, previous);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param();
  }
  return "";
}

TEST(ResponsesRequest, TextInputAndInstructionsBecomeChatMessages) {
  const ResponsesRequest r = parse_responses_request(
      Json::parse(R"({"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 9, "temperature": 0.5,
                      "top_k": 3, "store": false, "metadata": {"a": "b"}})"),
      Json());
  EXPECT_EQ(r.chat_body["messages"], Json::parse(R"([{"role": "system", "content": "Be brief."},
                                                       {"role": "user", "content": "Hi"}])"));
  EXPECT_EQ(r.chat_body["max_tokens"], 9);
  EXPECT_EQ(r.chat_body["temperature"], 0.5);
  EXPECT_EQ(r.chat_body["top_k"], 3);  // llama.cpp's own fields pass through
  for (const char* gone : {"input", "instructions", "max_output_tokens", "store", "metadata"})
    EXPECT_FALSE(r.chat_body.contains(gone)) << gone;
  // Instructions are not part of the stored conversation (OpenAI does not carry them over).
  EXPECT_EQ(r.conversation, Json::parse(R"([{"role": "user", "content": "Hi"}])"));
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
  EXPECT_EQ(r.echo["metadata"], Json::parse(R"({"a": "b"})"));
}

TEST(ResponsesRequest, ItemsBecomeMessagesToolCallsAndToolResults) {
  const Json previous = Json::parse(R"([{"role": "user", "content": "Earlier"}, {"role": "assistant", "content": "Yes"}])");
  const ResponsesRequest r = parse_responses_request(Json::parse(R"({"input": [
      {"role": "developer", "content": "Rules"},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
      {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "thinking"}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
      {"role": "user", "content": "Thanks"}],
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
    "tool_choice": {"type": "function", "name": "get_weather"}})"),
                                                     previous);
  const Json expected = Json::parse(R"([
      {"role": "user", "content": "Earlier"}, {"role": "assistant", "content": "Yes"},
      {"role": "system", "content": "Rules"},
      {"role": "user", "content": "a\nb"},
      {"role": "assistant", "content": null, "reasoning_content": "thinking", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny", "name": "get_weather"},
      {"role": "assistant", "content": "It is sunny."},
      {"role": "user", "content": "Thanks"}])");
  EXPECT_EQ(r.chat_body["messages"], expected) << r.chat_body["messages"].dump(1);
  EXPECT_EQ(r.conversation, expected);
  EXPECT_EQ(r.chat_body["tools"], Json::parse(R"([{"type": "function", "function":
      {"name": "get_weather", "parameters": {"type": "object"}}}])"));
  EXPECT_EQ(r.chat_body["tool_choice"], Json::parse(R"({"type": "function", "function": {"name": "get_weather"}})"));
}

TEST(ResponsesRequest, TextFormatBecomesResponseFormat) {
  const ResponsesRequest r = parse_responses_request(
      Json::parse(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {"const": 1}}}})"),
      Json());
  EXPECT_EQ(r.chat_body["response_format"],
            Json::parse(R"({"type": "json_schema", "json_schema": {"name": "n", "schema": {"const": 1}}})"));
  EXPECT_FALSE(r.chat_body.contains("text"));
}

TEST(ResponsesRequest, MalformedInputIs400NamingTheField) {
  EXPECT_EQ(bad_param(Json::parse(R"({})")), "input");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": null})")), "input");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": {"role": "user"}})")), "input");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": []})")), "input");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": [7]})")), "input[0]");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": [{"role": "wizard", "content": "x"}]})")), "input[0].role");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": [{"role": "user"}]})")), "input[0]");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]})")),
            "input[0].content[0]");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]})")), "input[0]");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": [{"type": "function_call_output", "call_id": "c"}]})")), "input[0]");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": [{"type": "item_reference", "id": "x"}]})")), "input[0]");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": "x", "tools": {}})")), "tools");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": "x", "tools": [{"type": "function"}]})")), "tools[0]");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": "x", "max_output_tokens": "9"})")), "max_output_tokens");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": "x", "text": {"format": {"type": "yaml"}}})")), "text.format.type");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": "x", "instructions": 3})")), "instructions");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": "x", "store": "yes"})")), "store");
  // Fields of the wrong JSON type are 400s too, not a library's type error.
  EXPECT_EQ(bad_param(Json::parse(R"({"input": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]})")),
            "input[0].content[0]");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": [{"type": 5, "role": "user", "content": "x"}]})")), "input[0]");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": [{"role": 5, "content": "x"}]})")), "input[0]");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": "x", "tools": [{"type": 5}]})")), "tools[0]");
  EXPECT_EQ(bad_param(Json::parse(R"({"input": "x", "text": {"format": {"type": [1]}}})")), "text.format.type");
}

TEST(ResponseStore, KeepsTheMostRecentlyUsed) {
  ResponseStore store(2, 1 << 20);
  store.put("a", Json::array({1}));
  store.put("b", Json::array({2}));
  ASSERT_TRUE(store.get("a"));  // now a is the most recent: c pushes b out
  store.put("c", Json::array({3}));
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.get("a"), Json::array({1}));
  EXPECT_FALSE(store.get("b"));
  EXPECT_EQ(store.get("c"), Json::array({3}));
  store.put("c", Json::array({4}));  // replaced, not doubled
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.get("c"), Json::array({4}));
}

TEST(ResponseStore, BoundedInBytes) {
  ResponseStore store(100, 40);  // bytes of JSON text
  const Json twenty = Json::array({std::string(16, 'x')});  // ["xxxxxxxxxxxxxxxx"]: 20 bytes
  store.put("a", twenty);
  store.put("b", twenty);
  EXPECT_EQ(store.size(), 2u);
  store.put("c", twenty);  // 60 bytes: the oldest goes
  EXPECT_EQ(store.size(), 2u);
  EXPECT_FALSE(store.get("a"));
  store.put("huge", Json::array({std::string(100, 'x')}));  // larger than the whole store: not kept
  EXPECT_FALSE(store.get("huge"));
  EXPECT_TRUE(store.get("b"));
  EXPECT_TRUE(store.get("c"));
}

ResponseHeader header() { return ResponseHeader{"resp_1", 100, "m"}; }

TEST(ResponsesWriter, StreamEventsOpenAndCloseItemsInOrder) {
  ResponsesWriter w(header(), Json::object());
  std::vector<Json> events = w.begin();
  for (const auto& batch : {w.deltas({Json{{"reasoning_content", "hm"}}}, Json()),
                            w.deltas({Json{{"content", "He"}}, Json{{"content", "llo"}}}, Json{{"predicted_n", 2}}),
                            w.deltas({Json::parse(R"({"tool_calls": [{"index": 0, "id": "call_x", "type": "function",
                                                       "function": {"name": "f", "arguments": ""}}]})"),
                                      Json::parse(R"({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})")},
                                     Json())})
    events.insert(events.end(), batch.begin(), batch.end());
  chat::ChatMessage message;
  message.reasoning_content = "hm";
  message.content = "Hello";
  message.tool_calls.push_back({"f", "{}", "call_x"});
  runtime::GenerationStats stats;
  stats.prompt_tokens = 5;
  stats.cached_tokens = 1;
  stats.generated_tokens = 3;
  const std::vector<Json> last = w.finish(message, "stop", stats);
  events.insert(events.end(), last.begin(), last.end());

  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    types.push_back(events[i]["type"]);
    EXPECT_EQ(events[i]["sequence_number"], i);
  }
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.reasoning_text.delta",
      // the message starts: the reasoning item is complete
      "response.reasoning_text.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.delta",
      // the call starts: the message is complete
      "response.output_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(types, expected);
  EXPECT_EQ(events[8]["timings"]["predicted_n"], 2);  // timings_per_token
  EXPECT_FALSE(events[3].contains("timings"));
  EXPECT_EQ(events[10]["text"], "Hello");
  EXPECT_EQ(events[13]["item"]["name"], "f");
  EXPECT_EQ(events[13]["item"]["call_id"], "call_x");
  EXPECT_EQ(events[15]["arguments"], "{}");

  const Json& response = events.back()["response"];
  EXPECT_EQ(response["id"], "resp_1");
  EXPECT_EQ(response["status"], "completed");
  EXPECT_TRUE(response["incomplete_details"].is_null());
  ASSERT_EQ(response["output"].size(), 3u);
  EXPECT_EQ(response["output"][0]["type"], "reasoning");
  EXPECT_EQ(response["output"][0]["content"][0]["text"], "hm");
  EXPECT_EQ(response["output"][1]["id"], events[6]["item"]["id"]);
  EXPECT_EQ(response["output"][1]["content"][0]["text"], "Hello");
  EXPECT_EQ(response["output"][2]["arguments"], "{}");
  EXPECT_EQ(response["usage"], Json::parse(R"({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 1},
      "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 8})"));
}

TEST(ResponsesWriter, WholeResponseWithoutStreaming) {
  ResponsesWriter w(header(), Json{{"instructions", "x"}});
  chat::ChatMessage message;
  message.content = "Hi";
  const Json r = w.response(message, "length", {});
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][0]["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Hi");
  EXPECT_EQ(r["instructions"], "x");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  // An empty output has no items.
  ResponsesWriter empty(header(), Json::object());
  EXPECT_TRUE(empty.response(chat::ChatMessage{}, "stop", {})["output"].empty());
}

TEST(ResponsesSse, EventLineNamesTheType) {
  EXPECT_EQ(responses_sse(Json{{"type", "response.completed"}, {"sequence_number", 3}}),
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3}\n\n");
}

// ---- chat details ----

ChatInput chat_of(const std::string& body) { return parse_chat_input(parse_body(body)); }

int status_of(const std::string& body) {
  try {
    chat_of(body);
  } catch (const ApiError& e) {
    return e.status();
  }
  return 200;
}

TEST(ChatContinuation, AFinalAssistantMessageIsContinued) {
  const ChatInput in = chat_of(R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": [{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}]}]})");
  EXPECT_EQ(in.messages.size(), 1u);
  EXPECT_EQ(in.continuation, "Wh\n\nill");  // parts join as llama.cpp's render_content
  EXPECT_TRUE(in.add_generation_prompt);  // the assistant's turn is opened, then continued
  const ChatInput explicit_form = chat_of(R"({"add_generation_prompt": false, "continue_final_message": true,
      "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Whill"}]})");
  EXPECT_EQ(explicit_form.continuation, "Whill");
  const ChatInput plain = chat_of(R"({"messages": [{"role": "user", "content": "Hi"}]})");
  EXPECT_EQ(plain.continuation, "");
  EXPECT_EQ(plain.messages.size(), 1u);
}

TEST(ChatContinuation, RefusedAsLlamaServerRefusesIt) {
  // Both add_generation_prompt (its default, true) and continue_final_message.
  EXPECT_EQ(status_of(R"({"continue_final_message": true,
      "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})"), 400);
  EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
      {"role": "assistant", "content": "c"}]})"), 400);
  EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": null,
      "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})"), 400);
  EXPECT_EQ(status_of(R"({"add_generation_prompt": false, "continue_final_message": true,
      "messages": [{"role": "user", "content": "Hi"}]})"), 400);
  EXPECT_EQ(status_of(R"({"continue_final_message": 3, "messages": [{"role": "user", "content": "Hi"}]})"), 400);
  EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]})"), 400);
}

TEST(ApiErrorFields, ExtraFieldsJoinTheErrorObject) {
  const Json body = ApiError(400, "exceed_context_size_error", "too long", "messages", "context_length_exceeded")
                        .with("n_prompt_tokens", 900)
                        .with("n_ctx", 256)
                        .body();
  EXPECT_EQ(body["error"]["type"], "exceed_context_size_error");
  EXPECT_EQ(body["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(body["error"]["n_prompt_tokens"], 900);
  EXPECT_EQ(body["error"]["n_ctx"], 256);
}

TEST(RequestTelemetry, LlamaServerFieldsAreRead) {
  const GenerationParams p = parse_generation_params(
      parse_body(R"({"timings_per_token": true, "return_progress": true, "verbose": false})"), true, {});
  EXPECT_TRUE(p.timings_per_token);
  EXPECT_TRUE(p.return_progress);
  ASSERT_TRUE(p.verbose.has_value());
  EXPECT_FALSE(*p.verbose);
  EXPECT_FALSE(parse_generation_params(parse_body("{}"), true, {}).verbose.has_value());
  // Without a seed of its own a request samples with the server's (-s).
  sample::SamplerConfig defaults;
  defaults.seed = 42;
  EXPECT_EQ(parse_generation_params(parse_body("{}"), true, defaults).sampling.seed, 42u);
  EXPECT_EQ(parse_generation_params(parse_body(R"({"seed": 7})"), true, defaults).sampling.seed, 7u);
  EXPECT_EQ(system_fingerprint().rfind('b', 0), 0u);
}

}  // namespace
}  // namespace okapi::server
