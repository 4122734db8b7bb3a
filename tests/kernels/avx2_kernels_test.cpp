// The AVX2 kernels (kernels/avx2/) against the scalar reference rows of the format table:
//  * dequantize: bit-identical output, including zero, negative, subnormal, inf and NaN scales;
//  * activation quantizers (F16, Q8_0, Q8_1, Q8_K): byte-identical output, including rounding ties;
//  * dot products: the integer parts are exact in both, but the float partial sums are combined
//    in a different order (8-lane FMA accumulators vs the reference's sequential / double sums),
//    so results must agree within kRelTol of the sum of the magnitudes of the terms
//    (sum |w_i * a_i|; for the formats with a min (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K), whose weights
//    are d*q + m computed as two separate float terms, sum (|d*q| + |m|) * |a_i|). Both are also
//    checked against a double precision dot of the dequantized rows (for Q8_1 activations the min
//    term uses the block sum s the activation row stores, as the kernels do).
// Skipped (except the table tests) on CPUs without AVX2+FMA+F16C.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cpu.hpp"
#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "support/cli.hpp"
#include "support/golden_files.hpp"
#include "support/paths.hpp"

namespace okapi::quant {
namespace {

// Each kernel sums at most a few hundred rounded partials, each off by <= 2^-24 of its own
// magnitude; 1e-5 leaves room for both sides on rows of thousands of elements.
constexpr double kRelTol = 1e-5;

// AVX2 dequantize and vec_dot; vec_dot only; activation quantizers.
constexpr DType kFastTypes[] = {DType::F32,  DType::F16,  DType::Q4_0, DType::Q5_0,
                                DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::TQ2_0};
constexpr DType kFastDotOnly[] = {DType::Q4_1, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q5_K, DType::I2_S};
constexpr DType kFastQuantizers[] = {DType::F16, DType::Q8_0, DType::Q8_1, DType::Q8_K};

std::vector<DType> fast_dot_types() {
  std::vector<DType> out(std::begin(kFastTypes), std::end(kFastTypes));
  out.insert(out.end(), std::begin(kFastDotOnly), std::end(kFastDotOnly));
  return out;
}

#define REQUIRE_AVX2()                                                                          \
  do {                                                                                          \
    if (!cpu_features().use_avx2()) GTEST_SKIP() << "no AVX2+FMA+F16C (or OKAPI_FORCE_SCALAR)"; \
  } while (0)

using Bytes = std::vector<uint8_t>;

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(gen_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(gen_); }
  uint8_t byte() { return static_cast<uint8_t>(uniform_int(0, 255)); }

 private:
  std::mt19937_64 gen_;
};

size_t bytes_of(DType type, int64_t n) { return *row_bytes(type, n); }
int64_t block_size(DType type) { return layout(type).block_size; }

// A random fp16 scale: mostly log-uniform normal values of either sign, sometimes zero or
// subnormal; with `nonfinite`, sometimes inf or NaN (quiet or signalling).
uint16_t random_scale(Rng& rng, bool nonfinite) {
  const int pick = rng.uniform_int(0, 19);
  const uint16_t sign = rng.chance(0.5) ? 0x8000 : 0;
  if (pick == 0) return sign;                                                      // +-0
  if (pick == 1) return static_cast<uint16_t>(sign | rng.uniform_int(1, 0x3ff));  // subnormal
  if (nonfinite && pick == 2) return static_cast<uint16_t>(sign | 0x7c00);        // inf
  if (nonfinite && pick == 3) return static_cast<uint16_t>(sign | 0x7c00 | rng.uniform_int(1, 0x3ff));
  return fp32_to_fp16(static_cast<float>(sign ? -1 : 1) * std::exp2(rng.uniform(-20.0f, 8.0f)));
}

void put_u16(Bytes& row, size_t offset, uint16_t v) { std::memcpy(row.data() + offset, &v, 2); }

// Byte offsets of the fp16 scale fields inside one block.
std::vector<size_t> scale_fields(DType type) {
  switch (type) {
    case DType::Q4_0: return {offsetof(block_q4_0, d)};
    case DType::Q4_1: return {offsetof(block_q4_1, d), offsetof(block_q4_1, m)};
    case DType::Q5_0: return {offsetof(block_q5_0, d)};
    case DType::Q5_1: return {offsetof(block_q5_1, d), offsetof(block_q5_1, m)};
    case DType::Q8_0: return {offsetof(block_q8_0, d)};
    case DType::Q2_K: return {offsetof(block_q2_K, d), offsetof(block_q2_K, dmin)};
    case DType::Q3_K: return {offsetof(block_q3_K, d)};
    case DType::Q4_K: return {offsetof(block_q4_K, d), offsetof(block_q4_K, dmin)};
    case DType::Q5_K: return {offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)};
    case DType::Q6_K: return {offsetof(block_q6_K, d)};
    case DType::TQ2_0: return {offsetof(block_tq2_0, d)};
    default: return {};
  }
}

// A weight row: random bytes with random scales. F32/F16 rows hold random finite values.
Bytes random_weights(DType type, int64_t n, Rng& rng, bool nonfinite_scales) {
  Bytes row(bytes_of(type, n));
  if (type == DType::F32 || type == DType::F16) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = rng.chance(0.05) ? 0.0f : rng.normal() * std::exp2(rng.uniform(-8.0f, 8.0f));
      if (type == DType::F32) {
        std::memcpy(row.data() + 4 * i, &v, 4);
      } else {
        put_u16(row, static_cast<size_t>(2 * i), fp32_to_fp16(v));
      }
    }
    return row;
  }
  for (auto& b : row) b = rng.byte();
  const size_t block_bytes = layout(type).block_bytes;
  for (size_t block = 0; block < row.size() / block_bytes; ++block) {
    for (size_t field : scale_fields(type)) put_u16(row, block * block_bytes + field, random_scale(rng, nonfinite_scales));
  }
  return row;
}

// The extreme weight row: every level at its largest value, scales at their largest magnitude.
Bytes extreme_weights(DType type, int64_t n) {
  Bytes row(bytes_of(type, n), 0xff);
  const size_t block_bytes = layout(type).block_bytes;
  for (size_t block = 0; block < row.size() / block_bytes; ++block) {
    uint8_t* b = row.data() + block * block_bytes;
    if (type == DType::Q8_0) std::memset(b + offsetof(block_q8_0, qs), 0x80, QK8_0);  // all -128
    if (type == DType::Q6_K) std::memset(b + offsetof(block_q6_K, scales), 0x80, QK_K / 16);  // -128
    if (type == DType::TQ2_0) std::memset(b, 0xaa, QK_K / 4);  // level 2 = +1 everywhere
    if (type == DType::Q3_K) std::memset(b, 0, offsetof(block_q3_K, d));  // level -4, scale -32
    for (size_t field : scale_fields(type)) put_u16(row, block * block_bytes + field, fp32_to_fp16(-1.5f));
  }
  return row;
}

void set_q8_K_bsums(block_q8_K& b) {
  for (int g = 0; g < QK_K / 16; ++g) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
    b.bsums[g] = static_cast<int16_t>(sum);
  }
}

enum class Levels { Random, Extreme };

// An activation row of the format the weights pair with. Q8_0 / Q8_1 levels stay in [-127, 127]
// (the kernels' documented domain, all our quantizers produce); Q8_K levels take every int8 value,
// -128 included, which its kernels handle exactly. Scales include zero and negative values.
// Q8_1 blocks store s = d * sum(qs) rounded to fp16, as the quantizer does.
template <typename Block>
void fill_q8_blocks(Bytes& row, int64_t n, Rng& rng, Levels levels) {
  auto* blocks = reinterpret_cast<Block*>(row.data());
  for (int64_t i = 0; i < n / QK8_0; ++i) {
    blocks[i].d = random_scale(rng, false);
    int sum = 0;
    for (auto& q : blocks[i].qs) {
      q = static_cast<int8_t>(levels == Levels::Extreme ? (rng.chance(0.5) ? 127 : -127) : rng.uniform_int(-127, 127));
      sum += q;
    }
    if constexpr (std::is_same_v<Block, block_q8_1>) {
      // A quantizer's d is max|x| / 127, so its s = d * sum(qs) <= 32 max|x| fits fp16 for any
      // activation that does; random scales could overflow it: shrink them until it fits.
      while (std::isinf(fp16_to_fp32(fp32_to_fp16(static_cast<float>(sum) * fp16_to_fp32(blocks[i].d))))) {
        blocks[i].d = fp32_to_fp16(fp16_to_fp32(blocks[i].d) / 16.0f);
      }
      blocks[i].s = fp32_to_fp16(static_cast<float>(sum) * fp16_to_fp32(blocks[i].d));
    }
  }
}

Bytes random_activations(DType type, int64_t n, Rng& rng, Levels levels) {
  if (type == DType::F32 || type == DType::F16) return random_weights(type, n, rng, false);
  Bytes row(bytes_of(type, n));
  if (type == DType::Q8_0) {
    fill_q8_blocks<block_q8_0>(row, n, rng, levels);
  } else if (type == DType::Q8_1) {
    fill_q8_blocks<block_q8_1>(row, n, rng, levels);
  } else if (type == DType::I8_S) {  // [float s][int32 sum][int8 levels], one scale per row
    const float s = 127.0f / rng.uniform(0.01f, 20.0f);
    int32_t sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const auto q = static_cast<int8_t>(levels == Levels::Extreme ? -128 : rng.uniform_int(-128, 127));
      row[8 + static_cast<size_t>(i)] = static_cast<uint8_t>(q);
      sum += q;
    }
    std::memcpy(row.data(), &s, sizeof(s));
    std::memcpy(row.data() + 4, &sum, sizeof(sum));
  } else {
    auto* blocks = reinterpret_cast<block_q8_K*>(row.data());
    for (int64_t i = 0; i < n / QK_K; ++i) {
      blocks[i].d = rng.chance(0.1) ? 0.0f : rng.uniform(-4.0f, 4.0f);
      for (auto& q : blocks[i].qs) {
        q = static_cast<int8_t>(levels == Levels::Extreme ? -128 : rng.uniform_int(-128, 127));
      }
      set_q8_K_bsums(blocks[i]);
    }
  }
  return row;
}

std::vector<float> dequantized(DType type, const Bytes& row, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  format(type).dequantize_ref(row.data(), out.data(), n);
  return out;
}

// sum |w_i * a_i| (see the file comment for the formats with a min), and the double-precision dot.
struct Expected {
  double magnitude = 0.0;
  double exact = 0.0;
};

bool has_min(DType type) { return scale_fields(type).size() == 2; }  // (d, m) or (d, dmin)

// The weights' two terms d*q and m, dequantized from copies with the other fp16 field zeroed.
struct SplitWeights {
  std::vector<float> scaled, mins;
};
SplitWeights split_weights(DType type, const Bytes& w, int64_t n) {
  const std::vector<size_t> fields = scale_fields(type);
  const size_t block_bytes = layout(type).block_bytes;
  Bytes no_min = w, no_scale = w;
  for (size_t b = 0; b < w.size() / block_bytes; ++b) {
    put_u16(no_min, b * block_bytes + fields[1], 0);
    put_u16(no_scale, b * block_bytes + fields[0], 0);
  }
  return {dequantized(type, no_min, n), dequantized(type, no_scale, n)};
}

Expected expected_dot(DType type, const Bytes& w, const Bytes& a, int64_t n) {
  const Format& f = format(type);
  const std::vector<float> wf = dequantized(type, w, n);
  const std::vector<float> af = dequantized(f.vec_dot_type, a, n);
  Expected e;
  if (f.vec_dot_type == DType::Q8_1) {
    // sum d*q*a_i over the elements, plus m * s (the activation block's stored sum) per block.
    const SplitWeights parts = split_weights(type, w, n);
    const auto* blocks = reinterpret_cast<const block_q8_1*>(a.data());
    for (size_t i = 0; i < wf.size(); ++i) {
      const double term = static_cast<double>(parts.scaled[i]) * static_cast<double>(af[i]);
      e.magnitude += std::fabs(term);
      e.exact += term;
    }
    for (size_t b = 0; b < wf.size() / QK8_1; ++b) {
      const double term = static_cast<double>(parts.mins[b * QK8_1]) * fp16_to_fp32(blocks[b].s);
      e.magnitude += std::fabs(term);
      e.exact += term;
    }
    return e;
  }
  std::vector<float> term_magnitude(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) term_magnitude[i] = std::fabs(wf[i]);
  if (has_min(type)) {
    const SplitWeights parts = split_weights(type, w, n);
    for (size_t i = 0; i < wf.size(); ++i) term_magnitude[i] = std::fabs(parts.scaled[i]) + std::fabs(parts.mins[i]);
  }
  for (size_t i = 0; i < wf.size(); ++i) {
    e.magnitude += static_cast<double>(term_magnitude[i]) * std::fabs(static_cast<double>(af[i]));
    e.exact += static_cast<double>(wf[i]) * static_cast<double>(af[i]);
  }
  return e;
}

std::vector<int64_t> test_lengths(DType type) {
  const int64_t bs = block_size(type);
  if (bs == 1) return {1, 3, 7, 8, 9, 31, 32, 33, 100, 256, 4096, 4099};
  return {bs, 3 * bs, 8 * bs, 4096};
}

std::string label(DType type, int64_t n, int trial) {
  return std::string(dtype_name(type)) + " n=" + std::to_string(n) + " trial " + std::to_string(trial);
}

void expect_same_floats(const std::vector<float>& fast, const std::vector<float>& ref, const std::string& what) {
  ASSERT_EQ(fast.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    uint32_t fb, rb;
    std::memcpy(&fb, &fast[i], 4);
    std::memcpy(&rb, &ref[i], 4);
    ASSERT_EQ(fb, rb) << what << " element " << i << ": avx2 " << fast[i] << " ref " << ref[i];
  }
}

void check_dequantize(DType type, const Bytes& row, int64_t n, const std::string& what) {
  const Format& f = format(type);
  std::vector<float> fast(static_cast<size_t>(n), -7.0f), ref(static_cast<size_t>(n), 7.0f);
  f.dequantize(row.data(), fast.data(), n);
  f.dequantize_ref(row.data(), ref.data(), n);
  expect_same_floats(fast, ref, what);
}

void check_dot(DType type, const Bytes& w, const Bytes& a, int64_t n, const std::string& what) {
  const Format& f = format(type);
  const double fast = f.vec_dot(n, w.data(), a.data());
  const double ref = f.vec_dot_ref(n, w.data(), a.data());
  const Expected e = expected_dot(type, w, a, n);
  const double tol = kRelTol * e.magnitude + std::numeric_limits<float>::min();
  EXPECT_NEAR(fast, ref, tol) << what << " (sum|w*a| = " << e.magnitude << ")";
  EXPECT_NEAR(fast, e.exact, tol) << what << " vs double";
  EXPECT_NEAR(ref, e.exact, tol) << what << " reference vs double";
}

TEST(Avx2Table, FastKernelsInstalledExactlyWhenTheCpuAllows) {
  const bool avx2 = cpu_features().use_avx2();
  for (DType type : kFastTypes) {
    const Format& f = format(type);
    EXPECT_EQ(f.dequantize != f.dequantize_ref, avx2) << dtype_name(type);
    EXPECT_EQ(f.vec_dot != f.vec_dot_ref, avx2) << dtype_name(type);
  }
  for (DType type : kFastDotOnly) {
    EXPECT_EQ(format(type).vec_dot != format(type).vec_dot_ref, avx2) << dtype_name(type);
    EXPECT_EQ(format(type).dequantize, format(type).dequantize_ref) << dtype_name(type);
  }
  for (DType type : kFastQuantizers) EXPECT_EQ(format(type).quantize != format(type).quantize_ref, avx2) << dtype_name(type);
  // Formats without AVX2 kernels keep their reference rows.
  EXPECT_EQ(format(DType::TQ1_0).vec_dot, format(DType::TQ1_0).vec_dot_ref);
  EXPECT_EQ(format(DType::Q4_K).quantize, format(DType::Q4_K).quantize_ref);
}

// The feature check and the table are built once per process, so OKAPI_FORCE_SCALAR=1 is checked
// in a child process running only this test.
TEST(Avx2Table, ForceScalarSelectsTheReferenceRows) {
  const char* forced = std::getenv("OKAPI_FORCE_SCALAR");
  if (forced != nullptr && std::strcmp(forced, "1") == 0) {
    EXPECT_FALSE(cpu_features().use_avx2());
    ASSERT_FALSE(supported_types().empty());
    for (DType type : supported_types()) {
      const Format& f = format(type);
      EXPECT_EQ(f.dequantize, f.dequantize_ref) << dtype_name(type);
      EXPECT_EQ(f.quantize, f.quantize_ref) << dtype_name(type);
      EXPECT_EQ(f.vec_dot, f.vec_dot_ref) << dtype_name(type);
    }
    if (!::testing::Test::HasFailure()) std::printf("forced-scalar-table-ok\n");
    return;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const auto child = test::run_command("OKAPI_FORCE_SCALAR=1 '" + self +
                                       "' --gtest_filter=Avx2Table.ForceScalarSelectsTheReferenceRows");
  EXPECT_EQ(child.exit_code, 0) << child.output;
  EXPECT_NE(child.output.find("forced-scalar-table-ok"), std::string::npos) << child.output;
}

TEST(Avx2Dequantize, RandomRowsAreBitIdentical) {
  REQUIRE_AVX2();
  Rng rng(1);
  for (DType type : kFastTypes) {
    for (int64_t n : test_lengths(type)) {
      for (int trial = 0; trial < 4; ++trial) {
        check_dequantize(type, random_weights(type, n, rng, /*nonfinite_scales=*/trial % 2 == 1), n, label(type, n, trial));
      }
    }
    if (type != DType::F32 && type != DType::F16) {
      check_dequantize(type, extreme_weights(type, 4096), 4096, label(type, 4096, -1) + " extreme");
    }
  }
}

TEST(Avx2Dequantize, EveryF16BitPattern) {
  REQUIRE_AVX2();
  const int64_t n = 65536 + 5;  // + a tail shorter than a vector
  Bytes row(static_cast<size_t>(2 * n));
  for (int64_t i = 0; i < n; ++i) put_u16(row, static_cast<size_t>(2 * i), static_cast<uint16_t>(i * 7919));
  check_dequantize(DType::F16, row, n, "all f16");
}

TEST(Avx2Dot, RandomRowsMatchTheReference) {
  REQUIRE_AVX2();
  Rng rng(2);
  for (DType type : fast_dot_types()) {
    const DType act = format(type).vec_dot_type;
    for (int64_t n : test_lengths(type)) {
      for (int trial = 0; trial < 6; ++trial) {
        const Bytes w = random_weights(type, n, rng, false);
        check_dot(type, w, random_activations(act, n, rng, Levels::Random), n, label(type, n, trial));
      }
    }
  }
}

TEST(Avx2Dot, ExtremeLevelsMatchTheReference) {
  REQUIRE_AVX2();
  Rng rng(3);
  for (DType type : fast_dot_types()) {
    if (type == DType::F32 || type == DType::F16) continue;
    const DType act = format(type).vec_dot_type;
    for (int64_t n : test_lengths(type)) {
      const Bytes extreme = extreme_weights(type, n);
      const Bytes random = random_weights(type, n, rng, false);
      const Bytes a = random_activations(act, n, rng, Levels::Extreme);
      check_dot(type, extreme, a, n, label(type, n, 0) + " extreme weights, extreme activations");
      check_dot(type, random, a, n, label(type, n, 1) + " extreme activations");
      check_dot(type, extreme, random_activations(act, n, rng, Levels::Random), n, label(type, n, 2) + " extreme weights");
      if (type == DType::Q4_0 || type == DType::Q4_1 || type == DType::Q5_0 || type == DType::Q5_1) {
        // These kernels keep the weight levels unsigned: exact for every int8 activation, -128
        // included. (Q8_1's s is left as it was: every kernel reads it as stored.)
        Bytes min_levels = random_activations(act, n, rng, Levels::Random);
        const size_t block_bytes = layout(act).block_bytes, qs_at = block_bytes - QK8_0;
        for (size_t b = 0; b < static_cast<size_t>(n / QK8_0); ++b) std::memset(min_levels.data() + b * block_bytes + qs_at, 0x80, QK8_0);
        check_dot(type, extreme, min_levels, n, label(type, n, 3) + " extreme weights, activations -128");
        check_dot(type, random, min_levels, n, label(type, n, 4) + " activations -128");
      }
    }
  }
}

// Activations made by the reference quantizer, as the engine produces them.
TEST(Avx2Dot, QuantizedActivationsMatchTheReference) {
  REQUIRE_AVX2();
  Rng rng(4);
  for (DType type : fast_dot_types()) {
    const Format& act = format(format(type).vec_dot_type);
    for (int64_t n : test_lengths(type)) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = rng.normal();
      Bytes a(bytes_of(act.type, n));
      act.quantize_ref(x.data(), a.data(), n);
      check_dot(type, random_weights(type, n, rng, false), a, n, label(type, n, 0) + " quantized activations");
    }
  }
}

// Rows for the quantizer tests: several distributions and the awkward cases.
std::vector<std::vector<float>> quantizer_inputs(int64_t n, Rng& rng) {
  std::vector<std::vector<float>> rows;
  auto add = [&](auto value_at) {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = value_at(i);
    rows.push_back(std::move(row));
  };
  add([&](int64_t) { return rng.normal(); });
  add([&](int64_t) { return rng.normal() * std::exp2(rng.uniform(-30.0f, 30.0f)); });
  add([&](int64_t i) { return i % 97 == 0 ? rng.normal() * 1e4f : rng.normal() * 1e-3f; });
  add([](int64_t) { return 0.0f; });
  add([&](int64_t i) { return (i / 32) % 2 == 0 ? 0.0f : (i % 2 == 0 ? -0.0f : rng.normal()); });
  // Rounding ties: with |max| = 127 both quantizers scale by exactly +-1, leaving k + 0.5.
  add([&](int64_t i) {
    if (i % 32 == 0) return (i / 32) % 2 == 0 ? 127.0f : -127.0f;
    return static_cast<float>(rng.uniform_int(-127, 126)) + 0.5f;
  });
  // +m and -m both present: the first one decides Q8_K's sign.
  add([&](int64_t i) { return i % 5 == 0 ? ((i / 5) % 2 == 0 ? 3.0f : -3.0f) : rng.uniform(-2.9f, 2.9f); });
  add([&](int64_t i) { return i % 5 == 0 ? ((i / 5) % 2 == 0 ? -3.0f : 3.0f) : rng.uniform(-2.9f, 2.9f); });
  add([&](int64_t) { return rng.chance(0.5) ? 6.0e4f : -7.0e4f; });  // F16 overflow to inf
  add([&](int64_t) { return rng.normal() * 1e-6f; });                 // F16 subnormals
  // NaNs with payloads and either sign (F16 only: Q8 levels of NaN are undefined), infinities.
  add([&](int64_t i) {
    const uint32_t nan_bits[] = {0x7fc00000u, 0xffc12345u, 0x7f800001u, 0xffa5a5a5u};
    float nan;
    std::memcpy(&nan, &nan_bits[i % 4], 4);
    return i % 11 == 3 ? nan : (i % 13 == 1 ? -std::numeric_limits<float>::infinity() : rng.normal());
  });
  return rows;
}

TEST(Avx2Quantize, ActivationQuantizersAreByteIdentical) {
  REQUIRE_AVX2();
  Rng rng(5);
  for (DType type : kFastQuantizers) {
    const Format& f = format(type);
    for (int64_t n : test_lengths(type)) {
      const auto rows = quantizer_inputs(n, rng);
      for (size_t r = 0; r < rows.size(); ++r) {
        // NaN / inf inputs have no defined Q8 levels (ggml's rounding helpers assume finite values).
        bool finite = true;
        for (float v : rows[r]) finite = finite && std::isfinite(v);
        if (!finite && type != DType::F16) continue;
        Bytes fast(bytes_of(type, n), 0x5a), ref(bytes_of(type, n), 0x5a);
        f.quantize(rows[r].data(), fast.data(), n);
        f.quantize_ref(rows[r].data(), ref.data(), n);
        for (size_t i = 0; i < ref.size(); ++i) {
          ASSERT_EQ(fast[i], ref[i]) << dtype_name(type) << " n=" << n << " input " << r << " byte " << i;
        }
      }
    }
  }
}

// Real weights: every golden tensor of a type with AVX2 kernels, dequantized on the fast path,
// must hash to llama.cpp's float32 output.
TEST(Avx2Golden, FastDequantizeMatchesLlamaCpp) {
  OKAPI_REQUIRE_SHARED();
  REQUIRE_AVX2();
  int matched = 0;
  for (const auto& json : test::shared_files({"golden/public/dequant"}, ".json")) {
    const test::GoldenModel model = test::load_dequant_golden(json);
    if (!std::filesystem::exists(model.gguf)) continue;
    for (const auto& t : model.tensors) {
      if (std::find(std::begin(kFastTypes), std::end(kFastTypes), t.type) == std::end(kFastTypes)) continue;
      const Bytes raw = test::read_tensor(model, t);
      std::vector<float> out(static_cast<size_t>(test::element_count(t.shape)));
      dequantize_tensor(t.type, raw, t.shape, out.data(), /*use_reference=*/false);
      EXPECT_EQ(test::sha_of(out), t.dequant_sha256) << json.filename() << " " << t.name;
      ++matched;
    }
  }
  EXPECT_GT(matched, 100);
}

}  // namespace
}  // namespace okapi::quant
