// /metrics: the scheduler's counters in Prometheus' text format, named like llama-server's
// (`llamacpp:` there, `okapi:` here).
#pragma once
#include <string>

#include "runtime/scheduler.hpp"

namespace okapi::server {

std::string prometheus_text(const runtime::SchedulerCounters& counters, int n_slots);

}  // namespace okapi::server
