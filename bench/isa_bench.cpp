// BM_Isa/<instruction>/chains:<n>: n independent chains of a dependent instruction (vpdpbusd on
// zmm and ymm, vpmulld, vfmadd on zmm), registered only on the avx512 tier. items/s = instructions
// per second; BM_Isa/add_chain runs 1-cycle dependent integer adds, so its items/s is the clock:
// cycles per instruction = add_chain rate / rate. One chain gives the latency, 8-16 the
// throughput. On the 2-core Zen 5 EPYC (3.6 GHz): vpdpbusd latency 4 cycles, 1 per cycle on zmm
// and 2 on ymm (the same 64 multiply-adds per cycle); vpmulld zmm latency 3, 1 per cycle; vfmadd
// zmm latency 4, 1 per cycle. So a float step costs about one vpdpbusd: the row-group kernels do
// one (cvt + mul + FMA) per 8 vpdpbusd (Q8_0 / Q4_0 block of 32) and one vpmulld per 4 or 8
// (K-quant sub-blocks), and 8-16 tokens per pass keep enough independent chains in flight.
#include <benchmark/benchmark.h>

#include <string>

#include "avx512/vnni_throughput.hpp"
#include "core/cpu.hpp"

namespace {

using okapi::bench::avx512::Unit;

constexpr int64_t kIterations = 1 << 20;

void add_chain(benchmark::State& state) {
  int64_t x = 0;
  for (auto _ : state) {
    for (int64_t i = 0; i < kIterations; ++i) asm volatile("add $1, %0" : "+r"(x));
  }
  benchmark::DoNotOptimize(x);
  state.SetItemsProcessed(state.iterations() * kIterations);
}

const bool registered = [] {
  if (okapi::isa() < okapi::Isa::avx512) return false;
  benchmark::RegisterBenchmark("BM_Isa/add_chain", add_chain);
  const std::pair<const char*, Unit> units[] = {{"vpdpbusd_zmm", Unit::dpbusd_zmm},
                                                {"vpdpbusd_ymm", Unit::dpbusd_ymm},
                                                {"vpmulld_zmm", Unit::mullo_zmm},
                                                {"vfmadd_zmm", Unit::fma_zmm}};
  for (const auto& [name, unit] : units) {
    for (int chains : {1, 4, 8, 16}) {
      const std::string title = std::string("BM_Isa/") + name + "/chains:" + std::to_string(chains);
      benchmark::RegisterBenchmark(title.c_str(), [unit = unit, chains](benchmark::State& state) {
        for (auto _ : state)
          benchmark::DoNotOptimize(okapi::bench::avx512::dependent_chains(unit, chains, kIterations));
        state.SetItemsProcessed(state.iterations() * kIterations * chains);
      });
    }
  }
  return true;
}();

}  // namespace
