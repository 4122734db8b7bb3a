#include "exact/ring.hpp"

#include "core/error.hpp"

namespace okapi::exact {

namespace {

std::string int128_to_string(Int128 v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  UInt128 u = negative ? -static_cast<UInt128>(v) : static_cast<UInt128>(v);
  std::string digits;
  while (u > 0) {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  }
  return negative ? "-" + digits : digits;
}

// Z[w] element with 128-bit parts, for intermediates (x * conj(d), norms) before narrowing.
struct Wide {
  Int128 a, b;
};

[[noreturn]] void overflow(const char* op, ZOmega x, ZOmega y) {
  throw_error("Z[w] {}({}, {}): intermediate overflows 128 bits", op, to_string(x), to_string(y));
}

Int128 checked_add(Int128 u, Int128 v, const char* op, ZOmega x, ZOmega y) {
  Int128 r;
  if (__builtin_add_overflow(u, v, &r)) overflow(op, x, y);
  return r;
}

Int128 checked_mul(Int128 u, Int128 v, const char* op, ZOmega x, ZOmega y) {
  Int128 r;
  if (__builtin_mul_overflow(u, v, &r)) overflow(op, x, y);
  return r;
}

// (a + bw)(c + dw) = (ac - 41bd) + (ad + bc + bd) w, every step checked.
Wide mul_wide(Wide u, Wide v, const char* op, ZOmega x, ZOmega y) {
  const Int128 ac = checked_mul(u.a, v.a, op, x, y);
  const Int128 bd = checked_mul(u.b, v.b, op, x, y);
  const Int128 ad = checked_mul(u.a, v.b, op, x, y);
  const Int128 bc = checked_mul(u.b, v.a, op, x, y);
  const Int128 real = checked_add(ac, -checked_mul(kOmegaNormConstant, bd, op, x, y), op, x, y);
  const Int128 omega = checked_add(checked_add(ad, bc, op, x, y), bd, op, x, y);
  return {real, omega};
}

std::int64_t narrow(Int128 v, const char* op, ZOmega x, ZOmega y) {
  if (v > INT64_MAX || v < INT64_MIN) {
    throw_error("Z[w] {}({}, {}): result part {} overflows int64", op, to_string(x), to_string(y), int128_to_string(v));
  }
  return static_cast<std::int64_t>(v);
}

ZOmega narrow(Wide w, const char* op, ZOmega x, ZOmega y) { return {narrow(w.a, op, x, y), narrow(w.b, op, x, y)}; }

Wide widen(ZOmega x) { return {x.a, x.b}; }

}  // namespace

ZOmega add(ZOmega x, ZOmega y) { return narrow(Wide{static_cast<Int128>(x.a) + y.a, static_cast<Int128>(x.b) + y.b}, "add", x, y); }

ZOmega sub(ZOmega x, ZOmega y) { return narrow(Wide{static_cast<Int128>(x.a) - y.a, static_cast<Int128>(x.b) - y.b}, "sub", x, y); }

ZOmega mul(ZOmega x, ZOmega y) { return narrow(mul_wide(widen(x), widen(y), "mul", x, y), "mul", x, y); }

ZOmega conjugate(ZOmega x) {
  return narrow(Wide{static_cast<Int128>(x.a) + x.b, -static_cast<Int128>(x.b)}, "conjugate", x, ZOmega{});
}

Int128 norm(ZOmega x) {
  // x conj(x) has zero w-part; its rational part is a^2 + ab + 41 b^2.
  const Wide n = mul_wide(widen(x), Wide{static_cast<Int128>(x.a) + x.b, -static_cast<Int128>(x.b)}, "norm", x, x);
  return n.a;
}

ZOmega power(ZOmega x, unsigned exponent) {
  ZOmega result{1, 0};
  ZOmega base = x;
  while (exponent > 0) {
    if (exponent & 1u) result = mul(result, base);
    exponent >>= 1;
    if (exponent > 0) base = mul(base, base);
  }
  return result;
}

namespace {

// x conj(d) and N(d); d divides x iff N(d) divides both parts of x conj(d).
struct DivisionParts {
  Wide numerator;
  Int128 denominator;
};

DivisionParts division_parts(ZOmega x, ZOmega d) {
  if (d.a == 0 && d.b == 0) throw_error("Z[w] divide({}, 0): division by zero", to_string(x));
  const Wide d_conj{static_cast<Int128>(d.a) + d.b, -static_cast<Int128>(d.b)};
  return {mul_wide(widen(x), d_conj, "divide", x, d), norm(d)};
}

}  // namespace

bool divides(ZOmega d, ZOmega x) {
  const DivisionParts p = division_parts(x, d);
  return p.numerator.a % p.denominator == 0 && p.numerator.b % p.denominator == 0;
}

ZOmega divide_exact(ZOmega x, ZOmega d) { return divide_exact_wide(ZOmegaWide{x.a, x.b}, d); }

ZOmega divide_exact_wide(ZOmegaWide wide_x, ZOmega d) {
  // Diagnostics print the low 64 bits of a wide dividend; the check itself is on the full value.
  const ZOmega x{static_cast<std::int64_t>(wide_x.a), static_cast<std::int64_t>(wide_x.b)};
  if (d.a == 0 && d.b == 0) throw_error("Z[w] divide_exact: division by zero");
  const Wide d_conj{static_cast<Int128>(d.a) + d.b, -static_cast<Int128>(d.b)};
  const DivisionParts p{mul_wide(Wide{wide_x.a, wide_x.b}, d_conj, "divide", x, d), norm(d)};
  if (p.numerator.a % p.denominator != 0 || p.numerator.b % p.denominator != 0) {
    throw_error("Z[w] divide_exact: {} + {}w is not divisible by {} (x*conj(d) = {} + {}w, N(d) = {})",
                int128_to_string(wide_x.a), int128_to_string(wide_x.b), to_string(d), int128_to_string(p.numerator.a), int128_to_string(p.numerator.b),
                int128_to_string(p.denominator));
  }
  return narrow(Wide{p.numerator.a / p.denominator, p.numerator.b / p.denominator}, "divide_exact", x, d);
}

std::string to_string(ZOmega x) { return fmt::format("({} + {}w)", x.a, x.b); }

}  // namespace okapi::exact
