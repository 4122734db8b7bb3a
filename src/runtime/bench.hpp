// llama-bench's two measurements: prefill (pp N: N random tokens in one batched pass over an empty
// cache) and decode (tg N: N tokens one at a time from an empty cache), in tokens per second,
// repeated after one warm-up run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/engine.hpp"

namespace okapi::runtime {

struct BenchCase {
  int64_t n_prompt = 0;  // pp test when > 0
  int64_t n_gen = 0;     // tg test when > 0
  std::string name() const;  // "pp64", "tg128"
};

struct BenchSample {
  double mean = 0;  // tokens per second
  double stddev = 0;
  std::vector<double> samples;
};

// Returns tokens/s over `repetitions` runs (plus one untimed warm-up). Stops early (with the runs
// done so far) when interrupt_requested().
BenchSample run_bench_case(Engine& engine, const BenchCase& test, int64_t batch_size, int repetitions);

}  // namespace okapi::runtime
