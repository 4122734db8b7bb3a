// OpenAI's Responses API (POST /v1/responses) over the chat completions machinery: a request's
// `input` items become chat messages (parse_responses_request), the generation runs as a chat
// completion, and ResponsesWriter writes its output as Responses output items and stream events.
// previous_response_id continues a conversation this server answered, from a bounded in-memory
// store (ResponseStore: the least recently used forgotten first).
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chat/chat_format.hpp"
#include "server/responses.hpp"

namespace okapi::server {

// Responses kept for previous_response_id: at most this many, of at most this many bytes of JSON
// together (a conversation is bounded by the context, so each fits unless one alone is larger).
inline constexpr size_t kStoredResponses = 256;
inline constexpr size_t kStoredResponseBytes = size_t{64} << 20;

// The conversation of each stored response (its input and output as chat messages, instructions
// left out, as OpenAI does not carry them over), for previous_response_id.
class ResponseStore {
 public:
  ResponseStore(size_t capacity, size_t max_bytes) : capacity_(capacity), max_bytes_(max_bytes) {}
  void put(const std::string& id, Json conversation);
  // nullopt: not stored, or forgotten.
  std::optional<Json> get(const std::string& id);
  size_t size() const;

 private:
  struct Entry {
    std::string id;
    Json conversation;
    size_t bytes = 0;
  };
  size_t capacity_, max_bytes_;
  size_t bytes_ = 0;
  mutable std::mutex mutex_;
  std::list<Entry> recent_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
};

struct ResponsesRequest {
  Json chat_body;     // a chat completions body: messages, tools, max_tokens, sampling, stream
  Json conversation;  // the previous response's conversation and this input, as chat messages
  std::string previous_response_id;
  bool store = true;
  Json echo;  // the request's settings a response object repeats (instructions, tools, ...)
};

// Reads a Responses request. `previous`: the conversation of its previous_response_id (null when
// it has none). Throws ApiError (400) naming the field at fault.
ResponsesRequest parse_responses_request(const Json& body, const Json& previous);

// The assistant's output as the chat message a later turn's template sees.
Json assistant_message(const chat::ChatMessage& message);

// A response's output items and stream events, in OpenAI's shapes (items msg_..., rs_..., fc_...;
// every event with its sequence_number).
class ResponsesWriter {
 public:
  ResponsesWriter(const ResponseHeader& header, Json echo);
  const std::string& id() const { return header_.id; }

  // Stream: response.created and response.in_progress.
  std::vector<Json> begin();
  // Stream: response.in_progress carrying a return_progress report.
  Json progress(Json prompt_progress);
  // Stream: the events of chat deltas (chat::StreamParser: content, reasoning_content, tool_calls).
  // `timings`: added to each event (timings_per_token), unless null.
  std::vector<Json> deltas(const std::vector<Json>& chat_deltas, const Json& timings);
  // Stream: each open item's .done events, then response.completed with the whole response.
  std::vector<Json> finish(const chat::ChatMessage& message, const char* finish_reason, const GenerationStats& stats);
  // The response object (non-streaming, and response.completed's).
  Json response(const chat::ChatMessage& message, const char* finish_reason, const GenerationStats& stats);

 private:
  struct Item {
    std::string kind;  // "reasoning", "message", "function_call"
    std::string id;
    std::string text;  // reasoning / message text, or a call's arguments
    std::string name, call_id;  // function_call
    bool done = false;
  };
  Json event(const char* type, Json fields);
  Json response_shell(const char* status) const;
  Json item_json(const Item& item, const char* status) const;
  // The open item of `kind` (for function calls: the chat delta's call, by its index), added when new.
  size_t open_item(const std::string& kind, std::vector<Json>& events, const Json& call = Json::object());
  void close_item(size_t index, std::vector<Json>& events);

  ResponseHeader header_;
  Json echo_;
  int64_t sequence_ = 0;
  std::vector<Item> items_;
  std::vector<size_t> call_items_;  // items_ index of the chat tool call with that index
};

// 'usage' of a response: input_tokens, output_tokens, total_tokens and their details.
Json responses_usage_json(const GenerationStats& stats);

// One server-sent event of the Responses API: "event: TYPE\ndata: JSON\n\n".
std::string responses_sse(const Json& event);

}  // namespace okapi::server
