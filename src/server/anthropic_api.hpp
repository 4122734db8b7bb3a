// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) as llama-server serves
// it: a request is converted to the OpenAI chat body that ServerState::start_generation reads, and
// the job's output is written back in Anthropic's shapes (a message with content blocks, or the
// event stream message_start ... message_stop). These functions are pure; the routes are in
// anthropic_routes.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_format.hpp"
#include "runtime/generation.hpp"
#include "server/api_error.hpp"
#include "server/responses.hpp"

namespace okapi::server::anthropic {

using Json = nlohmann::ordered_json;

// The OpenAI chat body of a Messages request: system (string or text blocks) as a system message;
// content blocks as parts (text, image -> image_url, text document -> text); an assistant's
// tool_use blocks as tool_calls and thinking blocks as reasoning_content; each tool_result as a
// role "tool" message, ahead of the rest of its user message; tools (input_schema), tool_choice
// (auto / any / tool / none, disable_parallel_tool_use), stop_sequences, max_tokens (4096 when
// absent, as llama-server), temperature / top_p / top_k / stream / chat_template_kwargs, thinking
// (enabled: budget_tokens; disabled: a budget of 0). `count_tokens`: the body of
// /v1/messages/count_tokens (no generation fields). An empty `messages` is read as one empty user
// turn (llama-server accepts it too). Wrong shapes are a 400 naming the field (ApiError).
Json to_openai_chat(const Json& body, bool count_tokens = false);

// Whether a converted body holds an image. okapi reads no images: such a request is refused with
// kNoImageInput (500, as llama-server without --mmproj answers).
bool has_image(const Json& openai_body);
inline constexpr const char* kNoImageInput =
    "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj";

// Anthropic's error types by status (invalid_request_error, authentication_error, not_found_error,
// request_too_large, overloaded_error, api_error, ...) and its error body:
//   {"type": "error", "error": {"type": ..., "message": ...}}
const char* error_type(int status);
Json error_body(int status, const std::string& message);

// stop_reason: end_turn, tool_use (the answer has tool calls), stop_sequence (one of the request's
// stop_sequences; `stop_sequence` names it), max_tokens (the token limit or a full context).
const char* stop_reason(runtime::StopReason reason, bool has_tool_calls, const std::string& stop_sequence);

// {"input_tokens" (not read from the cache), "cache_read_input_tokens", "output_tokens"}.
Json usage_json(const runtime::GenerationStats& stats);

// The whole message: content blocks thinking (with an empty signature: there is nothing to sign),
// text, then tool_use (input parsed from the call's arguments).
Json message_json(const ResponseHeader& header, const chat::ChatMessage& message, const char* stop_reason,
                  const std::string& stop_sequence, const runtime::GenerationStats& stats);

// One server-sent event: "event: <name>\ndata: <json>\n\n".
struct Event {
  std::string name;
  Json data;
};
std::string sse(const Event& event);
Event ping_event();
Event error_event(int status, const std::string& message);

// The event stream of one message, from the OpenAI deltas chat::StreamParser reports. Blocks
// follow one another (each stopped before the next starts, indexed from 0): thinking
// (thinking_delta, then an empty signature_delta before it stops), text (text_delta), tool_use
// (id and name at its start, then input_json_delta pieces).
class MessageStream {
 public:
  explicit MessageStream(ResponseHeader header) : header_(std::move(header)) {}
  // message_start (the prompt's size as input_tokens) and a ping, as Anthropic starts a stream.
  std::vector<Event> start(int64_t prompt_tokens) const;
  std::vector<Event> push(const std::vector<Json>& deltas);
  // Stops the open block; message_delta (stop_reason, stop_sequence, usage) and message_stop.
  std::vector<Event> finish(const char* stop_reason, const std::string& stop_sequence,
                            const runtime::GenerationStats& stats);

 private:
  enum class Block { None, Thinking, Text, ToolUse };
  void open(Block kind, Json content_block, std::vector<Event>& out);
  void close(std::vector<Event>& out);
  Event delta(Json delta) const;

  ResponseHeader header_;
  Block open_ = Block::None;
  int64_t index_ = -1;      // the open (or last) block's index
  int64_t open_call_ = -1;  // the open tool_use block's OpenAI tool-call index
};

}  // namespace okapi::server::anthropic
