// /metrics: the scheduler's counters in Prometheus' text format, named like llama-server's
// (`llamacpp:` there, `okapi:` here).
#pragma once
#include <string>

#include "runtime/scheduler.hpp"
#include "server/embedding_queue.hpp"

namespace okapi::server {

std::string prometheus_text(const runtime::SchedulerCounters& counters, int n_slots);
// An embeddings server's: its tokens and passes under the prompt names llama-server counts them
// under, and okapi:embedding_* for requests, inputs and the passes shared by several requests.
std::string prometheus_embedding_text(const EmbeddingCounters& counters);

}  // namespace okapi::server
