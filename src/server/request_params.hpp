// Reading OpenAI-style request bodies: every field okapi uses is type- and range-checked, and a
// bad one is a 400 naming it (ApiError). Fields okapi does not know are ignored, as OpenAI's API
// and llama-server ignore them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sample/sampler.hpp"

namespace okapi::server {

using Json = nlohmann::ordered_json;

// Arrays and objects nested deeper than this are refused (400) before parsing.
inline constexpr size_t kMaxJsonDepth = 128;

// Parses a request body: 400 for invalid JSON (invalid UTF-8 included), nesting deeper than
// kMaxJsonDepth, or a body that is not an object.
Json parse_body(std::string_view text);

struct GenerationParams {
  sample::SamplerConfig sampling;
  int64_t max_tokens = -1;  // max_tokens / max_completion_tokens / n_predict; < 0: no limit
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int top_logprobs = -1;       // < 0: no logprobs
  bool ignore_eos = false;
  // llama-server's telemetry: `timings` on every streamed chunk, prompt_progress chunks while the
  // prompt runs (streams only), and the `__verbose` debug object (null: the server's --verbose).
  bool timings_per_token = false;
  bool return_progress = false;
  std::optional<bool> verbose;
};

// The fields chat and text completions share. `chat`: logprobs is a boolean with top_logprobs
// beside it; otherwise logprobs is the number of alternatives (the legacy completions API).
GenerationParams parse_generation_params(const Json& body, bool chat, const sample::SamplerConfig& defaults);

struct ChatInput {
  Json messages;  // [{role, content, ...}] with content normalized to a string where it was text parts
  Json tools;     // null when absent
  bool add_generation_prompt = true;
  Json template_kwargs = Json::object();  // chat_template_kwargs
  // The final assistant message the model continues (continue_final_message, or a conversation that
  // ends with the assistant's message: a prefill), taken out of `messages`: its text follows the
  // prompt of the messages before it with the generation prompt. Empty: none.
  std::string continuation;
};

// messages (a non-empty array of objects with a string role; content a string, null, or an array of
// {"type": "text", "text": ...} parts, joined), tools (array), add_generation_prompt (bool),
// continue_final_message (bool or "content"), chat_template_kwargs (object). As llama-server: a
// final assistant message is continued (two at the end are a 400), and continue_final_message with
// add_generation_prompt is a 400.
ChatInput parse_chat_input(const Json& body, bool require_messages = true);

// Field readers: absent -> fallback; wrong type or out of range -> 400 naming `key`.
double number_field(const Json& body, const char* key, double fallback, double lo, double hi);
int64_t integer_field(const Json& body, const char* key, int64_t fallback, int64_t lo, int64_t hi);
bool bool_field(const Json& body, const char* key, bool fallback);
std::string string_field(const Json& body, const char* key, const std::string& fallback);

}  // namespace okapi::server
