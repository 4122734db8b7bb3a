#include "core/cpu.hpp"

#include <fmt/format.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace okapi {
namespace {

constexpr std::array<Isa, 3> kTiers{Isa::scalar, Isa::avx2, Isa::avx512};

bool bit(unsigned reg, int n) { return (reg & (1u << n)) != 0; }

#if defined(__x86_64__) || defined(__i386__)
// CPUID leaves rather than __builtin_cpu_supports: clang 14 does not know "f16c" there, and we
// must also check that the OS saves the YMM (XCR0 bits 1-2) and ZMM / opmask (bits 5-7) state.
CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return f;
  const bool osxsave = bit(ecx, 27), avx = bit(ecx, 28), fma = bit(ecx, 12), f16c = bit(ecx, 29);
  unsigned xcr0 = 0;
  if (osxsave) {
    unsigned xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
  }
  const bool ymm_enabled = (xcr0 & 0x6u) == 0x6u;
  const bool zmm_enabled = ymm_enabled && (xcr0 & 0xe0u) == 0xe0u;
  if (!(avx && ymm_enabled)) return f;
  f.fma = fma;
  f.f16c = f16c;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  f.avx2 = bit(ebx, 5);
  if (zmm_enabled) {
    f.avx512f = bit(ebx, 16);
    f.avx512dq = bit(ebx, 17);
    f.avx512bw = bit(ebx, 30);
    f.avx512vl = bit(ebx, 31);
    f.avx512vnni = bit(ecx, 11);
    unsigned max_sub = eax;
    if (max_sub >= 1) {
      __cpuid_count(7, 1, eax, ebx, ecx, edx);
      f.avx512bf16 = bit(eax, 5);
    }
  }
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

// `f` with every feature above `tier` cleared.
CpuFeatures capped(CpuFeatures f, Isa tier) {
  if (tier < Isa::avx512) f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = f.avx512vnni = f.avx512bf16 = false;
  if (tier < Isa::avx2) f.avx2 = f.fma = f.f16c = false;
  return f;
}

struct Selection {
  CpuFeatures features;
  Isa tier = Isa::scalar;  // features.best_isa(), kept: isa() is asked per kernel call
  std::string error;       // non-empty: OKAPI_ISA asks for something impossible
};

Selection select() {
  const CpuFeatures& detected = detected_cpu_features();
  Isa tier = detected.best_isa();
  const char* requested = std::getenv("OKAPI_ISA");
  if (requested != nullptr && requested[0] != '\0') {
    Isa wanted = Isa::scalar;
    try {
      wanted = parse_isa(requested);
    } catch (const Error& e) {
      return {{}, Isa::scalar, fmt::format("OKAPI_ISA: {}", e.what())};
    }
    if (wanted > tier) {
      return {{}, Isa::scalar, fmt::format("OKAPI_ISA={} asks for a tier this CPU does not have (the best here is {})", requested,
                              isa_name(tier))};
    }
    tier = wanted;
  }
  const char* force = std::getenv("OKAPI_FORCE_SCALAR");
  if (force != nullptr && force[0] != '\0' && std::strcmp(force, "0") != 0) tier = Isa::scalar;
  return {capped(detected, tier), tier, {}};
}

const Selection& selection() {
  static const Selection s = select();
  return s;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

Isa parse_isa(std::string_view name) {
  for (Isa tier : kTiers) {
    if (name == isa_name(tier)) return tier;
  }
  throw_error("unknown ISA tier '{}' (expected scalar, avx2 or avx512)", name);
}

Isa CpuFeatures::best_isa() const {
  if (!(avx2 && fma && f16c)) return Isa::scalar;
  if (!(avx512f && avx512bw && avx512dq && avx512vl && avx512vnni)) return Isa::avx2;
  return Isa::avx512;
}

const CpuFeatures& detected_cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

const CpuFeatures& cpu_features() {
  const Selection& s = selection();
  if (!s.error.empty()) throw Error(s.error);
  return s.features;
}

Isa isa() {
  const Selection& s = selection();
  if (!s.error.empty()) throw Error(s.error);
  return s.tier;
}

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa tier : kTiers) {
    if (tier <= isa()) out.push_back(tier);
  }
  return out;
}

}  // namespace okapi
