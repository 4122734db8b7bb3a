// llama-bench's two measurements: prefill (pp N: N random tokens in batched passes) and decode
// (tg N: N tokens one at a time), in tokens per second, repeated after one warm-up run. Each test
// starts from a cache holding n_depth tokens (llama-bench's -d: 0 is an empty cache), prefilled
// once, untimed; every run then rolls the cache back to that depth.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/engine.hpp"

namespace okapi::runtime {

struct BenchCase {
  int64_t n_prompt = 0;  // pp test when > 0
  int64_t n_gen = 0;     // tg test when > 0
  int64_t n_depth = 0;   // tokens already in the cache when the test starts
  std::string name() const;  // "pp64", "tg128", "tg32 @ d4096" (llama-bench's spelling)
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
