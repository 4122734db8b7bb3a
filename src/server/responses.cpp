#include "server/responses.hpp"

#include "server/build_info.hpp"

#include <random>

#include <fmt/format.h>

namespace okapi::server {

namespace {

Json bytes_of(const std::string& s) {
  Json out = Json::array();
  for (const char c : s) out.push_back(static_cast<unsigned char>(c));
  return out;
}

Json finish_json(const char* finish_reason) { return finish_reason ? Json(finish_reason) : Json(); }

Json header_json(const ResponseHeader& h, const char* object) {
  Json j;
  j["id"] = h.id;
  j["object"] = object;
  j["created"] = h.created;
  j["model"] = h.model;
  j["system_fingerprint"] = system_fingerprint();
  return j;
}

}  // namespace

std::string system_fingerprint() { return std::string(build_info()); }

const char* finish_reason_name(runtime::StopReason reason) {
  switch (reason) {
    case runtime::StopReason::EndOfGeneration:
    case runtime::StopReason::StopString: return "stop";
    case runtime::StopReason::TokenLimit:
    case runtime::StopReason::ContextFull: return "length";
    case runtime::StopReason::Interrupted: return "cancelled";
    case runtime::StopReason::Error: return "error";
  }
  return "stop";
}

std::string make_response_id(const std::string& prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return prefix + fmt::format("{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

Json usage_json(const GenerationStats& stats) {
  Json u;
  u["prompt_tokens"] = stats.prompt_tokens;
  u["completion_tokens"] = stats.generated_tokens;
  u["total_tokens"] = stats.prompt_tokens + stats.generated_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", stats.cached_tokens}};
  return u;
}

Json timings_json(const GenerationStats& stats) {
  const auto n_prompt = stats.prompt_tokens - stats.cached_tokens;
  Json t;
  t["cache_n"] = stats.cached_tokens;
  t["prompt_n"] = n_prompt;
  t["prompt_ms"] = stats.prompt_seconds * 1e3;
  t["prompt_per_second"] = stats.prompt_tokens_per_second();
  t["predicted_n"] = stats.generated_tokens;
  t["predicted_ms"] = stats.generation_seconds * 1e3;
  // The first token comes with the prompt pass: the rate counts the tokens after it.
  t["predicted_per_second"] = stats.generation_seconds > 0
                                  ? static_cast<double>(stats.generated_tokens - 1) / stats.generation_seconds
                                  : 0.0;
  t["queued_ms"] = stats.queued_seconds * 1e3;
  if (stats.drafted_tokens > 0) {  // llama-server's names
    t["draft_n"] = stats.drafted_tokens;
    t["draft_n_accepted"] = stats.accepted_tokens;
  }
  t["slot"] = stats.slot;
  return t;
}

Json chat_logprobs_json(const std::vector<TokenLogprob>& tokens) {
  Json content = Json::array();
  for (const auto& t : tokens) {
    Json entry;
    entry["id"] = t.id;
    entry["token"] = t.token;
    entry["logprob"] = t.logprob;
    entry["bytes"] = bytes_of(t.token);
    Json top = Json::array();
    for (const auto& [text, lp] : t.top) top.push_back({{"token", text}, {"logprob", lp}, {"bytes", bytes_of(text)}});
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return {{"content", std::move(content)}};
}

Json completion_logprobs_json(const std::vector<TokenLogprob>& tokens, size_t text_offset) {
  Json out;
  Json toks = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const auto& t : tokens) {
    toks.push_back(t.token);
    lps.push_back(t.logprob);
    Json top = Json::object();
    for (const auto& [text, lp] : t.top) top[text] = lp;
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += t.token.size();
  }
  out["tokens"] = std::move(toks);
  out["token_logprobs"] = std::move(lps);
  out["top_logprobs"] = std::move(tops);
  out["text_offset"] = std::move(offsets);
  return out;
}

Json chat_chunk(const ResponseHeader& h, const Json& delta, const Json& logprobs, const char* finish_reason) {
  Json j = header_json(h, "chat.completion.chunk");
  Json choice;
  choice["index"] = 0;
  choice["delta"] = delta;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_json(finish_reason);
  j["choices"] = Json::array({std::move(choice)});
  return j;
}

Json completion_chunk(const ResponseHeader& h, const std::string& text, const Json& logprobs,
                      const char* finish_reason) {
  Json j = header_json(h, "text_completion");
  Json choice;
  choice["text"] = text;
  choice["index"] = 0;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_json(finish_reason);
  j["choices"] = Json::array({std::move(choice)});
  return j;
}

Json usage_chunk(const ResponseHeader& h, bool chat, const GenerationStats& stats) {
  Json j = header_json(h, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = Json::array();
  j["usage"] = usage_json(stats);
  j["timings"] = timings_json(stats);
  return j;
}

Json chat_response(const ResponseHeader& h, const std::string& text, const Json& logprobs, const char* finish_reason,
                   const GenerationStats& stats) {
  Json j = header_json(h, "chat.completion");
  Json choice;
  choice["index"] = 0;
  choice["message"] = {{"role", "assistant"}, {"content", text}};
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_json(finish_reason);
  j["choices"] = Json::array({std::move(choice)});
  j["usage"] = usage_json(stats);
  j["timings"] = timings_json(stats);
  return j;
}

Json chat_response(const ResponseHeader& h, const Json& message, const Json& logprobs, const char* finish_reason,
                   const GenerationStats& stats) {
  Json j = chat_response(h, std::string(), logprobs, finish_reason, stats);
  j["choices"][0]["message"] = message;
  return j;
}

Json completion_response(const ResponseHeader& h, const std::string& text, const Json& logprobs,
                         const char* finish_reason, const GenerationStats& stats) {
  Json j = completion_chunk(h, text, logprobs, finish_reason);
  j["usage"] = usage_json(stats);
  j["timings"] = timings_json(stats);
  return j;
}

Json verbose_json(const std::string& prompt, const std::string& content, runtime::StopReason stop,
                  const GenerationStats& stats, const std::string& model) {
  const char* stop_type = "none";
  switch (stop) {
    case runtime::StopReason::EndOfGeneration: stop_type = "eos"; break;
    case runtime::StopReason::StopString: stop_type = "word"; break;
    case runtime::StopReason::TokenLimit:
    case runtime::StopReason::ContextFull: stop_type = "limit"; break;
    default: break;
  }
  Json v;
  v["index"] = 0;
  v["content"] = content;
  v["id_slot"] = stats.slot;
  v["stop"] = true;
  v["model"] = model;
  v["tokens_predicted"] = stats.generated_tokens;
  v["tokens_evaluated"] = stats.prompt_tokens;
  v["prompt"] = prompt;
  v["has_new_line"] = content.find('\n') != std::string::npos;
  v["truncated"] = false;
  v["stop_type"] = stop_type;
  v["tokens_cached"] = stats.prompt_tokens + stats.generated_tokens;
  v["timings"] = timings_json(stats);
  return v;
}

Json prompt_progress_json(const runtime::SequenceEvent& event, int64_t cached_tokens, double elapsed) {
  Json p;
  p["total"] = event.prompt_total;
  p["cache"] = cached_tokens;
  p["processed"] = event.prompt_done;
  p["time_ms"] = static_cast<int64_t>(elapsed * 1e3);
  return p;
}

std::string to_text(const Json& json) { return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace okapi::server
