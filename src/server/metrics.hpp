// /metrics: the scheduler's counters in Prometheus' text format, named like llama-server's
// (`llamacpp:` there, `okapi:` here).
#pragma once
#include <string>

#include "server/scheduler.hpp"

namespace okapi::server {

std::string prometheus_text(const SchedulerCounters& counters, int n_slots);

}  // namespace okapi::server
