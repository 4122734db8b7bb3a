// One training step of the trainable model (train/model.hpp): forward + backward over one
// micro-batch (batch 1 x seq 256) + global-norm clip + AdamW, on the llama2.c shapes.
//
//   BM_TrainStep/<config>/t<threads>/overlap:<0|1>
//
// counters: tokens_per_second (wall clock) and GFLOPs: 3 x the forward's matmul FLOPs (2 x matrix
// parameters x tokens, classifier included, plus attention's q.k and p.v counted over the full
// seq x seq square, as computed). AdamW runs every step here; a trainer accumulating 10
// micro-batches per update runs it once per 10. Wall time: the work runs in the pool (and on the
// dW thread with overlap on).
#include <benchmark/benchmark.h>

#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "train/model.hpp"
#include "train/optimizer.hpp"

namespace {

using namespace okapi::train;

struct StepFixture {
  StepFixture(const ModelConfig& c, int threads, bool overlap)
      : config(c), pool(threads), model(config, &pool), adamw(model.layout(), AdamWConfig{}) {
    params.resize(model.layout().total());
    grads.resize(params.size());
    initialize(model.layout(), Init::Xavier, 1, params);
    model.set_overlap_weight_gradients(overlap);
    for (int64_t i = 0; i < kSeq; ++i) {
      tokens.push_back(static_cast<int32_t>((i * 7919 + 13) % config.vocab_size));
      targets.push_back(static_cast<int32_t>((i * 104729 + 7) % config.vocab_size));
    }
  }
  static constexpr int64_t kSeq = 256;
  ModelConfig config;
  okapi::ThreadPool pool;
  Transformer model;
  AdamW adamw;
  std::vector<float> params, grads;
  std::vector<int32_t> tokens, targets;
};

double step_flops(const ModelConfig& c, int64_t seq) {
  const double d = static_cast<double>(c.dim), f = static_cast<double>(c.hidden_dim);
  const double kv = static_cast<double>(c.kv_dim()), v = static_cast<double>(c.vocab_size);
  const double per_token = static_cast<double>(c.n_layers) * (2 * d * d + 2 * d * kv + 3 * d * f) + d * v;
  const double attention = static_cast<double>(c.n_layers) * 4.0 * static_cast<double>(seq * seq) * d;  // full T^2
  return 3.0 * (2.0 * per_token * static_cast<double>(seq) + attention);
}

void BM_TrainStep(benchmark::State& state, const std::string& name, int64_t vocab) {
  ModelConfig config = config_by_name(name, vocab);
  const auto threads = static_cast<int>(state.range(0));
  StepFixture f(config, threads, state.range(1) != 0);
  int64_t t = 0;
  timespec cpu_begin{}, cpu_end{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_begin);
  for (auto _ : state) {
    std::fill(f.grads.begin(), f.grads.end(), 0.0f);
    const float loss = f.model.forward_backward(f.params, f.tokens, f.targets, 1, StepFixture::kSeq, 1.0f, f.grads);
    benchmark::DoNotOptimize(loss);
    clip_global_norm(f.grads, 1.0f);
    f.adamw.step(f.params, f.grads, 1e-4f, ++t);
  }
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_end);
  const double steps = static_cast<double>(state.iterations());
  // CPU time of all threads (pool workers, dW thread; spinning included) per step: on a busy
  // machine a steadier measure of the work than wall time.
  state.counters["process_cpu_ms"] = 1e3 *
                                     (static_cast<double>(cpu_end.tv_sec - cpu_begin.tv_sec) +
                                      1e-9 * static_cast<double>(cpu_end.tv_nsec - cpu_begin.tv_nsec)) /
                                     steps;
  state.counters["tokens_per_second"] =
      benchmark::Counter(steps * StepFixture::kSeq, benchmark::Counter::kIsRate);
  state.counters["GFLOPs"] =
      benchmark::Counter(steps * step_flops(config, StepFixture::kSeq) * 1e-9, benchmark::Counter::kIsRate);
}

void register_benchmarks() {
  struct Case {
    const char* name;
    int64_t vocab;
    std::vector<int64_t> threads, overlap;
    double min_time;
  };
  // stories110M: one configuration, mainly to show the memory it needs (run under /usr/bin/time -v).
  const Case cases[] = {{"stories15M", 32000, {1, 2}, {0, 1}, 2.0},
                        {"stories260K", 512, {1, 2}, {0, 1}, 2.0},
                        {"stories110M", 32000, {2}, {0}, 0.1}};
  for (const Case& c : cases) {
    benchmark::RegisterBenchmark((std::string("BM_TrainStep/") + c.name).c_str(),
                                 [name = std::string(c.name), vocab = c.vocab](benchmark::State& s) {
                                   BM_TrainStep(s, name, vocab);
                                 })
        ->ArgsProduct({c.threads, c.overlap})
        ->ArgNames({"t", "overlap"})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(c.min_time);
  }
}

const int registered = (register_benchmarks(), 0);

}  // namespace
