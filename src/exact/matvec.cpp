#include "exact/matvec.hpp"

#include <initializer_list>
#include <string>

#include "core/cpu.hpp"
#include "core/error.hpp"
#include "exact/avx2/matvec_avx2.hpp"
#include "exact/crt.hpp"
#include "exact/ntt.hpp"

namespace okapi::exact {

namespace {

std::optional<UInt128> checked_product(std::initializer_list<UInt128> factors) {
  UInt128 result = 1;
  for (UInt128 f : factors) {
    if (__builtin_mul_overflow(result, f, &result)) return std::nullopt;
  }
  return result;
}

std::string u128_to_string(std::optional<UInt128> v) {
  if (!v) return ">= 2^128";
  if (*v == 0) return "0";
  std::string digits;
  for (UInt128 u = *v; u > 0; u /= 10) digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
  return digits;
}

constexpr std::uint64_t kInt32Max = 0x7fffffffULL;

}  // namespace

std::string_view accumulator_name(Accumulator a) {
  switch (a) {
    case Accumulator::int64: return "int64";
    case Accumulator::int128: return "int128";
    case Accumulator::ntt60: return "ntt60";
    case Accumulator::crt: return "crt";
  }
  return "?";
}

std::optional<UInt128> zomega_sum_bound(std::uint64_t max_abs_w, std::uint64_t max_abs_x, std::size_t n) {
  return checked_product({42, max_abs_w, max_abs_x, n});
}

std::optional<UInt128> integer_dot_bound(std::uint64_t max_abs_q, std::uint64_t max_abs_k, std::size_t n) {
  return checked_product({max_abs_q, max_abs_k, n});
}

UInt128 accumulator_capacity(Accumulator a) {
  switch (a) {
    case Accumulator::int64: return static_cast<UInt128>(INT64_MAX);
    case Accumulator::int128: return (static_cast<UInt128>(1) << 127) - 1;
    case Accumulator::ntt60: return (kNttPrime60 - 1) / 2;
    case Accumulator::crt: return (static_cast<UInt128>(kCrtPrime1) * kCrtPrime2 - 1) / 2;
  }
  return 0;
}

bool fits(Accumulator a, std::optional<UInt128> bound) { return bound && *bound <= accumulator_capacity(a); }

Accumulator pick_zomega_accumulator(std::uint64_t max_abs_w, std::uint64_t max_abs_x, std::size_t n) {
  const std::optional<UInt128> bound = zomega_sum_bound(max_abs_w, max_abs_x, n);
  if (fits(Accumulator::int64, bound)) return Accumulator::int64;
  if (fits(Accumulator::int128, bound)) return Accumulator::int128;
  throw_error("Z[w] matvec: 42 * n * max|W| * max|x| = 42 * {} * {} * {} = {} exceeds 2^127 - 1; no accumulator is exact",
              n, max_abs_w, max_abs_x, u128_to_string(bound));
}

Accumulator pick_ntt_accumulator(std::uint64_t max_abs_q, std::uint64_t max_abs_k, std::size_t n) {
  const std::optional<UInt128> bound = integer_dot_bound(max_abs_q, max_abs_k, n);
  if (fits(Accumulator::ntt60, bound)) return Accumulator::ntt60;
  if (fits(Accumulator::crt, bound)) return Accumulator::crt;
  throw_error("NTT dot: n * max|q| * max|k| = {} * {} * {} = {} exceeds (q1 q2 - 1)/2 = {}; not exact", n, max_abs_q,
              max_abs_k, u128_to_string(bound), u128_to_string(accumulator_capacity(Accumulator::crt)));
}

std::uint64_t max_abs_part(std::span<const std::int64_t> parts) {
  std::uint64_t m = 0;
  for (std::int64_t v : parts) {
    const std::uint64_t a = v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
    if (a > m) m = a;
  }
  return m;
}

void matvec_scalar_int64(const ZMatrix& w, std::span<const std::int64_t> x, std::span<ZOmegaWide> y) {
  const std::size_t n = w.cols;
  for (std::size_t r = 0; r < w.rows; ++r) {
    const std::int64_t* row = w.parts.data() + 2 * n * r;
    std::int64_t rational = 0, omega = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const std::int64_t a = row[2 * k], b = row[2 * k + 1], c = x[2 * k], d = x[2 * k + 1];
      rational += a * c - kOmegaNormConstant * b * d;
      omega += a * d + b * c + b * d;
    }
    y[r] = ZOmegaWide{rational, omega};
  }
}

void matvec_scalar_int128(const ZMatrix& w, std::span<const std::int64_t> x, std::span<ZOmegaWide> y) {
  const std::size_t n = w.cols;
  for (std::size_t r = 0; r < w.rows; ++r) {
    const std::int64_t* row = w.parts.data() + 2 * n * r;
    Int128 rational = 0, omega = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const Int128 a = row[2 * k], b = row[2 * k + 1], c = x[2 * k], d = x[2 * k + 1];
      rational += a * c - kOmegaNormConstant * b * d;
      omega += a * d + b * c + b * d;
    }
    y[r] = ZOmegaWide{rational, omega};
  }
}

std::vector<ZOmegaWide> matvec(const ZMatrix& w, std::span<const std::int64_t> x, MatVecKernel kernel) {
  return matvec(w, max_abs_part(w.parts), x, kernel);
}

std::vector<ZOmegaWide> matvec(const ZMatrix& w, std::uint64_t max_abs_w, std::span<const std::int64_t> x,
                               MatVecKernel kernel) {
  if (w.parts.size() != 2 * w.rows * w.cols) {
    throw_error("Z[w] matvec: matrix has {} parts, expected 2 * {} * {}", w.parts.size(), w.rows, w.cols);
  }
  if (x.size() != 2 * w.cols) throw_error("Z[w] matvec: vector has {} parts, expected 2 * {}", x.size(), w.cols);
  const std::uint64_t max_abs_x = max_abs_part(x);
  const Accumulator acc = pick_zomega_accumulator(max_abs_w, max_abs_x, w.cols);
  const bool avx2_allowed = acc == Accumulator::int64 && max_abs_w <= kInt32Max && max_abs_x <= kInt32Max &&
                            cpu_features().use_avx2();
  if (kernel == MatVecKernel::avx2 && !avx2_allowed) {
    throw_error("Z[w] matvec: AVX2 kernel not allowed (accumulator {}, max|W| = {}, max|x| = {}, need int64 and <= 2^31-1, cpu avx2 = {})",
                accumulator_name(acc), max_abs_w, max_abs_x, cpu_features().use_avx2());
  }
  std::vector<ZOmegaWide> y(w.rows);
  if (acc == Accumulator::int128) {
    matvec_scalar_int128(w, x, y);
  } else if (kernel != MatVecKernel::scalar && avx2_allowed) {
    avx2::matvec_int64(w, x, y);
  } else {
    matvec_scalar_int64(w, x, y);
  }
  return y;
}

}  // namespace okapi::exact
