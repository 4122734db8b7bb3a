#include "server/metrics.hpp"

#include <fmt/format.h>

namespace okapi::server {

namespace {

void add(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += fmt::format("# HELP okapi:{} {}\n# TYPE okapi:{} {}\nokapi:{} {}\n", name, help, name, type, name, value);
}

}  // namespace

std::string prometheus_text(const runtime::SchedulerCounters& c, int n_slots) {
  std::string out;
  add(out, "prompt_tokens_total", "counter", "Prompt tokens evaluated (reused cache not counted).",
      static_cast<double>(c.prompt_tokens));
  add(out, "prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's cache.",
      static_cast<double>(c.cached_prompt_tokens));
  add(out, "prompt_seconds_total", "counter", "Forward-pass seconds spent on prompt tokens.", c.prompt_seconds);
  add(out, "tokens_predicted_total", "counter", "Generated tokens.", static_cast<double>(c.generated_tokens));
  add(out, "tokens_predicted_seconds_total", "counter", "Forward-pass seconds spent on generated tokens.",
      c.generation_seconds);
  add(out, "n_decode_total", "counter", "Forward passes (each may hold several slots).",
      static_cast<double>(c.forward_passes));
  add(out, "drafted_tokens_total", "counter", "Speculative decoding: tokens drafted.",
      static_cast<double>(c.drafted_tokens));
  add(out, "draft_tokens_accepted_total", "counter", "Speculative decoding: drafted tokens accepted.",
      static_cast<double>(c.accepted_tokens));
  add(out, "requests_finished_total", "counter", "Requests that ended normally.",
      static_cast<double>(c.requests_finished));
  add(out, "requests_cancelled_total", "counter", "Requests whose client went away.",
      static_cast<double>(c.requests_cancelled));
  add(out, "requests_processing", "gauge", "Slots busy.", static_cast<double>(c.busy_slots));
  add(out, "requests_deferred", "gauge", "Requests waiting for a slot.", static_cast<double>(c.queued));
  add(out, "slots_total", "gauge", "Slots.", static_cast<double>(n_slots));
  add(out, "kv_cache_tokens", "gauge", "KV cells in use over all slots.", static_cast<double>(c.kv_cells_used));
  add(out, "kv_cache_usage_ratio", "gauge", "KV cells in use / cells.",
      c.kv_cells_total > 0 ? static_cast<double>(c.kv_cells_used) / static_cast<double>(c.kv_cells_total) : 0.0);
  return out;
}

std::string prometheus_embedding_text(const EmbeddingCounters& c) {
  std::string out;
  add(out, "prompt_tokens_total", "counter", "Tokens embedded.", static_cast<double>(c.tokens));
  add(out, "prompt_seconds_total", "counter", "Forward-pass seconds spent embedding.", c.seconds);
  add(out, "n_decode_total", "counter", "Forward passes (each may hold inputs of several requests).",
      static_cast<double>(c.passes));
  add(out, "requests_finished_total", "counter", "Requests that ended normally.",
      static_cast<double>(c.requests_finished));
  add(out, "requests_cancelled_total", "counter", "Requests whose client went away.",
      static_cast<double>(c.requests_cancelled));
  add(out, "requests_processing", "gauge", "Embedding requests waiting or running.", static_cast<double>(c.queued));
  add(out, "embedding_requests_total", "counter", "Embedding and rerank requests received.",
      static_cast<double>(c.requests));
  add(out, "embedding_inputs_total", "counter", "Inputs embedded (rerank: query-document pairs).",
      static_cast<double>(c.inputs));
  add(out, "embedding_tokens_total", "counter", "Tokens embedded.", static_cast<double>(c.tokens));
  add(out, "embedding_passes_total", "counter", "Embedding forward passes.", static_cast<double>(c.passes));
  add(out, "embedding_passes_shared_total", "counter", "Embedding passes holding inputs of more than one request.",
      static_cast<double>(c.shared_passes));
  return out;
}

}  // namespace okapi::server
