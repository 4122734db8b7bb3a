// Deterministic elementary functions (see detmath.hpp). The algorithms are the classic fdlibm /
// FreeBSD msun ones (argument reduction + minimax polynomial, all in double with + - * / only),
// chosen because they are accurate to < 1 ulp without FMA and need no tables. Every operation
// below is an IEEE-754 basic operation in double, so with -ffp-contract=off the bit pattern of
// each result depends only on the argument.
#include "exact/detmath.hpp"

#include <bit>
#include <cstdint>
#include <limits>

#include "core/cpu.hpp"
#include "core/error.hpp"
#include "exact/avx2/detmath_avx2.hpp"
#include "exact/detmath_constants.hpp"

namespace okapi::exact::det {

using namespace detail;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

int exponent_bits(double x) { return static_cast<int>((std::bit_cast<uint64_t>(x) >> 52) & 0x7ff); }

// 2^k for -1022 <= k <= 1023, built from the bit pattern (exact).
double power_of_two(int k) { return std::bit_cast<double>(static_cast<uint64_t>(k + 1023) << 52); }

// Round to the nearest integer, halves away from zero; |x| < 2^52 (exact: floor of a double).
double round_half_away(double x) {
  const double a = x < 0 ? -x : x;
  double r = static_cast<double>(static_cast<int64_t>(a + 0.5));
  return x < 0 ? -r : r;
}

// exp(r) - 1 for |r| <= ln2/2, and the term c that exp's reconstruction needs (fdlibm e_exp.c:
// a degree-5 minimax polynomial for R(r^2) = r (e^r + 1) / (e^r - 1) - 2).
double exp_c(double r) {
  const double t = r * r;
  return r - t * (kExpP1 + t * (kExpP2 + t * (kExpP3 + t * (kExpP4 + t * kExpP5))));
}

// sin(x + y) and cos(x + y) for |x| <= pi/4, y the tail of the reduced argument (FreeBSD k_sin.c,
// k_cos.c).
double kernel_sin(double x, double y) {
  constexpr double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
                   S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
                   S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
  const double z = x * x, v = z * x;
  const double r = S2 + z * (S3 + z * (S4 + z * (S5 + z * S6)));
  if (y == 0.0) return x + v * (S1 + z * r);
  return x - ((z * (0.5 * y - v * r) - y) - v * S1);
}

double kernel_cos(double x, double y) {
  constexpr double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
                   C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
                   C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
  const double z = x * x, w2 = z * z;
  const double r = z * (C1 + z * (C2 + z * C3)) + w2 * w2 * (C4 + z * (C5 + z * C6));
  const double hz = 0.5 * z, w = 1.0 - hz;
  return w + (((1.0 - w) - hz) + (z * r - x * y));
}

// x = n pi/2 + (y0 + y1) with |y0 + y1| <= pi/4 (about), for |x| <= 2^20: Cody-Waite reduction with
// pi/2 in three 33-bit pieces, so n * piece is exact for n < 2^20 (fdlibm's medium-size path).
int reduce_pio2(double x, double* y0, double* y1) {
  constexpr double kInvPio2 = 6.36619772367581382433e-01;
  constexpr double kPio2_1 = 1.57079632673412561417e+00, kPio2_1t = 6.07710050650619224932e-11;
  constexpr double kPio2_2 = 6.07710050630396597660e-11, kPio2_2t = 2.02226624879595063154e-21;
  constexpr double kPio2_3 = 2.02226624871116645580e-21, kPio2_3t = 8.47842766036889956997e-32;
  const double fn = round_half_away(x * kInvPio2);
  double r = x - fn * kPio2_1;  // exact: fn * kPio2_1 has <= 53 bits and is close to x
  double w = fn * kPio2_1t;
  *y0 = r - w;
  const int j = exponent_bits(x);
  if (j - exponent_bits(*y0) > 16) {  // cancellation: a second piece of pi/2 is needed
    double t = r;
    w = fn * kPio2_2;
    r = t - w;
    w = fn * kPio2_2t - ((t - r) - w);
    *y0 = r - w;
    if (j - exponent_bits(*y0) > 49) {  // and a third
      t = r;
      w = fn * kPio2_3;
      r = t - w;
      w = fn * kPio2_3t - ((t - r) - w);
      *y0 = r - w;
    }
  }
  *y1 = (r - *y0) - w;
  return static_cast<int>(static_cast<int64_t>(fn) & 3);
}

constexpr double kMaxTrigArgument = 1048576.0;  // 2^20

double sin_or_cos(double x, bool cosine) {
  if (x != x) return kNaN;
  const double a = x < 0 ? -x : x;
  if (a > kMaxTrigArgument)
    throw_error("det::{}: |x| = {} exceeds 2^20, the range of its argument reduction", cosine ? "cos" : "sin", x);
  if (a <= 0.7853981633974483) return cosine ? kernel_cos(x, 0.0) : kernel_sin(x, 0.0);
  double y0 = 0, y1 = 0;
  const int n = reduce_pio2(x, &y0, &y1) + (cosine ? 1 : 0);
  switch (n & 3) {
    case 0: return kernel_sin(y0, y1);
    case 1: return kernel_cos(y0, y1);
    case 2: return -kernel_sin(y0, y1);
    default: return -kernel_cos(y0, y1);
  }
}

// e^r - 1 for |r| <= ln2/2 with relative error ~1 ulp (from exp's reconstruction without the 1).
double expm1_small(double r) {
  const double c = exp_c(r);
  return r - (r * c) / (c - 2.0);
}

}  // namespace

double exp(double x) {
  if (x != x) return kNaN;
  if (x > kExpOverflow) return kInf;
  if (x < kExpUnderflow) return 0.0;
  const double a = x < 0 ? -x : x;
  if (a < kExpTiny) return 1.0 + x;  // e^x rounds to 1 + x
  // k = 0 for |x| <= ln2/2; the formula below then reduces to fdlibm's k = 0 case bit for bit
  // (hi = x - 0 = x, lo = 0, and 0 - z = -z), so one expression serves both (and the AVX2 batch).
  const int k = a > kHalfLn2 ? static_cast<int>(round_half_away(x * kInvLn2)) : 0;
  const double kd = k;
  const double hi = x - kd * kLn2Hi;  // exact
  const double lo = kd * kLn2Lo;
  const double r = hi - lo;
  const double c = exp_c(r);
  const double y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
  // y in [0.7, 1.42]: scale by 2^k, in two steps when 2^k itself is subnormal.
  if (k >= -1021) return k == 1024 ? y * 2.0 * power_of_two(1023) : y * power_of_two(k);
  return y * power_of_two(k + 1000) * power_of_two(-1000);
}

void exp_in_place(double* x, std::int64_t n, Isa tier) {
  std::int64_t done = 0;
  if (tier >= Isa::avx2) done = avx2::exp_in_place(x, n);
  for (std::int64_t i = done; i < n; ++i) x[i] = exp(x[i]);
}

double log(double x) {
  constexpr double Lg1 = 6.666666666666735130e-01, Lg2 = 3.999999999940941908e-01,
                   Lg3 = 2.857142874366239149e-01, Lg4 = 2.222219843214978396e-01,
                   Lg5 = 1.818357216161805012e-01, Lg6 = 1.531383769920937332e-01,
                   Lg7 = 1.479819860511658591e-01;
  if (x != x || x < 0) return kNaN;
  if (x == 0) return -kInf;
  if (x == kInf) return kInf;
  int k = 0;
  if (exponent_bits(x) == 0) {  // subnormal: scale into the normal range (exact)
    x *= 18014398509481984.0;   // 2^54
    k -= 54;
  }
  uint64_t bits = std::bit_cast<uint64_t>(x);
  k += static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;  // m in [1, 2)
  double m = std::bit_cast<double>(bits);
  if (m > 1.4142135623730951) {  // keep m in (sqrt(2)/2, sqrt(2)]
    m *= 0.5;
    ++k;
  }
  // log(m) = f - f^2/2 + s (f^2/2 + R(s^2)), s = f / (2 + f) (fdlibm e_log.c).
  const double f = m - 1.0;
  const double s = f / (2.0 + f);
  const double z = s * s, w = z * z;
  const double t1 = w * (Lg2 + w * (Lg4 + w * Lg6));
  const double t2 = z * (Lg1 + w * (Lg3 + w * (Lg5 + w * Lg7)));
  const double R = t2 + t1;
  const double hfsq = 0.5 * f * f;
  const double dk = k;
  return dk * kLn2Hi - ((hfsq - (s * (hfsq + R) + dk * kLn2Lo)) - f);
}

double sin(double x) { return sin_or_cos(x, false); }
double cos(double x) { return sin_or_cos(x, true); }

double tanh(double x) {
  if (x != x) return kNaN;
  const double a = x < 0 ? -x : x;
  double t = 0;
  if (a < 3.725290298461914e-09) {
    t = a;  // tanh(a) = a to double precision
  } else if (a > 22.0) {
    t = 1.0;  // 1 - tanh(22) < 2^-63
  } else if (a >= 1.0) {
    t = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
  } else {
    // tanh(a) = e / (e + 2) with e = expm1(2a); expm1 accurate near 0 keeps small tanh accurate.
    const double y = 2.0 * a;
    const double e = y <= 0.34657359027997264 ? expm1_small(y) : exp(y) - 1.0;
    t = e / (e + 2.0);
  }
  return x < 0 ? -t : t;
}

double pow(double base, double e) {
  if (base != base || e != e || base < 0) return kNaN;
  if (e == 0 || base == 1) return 1.0;
  return exp(e * log(base));
}

float rsqrt(float x) { return static_cast<float>(1.0 / __builtin_sqrt(static_cast<double>(x))); }

}  // namespace okapi::exact::det
