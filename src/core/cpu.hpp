// Run-time CPU feature detection and the ISA tier the kernels use. One binary carries every tier;
// code compiled for a tier lives in folders of its own (src/**/avx2/, src/**/avx512/, built with
// that tier's flags) and is only called once isa() says the tier is in use.
//
// The tier in use is the best one the CPU (and the OS, which must save the wider registers) has,
// unless the environment asks for a lower one:
//   OKAPI_ISA=scalar|avx2|avx512   that tier (an unknown name, or a tier this CPU lacks, is an
//                                  okapi::Error when the kernels are first chosen)
//   OKAPI_FORCE_SCALAR=1           the older spelling of OKAPI_ISA=scalar (the lower of the two wins)
#pragma once
#include <string_view>
#include <vector>

namespace okapi {

// Ordered: a tier includes everything below it.
enum class Isa {
  scalar = 0,  // the reference kernels
  avx2 = 1,    // AVX2 + FMA + F16C
  avx512 = 2,  // AVX2 tier + AVX-512 F, BW, DQ, VL and VNNI (BF16 noted apart, see CpuFeatures)
};

std::string_view isa_name(Isa isa);
// "scalar" | "avx2" | "avx512" -> the tier; throws okapi::Error naming the valid values otherwise.
Isa parse_isa(std::string_view name);

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;  // not part of a tier: kernels that use it check it themselves

  // The best tier these features allow.
  Isa best_isa() const;
  // All of AVX2, FMA and F16C (what our avx2/ kernels are compiled for).
  bool use_avx2() const { return best_isa() >= Isa::avx2; }
  bool use_avx512() const { return best_isa() >= Isa::avx512; }
};

// What the CPU and OS offer, whatever the environment says.
const CpuFeatures& detected_cpu_features();
// The features of the tier in use: detected_cpu_features() with everything above isa() cleared
// (so OKAPI_ISA=avx2 on an AVX-512 machine reports no AVX-512). Throws okapi::Error for a bad
// OKAPI_ISA (on every call, so the error reaches whoever asks first).
const CpuFeatures& cpu_features();
// The tier in use (cpu_features().best_isa()).
Isa isa();
// The tiers that may run here, scalar first, up to isa(): what tests compare against scalar.
std::vector<Isa> available_isas();

}  // namespace okapi
