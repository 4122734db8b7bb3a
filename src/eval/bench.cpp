#include "eval/bench.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.hpp"
#include "core/system_memory.hpp"
#include "runtime/cancel.hpp"

namespace okapi::eval {
namespace {

std::vector<int32_t> random_tokens(int64_t n, int64_t n_vocab) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n_vocab - 1));
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (auto& t : out) t = pick(rng);
  return out;
}

struct Timed {
  double seconds = 0;
  int64_t tokens = 0;  // tokens the forward passes that ran consumed (decode: the passes themselves)
};

// tokens[first, first + n) at positions first.. in batches of batch_size; returns the tokens the
// passes consumed (stops between passes on an interrupt).
int64_t prefill(runtime::Engine& engine, kv::KvStore& kv, const std::vector<int32_t>& tokens, int64_t first, int64_t n,
                int64_t batch_size, std::vector<float>& logits) {
  std::vector<int32_t> positions;
  int64_t done = 0;
  for (int64_t b = first; b < first + n && !runtime::interrupt_requested(); b += batch_size) {
    const int64_t size = std::min(batch_size, first + n - b);
    positions.resize(static_cast<size_t>(size));
    std::iota(positions.begin(), positions.end(), static_cast<int32_t>(b));
    engine.model().forward(engine.ops(), kv,
                           std::span<const int32_t>(tokens).subspan(static_cast<size_t>(b), static_cast<size_t>(size)),
                           positions, model::LogitRows::Last, logits.data());
    done += size;
  }
  return done;
}

// One run of the test on the cache rolled back to the test's depth, and the tokens its forward
// passes consumed (decode: one pass per token), counted as they run: the rate divides by work
// done, not work asked for. Stops early, between passes, on an interrupt.
Timed time_once(runtime::Engine& engine, kv::KvStore& kv, const BenchCase& test, int64_t batch_size,
                const std::vector<int32_t>& tokens, std::vector<float>& logits) {
  kv.truncate(test.n_depth);
  Timed out;
  const double start = runtime::now_seconds();
  if (test.n_prompt > 0) out.tokens = prefill(engine, kv, tokens, test.n_depth, test.n_prompt, batch_size, logits);
  if (out.tokens == test.n_prompt) {  // then the decoded tokens, unless interrupted
    const int64_t first = test.n_depth + test.n_prompt;
    for (int64_t i = first; i < first + test.n_gen && !runtime::interrupt_requested(); ++i) {
      const int32_t pos = static_cast<int32_t>(i);
      engine.model().forward(engine.ops(), kv, std::span<const int32_t>(&tokens[static_cast<size_t>(i)], 1),
                             std::span<const int32_t>(&pos, 1), model::LogitRows::Last, logits.data());
      ++out.tokens;
    }
  }
  out.seconds = runtime::now_seconds() - start;
  return out;
}

BenchSample run_bench_case_on(runtime::Engine& engine, kv::KvStore& kv, const BenchCase& test, int64_t batch_size,
                              int repetitions) {
  const int64_t n = test.n_prompt + test.n_gen;
  const std::vector<int32_t> tokens = random_tokens(test.n_depth + n, engine.model().n_vocab());
  std::vector<float> logits(static_cast<size_t>(engine.model().n_vocab()));
  kv.truncate(0);
  if (prefill(engine, kv, tokens, 0, test.n_depth, batch_size, logits) < test.n_depth) return {};  // interrupted
  (void)time_once(engine, kv, test, batch_size, tokens, logits);  // warm-up: page in weights, caches
  BenchSample result;
  for (int r = 0; r < repetitions && !runtime::interrupt_requested(); ++r) {
    const Timed run = time_once(engine, kv, test, batch_size, tokens, logits);
    if (run.tokens < n) break;  // interrupted: a partial run is no sample
    result.samples.push_back(static_cast<double>(run.tokens) / run.seconds);
  }
  const auto count = static_cast<double>(result.samples.size());
  if (count == 0) return result;
  result.mean = std::accumulate(result.samples.begin(), result.samples.end(), 0.0) / count;
  double var = 0;
  for (const double v : result.samples) var += (v - result.mean) * (v - result.mean);
  result.stddev = count > 1 ? std::sqrt(var / (count - 1)) : 0.0;
  return result;
}

}  // namespace

std::string BenchCase::name() const {
  std::string test;
  if (n_prompt > 0) test = "pp" + std::to_string(n_prompt);
  if (n_gen > 0) test += (test.empty() ? "tg" : "+tg") + std::to_string(n_gen);
  return n_depth > 0 ? test + " @ d" + std::to_string(n_depth) : test;
}

BenchSample run_bench_case(runtime::Engine& engine, const BenchCase& test, int64_t batch_size, int repetitions) {
  if (test.n_prompt < 0 || test.n_gen < 0 || test.n_prompt + test.n_gen <= 0)
    throw_error("bench: a test needs prompt or generated tokens (pp {}, tg {})", test.n_prompt, test.n_gen);
  const int64_t n = test.n_prompt + test.n_gen;
  if (test.n_depth < 0) throw_error_for(Setting::BenchDepth, "bench: the depth must be at least 0, got {}", test.n_depth);
  if (repetitions < 1)
    throw_error_for(Setting::Repetitions, "bench: the repetitions must be at least 1, got {}", repetitions);
  if (batch_size < 1) throw_error_for(Setting::BatchSize, "bench: the batch size must be at least 1, got {}", batch_size);
  // The cache holds the whole test: depth + N cells, checked against the memory left before it
  // exists.
  const bool batched = test.n_prompt > 0 || test.n_depth > 0;
  const Setting context = test.n_depth > 0 ? Setting::BenchDepth
                          : test.n_gen == 0  ? Setting::BenchPrompt
                          : test.n_prompt == 0 ? Setting::BenchGenerate
                                               : Setting::BenchPromptGenerate;
  // Each run rolls back to the depth: sliding-window rings are sized for the whole test beyond it.
  const int64_t ring_batch = test.n_depth > 0 ? std::max(batch_size, n) : batch_size;
  const auto kv = engine.make_kv(test.n_depth + n, {.batch = batched ? ring_batch : 1, .context = context});
  return out_of_memory_as_error("benchmarking",
                                [&] { return run_bench_case_on(engine, *kv, test, batch_size, repetitions); });
}

}  // namespace okapi::eval
