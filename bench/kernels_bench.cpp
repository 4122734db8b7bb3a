// The forward pass's matmul (kernels::matmul) at the shapes that matter:
//
//   BM_Gemv/<type>/<tier>/t<threads>     4096x4096 weights . one token. Enough distinct copies of
//                                        the matrix (>= 256 MiB) are cycled that every call reads
//                                        its weights from DRAM: bytes_per_second = weight bytes
//                                        read, to compare with BM_Stream/read (the roofline).
//   BM_Batch/<type>/<tier>/t<threads>/tokens:<n>
//                                        the cold 4096x4096 weights . n = 1..6 tokens (a
//                                        speculative verification pass, a few server slots):
//                                        bytes_per_second = weight bytes over time, as BM_Gemv.
//   BM_Gemm/<type>/<tier>/t<threads>/tokens:<n>
//                                        4096x4096 weights x n tokens (prefill);
//                                        counter GFLOPs = 2 n_in n_out n_tokens / s.
// Wall-clock time (the work runs in the pool). Formats: F32 F16 Q8_0 Q4_0 Q4_K Q6_K TQ2_0 TQ1_0 I2_S; tiers:
// every one this CPU runs above scalar. The matrices are packed with kernels::pack_weight (as a
// backend packs a model's) before timing, so formats with row-group kernels time them on their
// repacked weights.
#include <benchmark/benchmark.h>

#include <array>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/thread_pool.hpp"
#include "kernels/format_table.hpp"
#include "kernels/kernels.hpp"
#include "kernels/weight_packs.hpp"

namespace {

using okapi::DType;

constexpr int64_t kN = 4096;
constexpr int64_t kDistinctRows = 256;  // quantized once (reference K-quant quantizers are slow), then tiled
constexpr size_t kColdBytes = size_t{256} << 20;

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

// `copies` back-to-back kN x kN tensors of `type` (rows, then any per-tensor tail).
struct Matrices {
  DType type = DType::F32;
  size_t tensor_bytes = 0;
  int copies = 0;
  std::unique_ptr<uint8_t[]> data;
  const uint8_t* tensor(int i) const { return data.get() + static_cast<size_t>(i) * tensor_bytes; }
};

// The first `copies` tensors of m packed for `tier` (empty handles for formats without row groups).
std::vector<okapi::kernels::PackedWeight> packed(const Matrices& m, int copies, okapi::Isa tier, okapi::ThreadPool* pool) {
  std::vector<okapi::kernels::PackedWeight> out;
  for (int c = 0; c < copies; ++c) out.push_back(okapi::kernels::pack_weight(tier, m.type, m.tensor(c), kN, kN, pool, false));
  return out;
}

const Matrices& matrices(DType type, int min_copies) {
  static Matrices cached;  // one format at a time: the cold set is hundreds of MiB
  if (cached.data && cached.type == type && cached.copies >= min_copies) return cached;
  cached = Matrices{};
  const std::array<int64_t, 2> small_shape{kN, kDistinctRows}, shape{kN, kN};
  const auto floats = gaussian(static_cast<size_t>(kN * kDistinctRows), 1);
  const std::vector<uint8_t> small = okapi::quant::quantize_tensor(type, floats.data(), small_shape);
  const size_t row = *okapi::row_bytes(type, kN);
  const size_t rows_bytes = row * static_cast<size_t>(kDistinctRows);
  cached.type = type;
  cached.tensor_bytes = *okapi::tensor_bytes(type, shape);
  cached.copies = min_copies;
  cached.data.reset(new uint8_t[cached.tensor_bytes * static_cast<size_t>(min_copies)]);
  for (int c = 0; c < min_copies; ++c) {
    uint8_t* out = cached.data.get() + static_cast<size_t>(c) * cached.tensor_bytes;
    for (int64_t r = 0; r < kN; r += kDistinctRows) std::memcpy(out + static_cast<size_t>(r) * row, small.data(), rows_bytes);
    const size_t tail = small.size() - rows_bytes;  // I2_S's scale
    if (tail > 0) std::memcpy(out + static_cast<size_t>(kN) * row, small.data() + rows_bytes, tail);
  }
  return cached;
}

void run_gemv(benchmark::State& state, DType type, okapi::Isa tier, int threads, int64_t n_tokens = 1) {
  const size_t bytes = *okapi::tensor_bytes(type, std::array<int64_t, 2>{kN, kN});
  const int copies = static_cast<int>((kColdBytes + bytes - 1) / bytes);
  const Matrices& m = matrices(type, copies);
  const auto x = gaussian(static_cast<size_t>(kN * n_tokens), 2);
  std::vector<float> y(static_cast<size_t>(kN * n_tokens));
  okapi::ThreadPool pool(threads);
  const auto packs = packed(m, m.copies, tier, &pool);
  int next = 0;
  for (auto _ : state) {
    okapi::kernels::matmul(tier, type, m.tensor(next), kN, kN, x.data(), n_tokens, y.data(), &pool,
                           &packs[static_cast<size_t>(next)]);
    next = (next + 1) % m.copies;
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(*okapi::row_bytes(type, kN)) * kN);
}

void run_gemm(benchmark::State& state, DType type, okapi::Isa tier, int threads, int64_t n_tokens) {
  const Matrices& m = matrices(type, 1);
  const auto x = gaussian(static_cast<size_t>(kN * n_tokens), 3);
  std::vector<float> y(static_cast<size_t>(kN * n_tokens));
  okapi::ThreadPool pool(threads);
  const auto packs = packed(m, 1, tier, &pool);
  for (auto _ : state) {
    okapi::kernels::matmul(tier, type, m.tensor(0), kN, kN, x.data(), n_tokens, y.data(), &pool, &packs[0]);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOPs"] = benchmark::Counter(static_cast<double>(2 * kN * kN * n_tokens) * 1e-9 *
                                                    static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
}

const bool registered = [] {
  for (DType type : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::TQ2_0, DType::TQ1_0,
                     DType::I2_S}) {
    for (okapi::Isa tier : okapi::available_isas()) {
      if (tier == okapi::Isa::scalar) continue;
      const std::string name = std::string(okapi::dtype_name(type)) + "/" + std::string(okapi::isa_name(tier));
      for (int threads : {1, 2}) {
        const std::string suffix = name + "/t" + std::to_string(threads);
        benchmark::RegisterBenchmark(("BM_Gemv/" + suffix).c_str(),
                                     [=](benchmark::State& s) { run_gemv(s, type, tier, threads); })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
      for (int threads : {1, 2}) {
        for (int64_t tokens = 1; tokens <= 6; ++tokens) {
          const std::string title = "BM_Batch/" + name + "/t" + std::to_string(threads) + "/tokens:" + std::to_string(tokens);
          benchmark::RegisterBenchmark(title.c_str(), [=](benchmark::State& s) { run_gemv(s, type, tier, threads, tokens); })
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
      for (int threads : {1, 2}) {
        for (int64_t tokens : {64, 256}) {
          const std::string title = "BM_Gemm/" + name + "/t" + std::to_string(threads) + "/tokens:" + std::to_string(tokens);
          benchmark::RegisterBenchmark(title.c_str(), [=](benchmark::State& s) { run_gemm(s, type, tier, threads, tokens); })
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
  return true;
}();

}  // namespace
