// llama-server's native completion API (/completion, /infill) in okapi's terms: reading its
// request fields (prompts of text, token ids or both; logit_bias in its two forms) and writing
// its response shapes (the final object, stream chunks, completion_probabilities, timings,
// generation_settings). Pure functions of their inputs: native_api.cpp wires them to the server.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/generation.hpp"
#include "sample/sampler.hpp"
#include "server/request_params.hpp"

namespace okapi::server {

using runtime::TokenId;

// How a prompt's text becomes tokens: `first` says the text begins the prompt (BOS then, as the
// vocabulary says).
using NativeTokenize = std::function<std::vector<TokenId>(std::string_view text, bool first)>;

// `prompt` as llama-server reads it: a string, token ids, ids and strings mixed in one array, an
// object {"prompt_string": ...}, or an array of those (several prompts). Ids must be in [0, n_vocab).
// Throws ApiError 400 for any other shape, an empty prompt, or multimodal_data (no media here).
std::vector<std::vector<TokenId>> native_prompts(const Json& prompt, int64_t n_vocab, const NativeTokenize& tokenize);

// logit_bias as llama-server reads it: [[token, bias], ...] or {"token": bias, ...}; a token is an
// id or a text (each of its tokens is biased); bias false bans the token (-infinity). Entries of
// other shapes are skipped, as llama-server skips them; ids outside the vocabulary too.
std::vector<std::pair<TokenId, float>> native_logit_bias(const Json& bias, int64_t n_vocab,
                                                         const std::function<std::vector<TokenId>(std::string_view)>& tokenize);

// llama-server's timings: cache_n, prompt_n, prompt_ms, prompt_per_token_ms, prompt_per_second,
// predicted_n, predicted_ms, predicted_per_token_ms, predicted_per_second (the first token comes
// with the prompt's pass: the generation rate is over the tokens after it).
Json native_timings(const runtime::GenerationStats& stats);

// completion_probabilities: per token id, token (its valid UTF-8 prefix), bytes and logprob with
// top_logprobs, or with post_sampling prob and top_probs.
Json native_probabilities(const std::vector<runtime::TokenLogprob>& tokens, bool post_sampling);

// llama-server's response_fields: only the listed paths ("a/b" reads b inside a, and keeps the
// path as the key); missing ones are left out.
Json native_select_fields(const Json& response, const std::vector<std::string>& paths);

// What a native request asks beyond the OpenAI fields start_generation reads.
struct NativeParams {
  int n_probs = 0;
  bool post_sampling_probs = false;
  std::vector<std::pair<TokenId, float>> logit_bias;  // with the EOG bans of ignore_eos
  bool ignore_eos = false;
  bool return_tokens = false;
  bool cache_prompt = true;
  int id_slot = -1;
  int64_t n_keep = 0;
  int64_t n_discard = 0;
  bool timings_per_token = false;
  bool return_progress = false;
  std::vector<std::string> response_fields;
  Json samplers;  // as given (validated), for generation_settings
};
// Reads them (400 naming the field when one is malformed). `eog`: the end-of-generation tokens that
// ignore_eos bans; `n_slots`: id_slot's range.
NativeParams parse_native_params(const Json& body, int64_t n_vocab, int n_slots, const std::vector<TokenId>& eog,
                                 const std::function<std::vector<TokenId>(std::string_view)>& tokenize);

// generation_settings: the sampling settings a request ran with, under llama-server's names
// (settings okapi does not have report llama-server's off values).
Json native_generation_settings(const sample::SamplerConfig& sampling, int64_t n_predict, const std::vector<std::string>& stop,
                                bool stream, const NativeParams& native, int64_t n_keep);

// Vertex AI's name of a route: "/v1/chat/completions" -> "chatCompletions" (llama-server's rule).
std::string gcp_route_alias(std::string_view path);

}  // namespace okapi::server
