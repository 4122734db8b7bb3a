// The exact KV stores (kv/exact_store.hpp) against the f32 store, one kv head of a 4-head cache:
//
//   BM_KvScores/<store>/d:<head_dim>/keys:<n>   scores() of one query over n cached keys;
//                                               counter per_key = time / n.
//   BM_KvValues/<store>/d:<head_dim>/keys:<n>   accumulate_values() over n cells; per_key.
//   BM_KvAppend/<store>/d:<head_dim>            append() of one token (4 kv heads, K and V);
//                                               counter per_head = time / 4 (for exact-ntt
//                                               this is dominated by the forward NTT of K).
// Stores: f32, exact-direct (AVX2 when the CPU has it), exact-direct-scalar, exact-ntt.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kv/exact_kernels.hpp"
#include "kv/exact_store.hpp"

namespace {

using okapi::kv::KvShape;
using okapi::kv::KvStore;

constexpr int64_t kHeads = 4;
const char* const kStoreNames[] = {"f32", "exact-direct", "exact-direct-scalar", "exact-ntt"};

std::unique_ptr<KvStore> make(int which, const KvShape& shape) {
  using okapi::kv::ExactKernel;
  using okapi::kv::ExactScores;
  switch (which) {
    case 0:
      return okapi::kv::make_f32_store(shape, okapi::isa());
    case 1:
      return okapi::kv::make_exact_store(shape, ExactScores::Direct, okapi::isa());
    case 2:
      return okapi::kv::make_exact_store(shape, ExactScores::Direct, ExactKernel::scalar);
    default:
      return okapi::kv::make_exact_store(shape, ExactScores::Ntt, okapi::isa());
  }
}

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

std::unique_ptr<KvStore> filled(int which, int64_t head_dim, int64_t keys) {
  const KvShape shape{1, kHeads, head_dim, head_dim, keys};
  auto store = make(which, shape);
  const auto kv = gaussian(static_cast<size_t>(kHeads * head_dim), 1);
  for (int64_t c = 0; c < keys; ++c) store->append(0, c, kv.data(), kv.data());
  return store;
}

void per_key_counter(benchmark::State& state, const char* name, int64_t n) {
  // Inverted rate: seconds per key (printed with an SI prefix, e.g. 5.2ns).
  state.counters[name] = benchmark::Counter(
      static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
}

void BM_KvScores(benchmark::State& state, int which) {
  const int64_t head_dim = state.range(0), keys = state.range(1);
  auto store = filled(which, head_dim, keys);
  const auto q = gaussian(static_cast<size_t>(head_dim), 2);
  std::vector<float> out(static_cast<size_t>(keys));
  for (auto _ : state) {
    store->scores(0, 1, q.data(), 0, keys, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  per_key_counter(state, "per_key", keys);
}

void BM_KvValues(benchmark::State& state, int which) {
  const int64_t head_dim = state.range(0), keys = state.range(1);
  auto store = filled(which, head_dim, keys);
  std::vector<float> probs(static_cast<size_t>(keys), 1.0f / static_cast<float>(keys)),
      out(static_cast<size_t>(head_dim));
  for (auto _ : state) {
    store->accumulate_values(0, 1, probs.data(), 0, keys, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  per_key_counter(state, "per_key", keys);
}

void BM_KvAppend(benchmark::State& state, int which) {
  const int64_t head_dim = state.range(0), cells = 64;
  auto store = make(which, KvShape{1, kHeads, head_dim, head_dim, cells});
  const auto kv = gaussian(static_cast<size_t>(kHeads * head_dim), 3);
  int64_t cell = 0;
  for (auto _ : state) {
    store->append(0, cell, kv.data(), kv.data());
    cell = (cell + 1) % cells;
  }
  per_key_counter(state, "per_head", kHeads);
}

[[maybe_unused]] const int kRegistered = [] {
  for (int which = 0; which < 4; ++which) {
    const std::string name = kStoreNames[which];
    auto* s = benchmark::RegisterBenchmark(("BM_KvScores/" + name).c_str(), BM_KvScores, which);
    auto* v = benchmark::RegisterBenchmark(("BM_KvValues/" + name).c_str(), BM_KvValues, which);
    for (int64_t d : {64, 128})
      for (int64_t n : {512, 2048}) {
        s->Args({d, n});
        v->Args({d, n});
      }
    s->ArgNames({"d", "keys"});
    v->ArgNames({"d", "keys"});
    benchmark::RegisterBenchmark(("BM_KvAppend/" + name).c_str(), BM_KvAppend, which)->Arg(64)->Arg(128)->ArgName("d");
  }
  return 0;
}();

}  // namespace
