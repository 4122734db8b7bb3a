// STREAM-like memory bandwidth (McCalpin's copy / scale / add / triad, plus pure reads: one
// stream per thread, and read8, eight interleaved streams per thread, the access pattern of a
// decode GEMV over row groups, which reads several packed groups side by side) on arrays of 2^25 doubles (256 MiB each, far beyond the 32 MiB
// L3), with 1 and 2 threads of okapi's ThreadPool. bytes_per_second counts STREAM's way: bytes
// read plus bytes written, no write-allocate traffic. Wall-clock time (the work runs in the pool).
//
//   okapi_bench_kernels --benchmark_filter=BM_Stream --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/thread_pool.hpp"

namespace {

constexpr int64_t kElements = int64_t{1} << 25;

struct Arrays {
  std::unique_ptr<double[]> a, b, c;
  double sink = 0.0;
};

// Allocated on first use (so other benchmarks do not pay 768 MiB) and first touched by both
// threads' chunks, as STREAM does.
Arrays& arrays() {
  static Arrays s = [] {
    Arrays out{std::unique_ptr<double[]>(new double[kElements]), std::unique_ptr<double[]>(new double[kElements]),
               std::unique_ptr<double[]>(new double[kElements])};
    okapi::ThreadPool pool(2);
    pool.parallel_for(kElements, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) {
        out.a[i] = 1.0;
        out.b[i] = 2.0;
        out.c[i] = 0.0;
      }
    });
    return out;
  }();
  return s;
}

enum class Kernel { Read, Read8, Copy, Scale, Add, Triad };

constexpr int kStreams = 8;

void run_stream(benchmark::State& state, Kernel kernel, int threads) {
  Arrays& s = arrays();
  double* a = s.a.get();
  double* b = s.b.get();
  double* c = s.c.get();
  const double q = 3.0;
  okapi::ThreadPool pool(threads);
  double partial[2] = {0.0, 0.0};
  for (auto _ : state) {
    pool.parallel_for(kElements, [&](int64_t begin, int64_t end, int index) {
      switch (kernel) {
        case Kernel::Read: {
          // XOR of the bit patterns: an integer reduction the compiler vectorizes, so the loop
          // is limited by memory, not by the latency of a floating-point add chain.
          const auto* bits = reinterpret_cast<const uint64_t*>(a);
          uint64_t acc = 0;
          for (int64_t i = begin; i < end; ++i) acc ^= bits[i];
          partial[index] = static_cast<double>(acc & 1u);
          break;
        }
        case Kernel::Read8: {
          // The chunk as kStreams consecutive parts, walked side by side.
          const auto* bits = reinterpret_cast<const uint64_t*>(a);
          const int64_t part = (end - begin) / kStreams;
          uint64_t acc[kStreams] = {};
          for (int64_t i = 0; i < part; i += 8) {
            for (int st = 0; st < kStreams; ++st) {
              const uint64_t* p = bits + begin + st * part + i;
              for (int j = 0; j < 8; ++j) acc[st] ^= p[j];
            }
          }
          uint64_t all = 0;
          for (const uint64_t v : acc) all ^= v;
          partial[index] = static_cast<double>(all & 1u);
          break;
        }
        case Kernel::Copy:
          for (int64_t i = begin; i < end; ++i) c[i] = a[i];
          break;
        case Kernel::Scale:
          for (int64_t i = begin; i < end; ++i) b[i] = q * c[i];
          break;
        case Kernel::Add:
          for (int64_t i = begin; i < end; ++i) c[i] = a[i] + b[i];
          break;
        case Kernel::Triad:
          for (int64_t i = begin; i < end; ++i) a[i] = b[i] + q * c[i];
          break;
      }
    });
    benchmark::ClobberMemory();
  }
  s.sink += partial[0] + partial[1];
  const int64_t arrays_touched = kernel == Kernel::Read || kernel == Kernel::Read8 ? 1 : (kernel == Kernel::Add || kernel == Kernel::Triad ? 3 : 2);
  state.SetBytesProcessed(state.iterations() * kElements * arrays_touched * static_cast<int64_t>(sizeof(double)));
}

const bool registered = [] {
  const std::pair<const char*, Kernel> kernels[] = {
      {"read", Kernel::Read}, {"read8", Kernel::Read8}, {"copy", Kernel::Copy}, {"scale", Kernel::Scale}, {"add", Kernel::Add}, {"triad", Kernel::Triad}};
  for (const auto& [name, kernel] : kernels) {
    for (int threads : {1, 2}) {
      const std::string title = std::string("BM_Stream/") + name + "/t" + std::to_string(threads);
      benchmark::RegisterBenchmark(title.c_str(), [kernel, threads](benchmark::State& st) { run_stream(st, kernel, threads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.5);
    }
  }
  return true;
}();

}  // namespace
