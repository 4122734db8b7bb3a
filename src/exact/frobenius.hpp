// Frobenius load-time shim: W <- W * pi^k at load, y = (W pi^k) x / pi^k after the matvec.
// In exact arithmetic this is the identity (Z[w] is an integral domain, the division is exact), so
// the shimmed output must be bit-identical to the plain one; the only way it can fail is overflow,
// which the overflow analysis rules out or reports: the weight parts grow by up to a factor
// (|u| + 41|v|) for pi^k = u + v w, and pick_zomega_accumulator decides on the shimmed max |part|.
//   split41: pi = w, N(pi) = 41 (41 = w * conj(w) splits)
//   inert2:  pi = 2, N(pi) = 4  (2 stays prime in Z[w])
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "exact/matvec.hpp"
#include "exact/ring.hpp"

namespace okapi::exact {

enum class FrobeniusPrime { split41, inert2 };

ZOmega frobenius_element(FrobeniusPrime p);

struct ShimmedMatrix {
  ZMatrix weights;      // W * pi^k
  ZOmega factor;        // pi^k
  FrobeniusPrime prime = FrobeniusPrime::split41;
  unsigned exponent = 0;
  std::uint64_t max_abs = 0;  // max |part| of the shimmed weights, for the accumulator choice
};

// Throws okapi::Error when pi^k or a shimmed weight part leaves int64.
ShimmedMatrix frobenius_shim(const ZMatrix& w, FrobeniusPrime p, unsigned k);

// (W pi^k) x, then the exact division by pi^k. Throws okapi::Error when the overflow analysis
// finds no exact accumulator for the shimmed weights.
std::vector<ZOmega> matvec_unshim(const ShimmedMatrix& shimmed, std::span<const std::int64_t> x,
                                  MatVecKernel kernel = MatVecKernel::automatic);

// Plain y = W x narrowed to int64 parts (throws if a part does not fit).
std::vector<ZOmega> matvec_narrow(const ZMatrix& w, std::span<const std::int64_t> x,
                                  MatVecKernel kernel = MatVecKernel::automatic);

}  // namespace okapi::exact
