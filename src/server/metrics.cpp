#include "server/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace okapi::server {

namespace {

void add_as(std::string& out, const char* prefix, const char* name, const char* type, const char* help, double value) {
  out += fmt::format("# HELP {}:{} {}\n# TYPE {}:{} {}\n{}:{} {}\n", prefix, name, help, prefix, name, type, prefix, name,
                     value);
}

void add(std::string& out, const char* name, const char* type, const char* help, double value) {
  add_as(out, "okapi", name, type, help, value);
}

double rate(double count, double seconds) { return seconds > 0 ? count / seconds : 0.0; }

}  // namespace

std::string prometheus_text(const runtime::SchedulerCounters& c, int n_slots, const runtime::SchedulerCounters& since) {
  std::string out;
  // llama-server's names and meanings first (what its dashboards and llama.cpp's tests read).
  const auto llama = [&](const char* name, const char* type, const char* help, double value) {
    add_as(out, "llamacpp", name, type, help, value);
  };
  llama("prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens",
        static_cast<double>(c.prompt_tokens));
  llama("prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache",
        static_cast<double>(c.cached_prompt_tokens));
  llama("prompt_seconds_total", "counter", "Total time spent processing prompts", c.prompt_seconds);
  llama("tokens_predicted_total", "counter", "Number of generation tokens processed",
        static_cast<double>(c.generated_tokens));
  llama("tokens_predicted_seconds_total", "counter", "Total time spent generating tokens", c.generation_seconds);
  llama("n_decode_total", "counter", "Total number of forward passes (each may hold several slots)",
        static_cast<double>(c.forward_passes));
  llama("n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)",
        static_cast<double>(c.max_sequence_tokens));
  llama("spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated",
        static_cast<double>(c.drafted_tokens));
  llama("spec_decode_num_accepted_tokens_total", "counter", "Speculative: Total draft tokens accepted by the target model",
        static_cast<double>(c.accepted_tokens));
  llama("spec_decode_num_drafts_total", "counter", "Speculative: Total speculative decoding verification steps",
        static_cast<double>(c.draft_rounds));
  // Throughput gauges over the window since the previous scrape, as llama-server's.
  llama("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s",
        rate(static_cast<double>(c.prompt_tokens - since.prompt_tokens), c.prompt_seconds - since.prompt_seconds));
  llama("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s",
        rate(static_cast<double>(c.generated_tokens - since.generated_tokens),
             c.generation_seconds - since.generation_seconds));
  llama("requests_processing", "gauge", "Number of requests processing", static_cast<double>(c.busy_slots));
  llama("requests_deferred", "gauge", "Number of requests deferred", static_cast<double>(c.queued));
  llama("n_busy_slots_per_decode", "gauge", "Average number of busy slots per forward pass",
        static_cast<double>(c.busy_slots_in_passes) / std::max(static_cast<double>(c.forward_passes), 1.0));
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
