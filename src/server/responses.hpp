// The OpenAI response bodies okapi serve writes: chat.completion(.chunk), text_completion, usage,
// logprobs, and llama-server's `timings` (the chat page shows speed from it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/generation.hpp"

namespace okapi::server {

using Json = nlohmann::ordered_json;
using runtime::GenerationStats;
using runtime::TokenLogprob;
using tokenizer::TokenId;

// OpenAI's finish_reason: "stop" (end of generation or a stop string) or "length" (the token
// limit or a full context); "cancelled" and "error" for the others.
const char* finish_reason_name(runtime::StopReason reason);

struct ResponseHeader {
  std::string id;       // chatcmpl-... / cmpl-...
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// The system_fingerprint of every response: llama-server's build string shape, "b<build>-<commit>"
// (clients and llama.cpp's tests read the leading "b").
std::string system_fingerprint();

// A random id with `prefix` ("chatcmpl-", "cmpl-").
std::string make_response_id(const std::string& prefix);

Json usage_json(const GenerationStats& stats);
Json timings_json(const GenerationStats& stats);
// Chat: {"content": [{token, logprob, bytes, top_logprobs}]}; completions: the legacy lists.
Json chat_logprobs_json(const std::vector<TokenLogprob>& tokens);
Json completion_logprobs_json(const std::vector<TokenLogprob>& tokens, size_t text_offset);

// Streaming chunks. `delta` is the chat delta object; finish is null until the last chunk.
Json chat_chunk(const ResponseHeader& h, const Json& delta, const Json& logprobs, const char* finish_reason);
Json completion_chunk(const ResponseHeader& h, const std::string& text, const Json& logprobs,
                      const char* finish_reason);
// The final chunk with usage and no choices (stream_options.include_usage).
Json usage_chunk(const ResponseHeader& h, bool chat, const GenerationStats& stats);

// Whole responses.
Json chat_response(const ResponseHeader& h, const std::string& text, const Json& logprobs, const char* finish_reason,
                   const GenerationStats& stats);
// ... with an assistant message (chat::ChatMessage::to_json(): content, reasoning_content, tool_calls).
Json chat_response(const ResponseHeader& h, const Json& message, const Json& logprobs, const char* finish_reason,
                   const GenerationStats& stats);
Json completion_response(const ResponseHeader& h, const std::string& text, const Json& logprobs,
                         const char* finish_reason, const GenerationStats& stats);

// llama-server's __verbose object (a request's "verbose", or --verbose): `prompt` is the prompt's
// tokens as text (control tokens written out), `content` the output's text.
Json verbose_json(const std::string& prompt, const std::string& content, runtime::StopReason stop,
                  const GenerationStats& stats, const std::string& model);
// A return_progress report: {total, cache, processed, time_ms} (`elapsed`: seconds since the request came).
Json prompt_progress_json(const runtime::SequenceEvent& event, int64_t cached_tokens, double elapsed);

// JSON text with invalid UTF-8 (a token's partial character) replaced by U+FFFD.
std::string to_text(const Json& json);

}  // namespace okapi::server
