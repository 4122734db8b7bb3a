// llama-bench's measurements: prefill (pp N: N random tokens in batched passes), decode (tg N: N
// tokens one at a time) and both in one timed run (-pg PP,TG: a PP-token prompt, then TG decoded
// tokens; (PP + TG) / total time), in tokens per second, repeated after one warm-up run. Each test
// starts from a cache holding n_depth tokens (llama-bench's -d: 0 is an empty cache), prefilled
// once, untimed; every run then rolls the cache back to that depth.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/engine.hpp"

namespace okapi::eval {

struct BenchCase {
  int64_t n_prompt = 0;  // prompt tokens, prefilled first (pp test when n_gen is 0)
  int64_t n_gen = 0;     // tokens decoded after them (tg test when n_prompt is 0)
  int64_t n_depth = 0;   // tokens already in the cache when the test starts
  // "pp64", "tg128", "pp512+tg128", "tg32 @ d4096" (llama-bench's spelling)
  std::string name() const;
};

struct BenchSample {
  double mean = 0;  // tokens per second
  double stddev = 0;
  std::vector<double> samples;
};

// Returns tokens/s over `repetitions` runs (plus one untimed warm-up). Stops early (with the runs
// done so far) when interrupt_requested().
BenchSample run_bench_case(runtime::Engine& engine, const BenchCase& test, int64_t batch_size, int repetitions);

}  // namespace okapi::eval
