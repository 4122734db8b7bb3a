#include "exact/frobenius.hpp"

#include "core/error.hpp"

namespace okapi::exact {

ZOmega frobenius_element(FrobeniusPrime p) { return p == FrobeniusPrime::split41 ? ZOmega{0, 1} : ZOmega{2, 0}; }

ShimmedMatrix frobenius_shim(const ZMatrix& w, FrobeniusPrime p, unsigned k) {
  ShimmedMatrix out;
  out.exponent = k;
  out.prime = p;
  out.factor = power(frobenius_element(p), k);  // throws on overflow
  out.weights = w;
  for (std::size_t i = 0; i + 1 < w.parts.size(); i += 2) {
    const ZOmega shimmed = mul({w.parts[i], w.parts[i + 1]}, out.factor);  // throws on overflow
    out.weights.parts[i] = shimmed.a;
    out.weights.parts[i + 1] = shimmed.b;
  }
  out.max_abs = max_abs_part(out.weights.parts);
  return out;
}

namespace {

// y / pi^k one factor at a time, so no intermediate exceeds y itself (about) in size:
//   (a + bw) / w = (a + bw)(1 - w) / 41 = ((a + 41b) - a w) / 41 = (a/41 + b) - (a/41) w, needs 41 | a;
//   (a + bw) / 2 needs both parts even.
// Multiplying by conj(pi^k) first would need ~|y| |pi^k| bits and overflow 128 bits for large k.
ZOmega divide_by_frobenius(ZOmegaWide y, FrobeniusPrime p, unsigned k) {
  const ZOmegaWide original = y;
  for (unsigned step = 0; step < k; ++step) {
    if (p == FrobeniusPrime::split41) {
      if (y.a % 41 != 0) break;
      const Int128 a41 = y.a / 41;
      y = {a41 + y.b, -a41};
    } else {
      if (y.a % 2 != 0 || y.b % 2 != 0) break;
      y = {y.a / 2, y.b / 2};
    }
    if (step + 1 == k) return divide_exact_wide(y, ZOmega{1, 0});  // narrows to int64, throws if too wide
  }
  if (k == 0) return divide_exact_wide(y, ZOmega{1, 0});
  throw_error("Frobenius shim: matvec output (low 64 bits {} + {}w) is not divisible by pi^{} (p = {})",
              static_cast<std::int64_t>(original.a), static_cast<std::int64_t>(original.b), k,
              p == FrobeniusPrime::split41 ? 41 : 2);
}

}  // namespace

std::vector<ZOmega> matvec_unshim(const ShimmedMatrix& shimmed, std::span<const std::int64_t> x, MatVecKernel kernel) {
  const std::vector<ZOmegaWide> wide = matvec(shimmed.weights, shimmed.max_abs, x, kernel);
  std::vector<ZOmega> y(wide.size());
  for (std::size_t r = 0; r < wide.size(); ++r) y[r] = divide_by_frobenius(wide[r], shimmed.prime, shimmed.exponent);
  return y;
}

std::vector<ZOmega> matvec_narrow(const ZMatrix& w, std::span<const std::int64_t> x, MatVecKernel kernel) {
  const std::vector<ZOmegaWide> wide = matvec(w, x, kernel);
  std::vector<ZOmega> y(wide.size());
  for (std::size_t r = 0; r < wide.size(); ++r) y[r] = divide_exact_wide(wide[r], ZOmega{1, 0});
  return y;
}

}  // namespace okapi::exact
