// /metrics: the scheduler's counters in Prometheus' text format, named like llama-server's
// (`llamacpp:`, as llama-server's, and okapi's own `okapi:` series).
#pragma once
#include <string>

#include "runtime/scheduler.hpp"
#include "server/embedding_queue.hpp"

namespace okapi::server {

// llama-server's llamacpp:* series (its names and meanings; the throughput gauges over the window
// since `since`, the counters at the previous scrape) and okapi's own okapi:* series.
std::string prometheus_text(const runtime::SchedulerCounters& counters, int n_slots,
                            const runtime::SchedulerCounters& since);
// An embeddings server's: its tokens and passes under the prompt names llama-server counts them
// under, and okapi:embedding_* for requests, inputs and the passes shared by several requests.
std::string prometheus_embedding_text(const EmbeddingCounters& counters);

}  // namespace okapi::server
