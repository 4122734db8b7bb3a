// Row-kernel micro-benchmarks for every format in the quant table: dequantize, vec_dot and the
// activation quantizers, reference (scalar) and fast (AVX2, where the table has one).
//
//   BM_Dequant/<type>/<ref|avx2>     256 rows x 4096: weights streamed from memory (a few MB)
//   BM_DequantHot/<type>/<ref|avx2>  4 rows x 4096, the same rows every time (cache-resident)
//   BM_Dot/<type>/<ref|avx2>         256 weight rows . one activation row (a mat-vec)
//   BM_DotHot/<type>/<ref|avx2>      4 weight rows . one activation row
//   BM_Quantize/<type>/<ref|avx2>    one 4096-float activation row (formats with a fast quantizer)
// bytes_per_second counts weight bytes read (floats read for BM_Quantize); items are elements.
// A summary of avx2 / ref speed-ups is printed at the end. Default --benchmark_min_time=0.1.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/format_table.hpp"

namespace {

using okapi::DType;
using okapi::quant::Format;

constexpr int64_t kRowLength = 4096;
constexpr int64_t kColdRows = 256;
constexpr int64_t kHotRows = 4;
constexpr int64_t kDistinctRows = 16;  // quantized once, then tiled (the reference quantizers are slow)

std::vector<float> random_floats(int64_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = normal(gen);
  return v;
}

// `rows` rows of `type`: quantized from random floats when the format has a quantizer,
// otherwise random bytes.
struct Rows {
  size_t row_bytes = 0;
  std::vector<uint8_t> data;
  const uint8_t* row(int64_t r) const { return data.data() + static_cast<size_t>(r) * row_bytes; }
};

Rows make_rows(const Format& f, int64_t rows) {
  Rows out;
  out.row_bytes = *okapi::row_bytes(f.type, kRowLength);
  out.data.resize(out.row_bytes * static_cast<size_t>(rows));
  std::vector<uint8_t> distinct(out.row_bytes * kDistinctRows);
  if (f.quantize_ref != nullptr) {
    const std::vector<float> x = random_floats(kRowLength * kDistinctRows, 42);
    for (int64_t r = 0; r < kDistinctRows; ++r) {
      f.quantize_ref(x.data() + r * kRowLength, distinct.data() + static_cast<size_t>(r) * out.row_bytes, kRowLength);
    }
  } else {
    std::mt19937 gen(7);
    for (auto& b : distinct) b = static_cast<uint8_t>(gen());
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out.data.data() + static_cast<size_t>(r) * out.row_bytes,
                distinct.data() + static_cast<size_t>(r % kDistinctRows) * out.row_bytes, out.row_bytes);
  }
  return out;
}

// Weights shared by all benchmarks of one format (built before the benchmarks run).
struct FormatData {
  Rows weights;            // kColdRows rows; the hot benchmarks use the first kHotRows
  std::vector<uint8_t> activation;  // one row of vec_dot_type, empty if no dot product
};

std::map<DType, std::unique_ptr<FormatData>>& all_data() {
  static std::map<DType, std::unique_ptr<FormatData>> data;
  return data;
}

void run_dequantize(benchmark::State& state, okapi::quant::DequantizeRowFn fn, const Rows& w, int64_t rows) {
  std::vector<float> out(static_cast<size_t>(kRowLength * rows));
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) fn(w.row(r), out.data() + r * kRowLength, kRowLength);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.row_bytes) * rows);
  state.SetItemsProcessed(state.iterations() * kRowLength * rows);
}

void run_dot(benchmark::State& state, okapi::quant::VecDotFn fn, const FormatData& d, int64_t rows) {
  for (auto _ : state) {
    float sum = 0.0f;
    for (int64_t r = 0; r < rows; ++r) sum += fn(kRowLength, d.weights.row(r), d.activation.data());
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(d.weights.row_bytes) * rows);
  state.SetItemsProcessed(state.iterations() * kRowLength * rows);
}

void run_quantize(benchmark::State& state, okapi::quant::QuantizeRowFn fn, DType type) {
  const std::vector<float> x = random_floats(kRowLength, 3);
  std::vector<uint8_t> out(*okapi::row_bytes(type, kRowLength));
  for (auto _ : state) {
    fn(x.data(), out.data(), kRowLength);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kRowLength * static_cast<int64_t>(sizeof(float)));
  state.SetItemsProcessed(state.iterations() * kRowLength);
}

std::string bench_name(const char* kind, DType type, bool fast) {
  return std::string(kind) + "/" + std::string(okapi::dtype_name(type)) + (fast ? "/avx2" : "/ref");
}

void register_all() {
  for (DType type : okapi::quant::supported_types()) {
    const Format& f = okapi::quant::format(type);
    auto data = std::make_unique<FormatData>();
    data->weights = make_rows(f, kColdRows);
    const Format* act = okapi::quant::find_format(f.vec_dot_type);
    if (f.vec_dot_ref != nullptr && act != nullptr && act->quantize_ref != nullptr) {
      data->activation.resize(*okapi::row_bytes(act->type, kRowLength));
      act->quantize_ref(random_floats(kRowLength, 9).data(), data->activation.data(), kRowLength);
    }
    const FormatData* d = data.get();
    all_data()[type] = std::move(data);

    for (bool fast : {false, true}) {
      const auto dequantize = fast ? f.dequantize : f.dequantize_ref;
      if (fast && dequantize == f.dequantize_ref) continue;
      benchmark::RegisterBenchmark(bench_name("BM_Dequant", type, fast).c_str(),
                                   [=](benchmark::State& s) { run_dequantize(s, dequantize, d->weights, kColdRows); });
      benchmark::RegisterBenchmark(bench_name("BM_DequantHot", type, fast).c_str(),
                                   [=](benchmark::State& s) { run_dequantize(s, dequantize, d->weights, kHotRows); });
    }
    if (!d->activation.empty()) {
      for (bool fast : {false, true}) {
        const auto dot = fast ? f.vec_dot : f.vec_dot_ref;
        if (fast && dot == f.vec_dot_ref) continue;
        benchmark::RegisterBenchmark(bench_name("BM_Dot", type, fast).c_str(),
                                     [=](benchmark::State& s) { run_dot(s, dot, *d, kColdRows); });
        benchmark::RegisterBenchmark(bench_name("BM_DotHot", type, fast).c_str(),
                                     [=](benchmark::State& s) { run_dot(s, dot, *d, kHotRows); });
      }
    }
    if (f.quantize != f.quantize_ref) {
      for (bool fast : {false, true}) {
        const auto quantize = fast ? f.quantize : f.quantize_ref;
        benchmark::RegisterBenchmark(bench_name("BM_Quantize", type, fast).c_str(),
                                     [=](benchmark::State& s) { run_quantize(s, quantize, type); });
      }
    }
  }
}

// Console output as usual, plus bytes/s of every run kept for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  SummaryReporter() : ConsoleReporter(isatty(fileno(stdout)) ? OO_Defaults : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      const auto bytes = run.counters.find("bytes_per_second");
      const auto items = run.counters.find("items_per_second");
      if (bytes == run.counters.end() || items == run.counters.end()) continue;
      rates_[run.benchmark_name()] = {bytes->second.value / 1e9, items->second.value / 1e9};
    }
    ConsoleReporter::ReportRuns(runs);
  }

  // One line per format and benchmark kind that has both a ref and an avx2 run (GB = 1e9 bytes).
  void print_summary() const {
    std::printf("\n%-14s %-8s %9s %10s %9s %11s %12s\n", "kind", "type", "ref GB/s", "avx2 GB/s", "speed-up",
                "ref Gel/s", "avx2 Gel/s");
    for (const auto& [name, fast] : rates_) {
      const auto slash = name.rfind('/');
      if (name.substr(slash + 1) != "avx2") continue;
      const auto ref = rates_.find(name.substr(0, slash) + "/ref");
      if (ref == rates_.end()) continue;
      const std::string kind_type = name.substr(0, slash);
      const auto mid = kind_type.find('/');
      std::printf("%-14s %-8s %9.2f %10.2f %8.1fx %11.2f %12.2f\n", kind_type.substr(0, mid).c_str(),
                  kind_type.substr(mid + 1).c_str(), ref->second.gbps, fast.gbps, fast.gbps / ref->second.gbps,
                  ref->second.gelems, fast.gelems);
    }
  }

 private:
  struct Rate {
    double gbps;    // weight (or input float) bytes per second / 1e9
    double gelems;  // elements per second / 1e9
  };
  std::map<std::string, Rate> rates_;
};

}  // namespace

int main(int argc, char** argv) {
  // A short default measuring time keeps the whole run (~120 benchmarks) well under a minute.
  std::vector<char*> args(argv, argv + argc);
  bool has_min_time = false;
  for (int i = 1; i < argc; ++i) has_min_time = has_min_time || std::strncmp(argv[i], "--benchmark_min_time", 20) == 0;
  std::string min_time = "--benchmark_min_time=0.1";
  if (!has_min_time) args.push_back(min_time.data());
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  register_all();
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_summary();
  benchmark::Shutdown();
  return 0;
}
