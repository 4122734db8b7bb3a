// Matrix-vector product over Z[w] and the overflow analysis that keeps it exact.
//
// Layout: element (a, b) = a + b w interleaved, [a0, b0, a1, b1, ...]; a matrix is row-major with
// rows * cols elements (2 * rows * cols int64).
//
// Overflow analysis (docs/exact-overflow.md): with |parts of W| <= A, |parts of x| <= B and row
// length n, one term (ac - 41bd) + (ad + bc + bd) w has |rational| <= 42AB and |w-part| <= 3AB, and
// so does every partial sum scaled by its length. The sum is exact in an accumulator of signed
// width L bits iff   42 * n * A * B <= 2^(L-1) - 1.
// int64 (L = 64) is tried first, then Int128 (L = 128); otherwise pick_accumulator throws.
// The AVX2 kernel (_mm256_mul_epi32) also needs A, B <= 2^31 - 1 (it reads the low 32 bits).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "exact/int128.hpp"
#include "exact/ring.hpp"

namespace okapi::exact {

enum class Accumulator { int64, int128, ntt60, crt };
std::string_view accumulator_name(Accumulator a);

// |rational part| bound 42 * n * A * B of a Z[w] dot product; nullopt if it exceeds 2^128 - 1.
std::optional<UInt128> zomega_sum_bound(std::uint64_t max_abs_w, std::uint64_t max_abs_x, std::size_t n);
// |<q, k>| bound n * A * B of an integer dot product (the NTT attention scores).
std::optional<UInt128> integer_dot_bound(std::uint64_t max_abs_q, std::uint64_t max_abs_k, std::size_t n);
// Largest magnitude an accumulator represents exactly: 2^63-1, 2^127-1, (q-1)/2, (q1q2-1)/2.
UInt128 accumulator_capacity(Accumulator a);
bool fits(Accumulator a, std::optional<UInt128> bound);

// Z[w] matvec: Int64 if the bound allows, else Int128; throws okapi::Error naming A, B, n.
Accumulator pick_zomega_accumulator(std::uint64_t max_abs_w, std::uint64_t max_abs_x, std::size_t n);
// Integer dot through the NTT: ntt60 if n A B <= (q-1)/2, else crt if <= (q1q2-1)/2, else throws.
Accumulator pick_ntt_accumulator(std::uint64_t max_abs_q, std::uint64_t max_abs_k, std::size_t n);

// Largest |part| (as uint64, so |INT64_MIN| = 2^63 is representable).
std::uint64_t max_abs_part(std::span<const std::int64_t> parts);

struct ZMatrix {
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<std::int64_t> parts;  // 2 * rows * cols, interleaved (a, b)
};

enum class MatVecKernel { automatic, scalar, avx2 };

// y = W x with the accumulator chosen from the actual max |parts| of W and x; throws when no
// accumulator keeps the sum exact, or when kernel = avx2 is requested but not allowed.
std::vector<ZOmegaWide> matvec(const ZMatrix& w, std::span<const std::int64_t> x,
                               MatVecKernel kernel = MatVecKernel::automatic);
// Same with the bound on |parts of W| given by the caller (e.g. measured once at load).
std::vector<ZOmegaWide> matvec(const ZMatrix& w, std::uint64_t max_abs_w, std::span<const std::int64_t> x,
                               MatVecKernel kernel = MatVecKernel::automatic);

// The scalar reference kernels (callers must have checked the bound).
void matvec_scalar_int64(const ZMatrix& w, std::span<const std::int64_t> x, std::span<ZOmegaWide> y);
void matvec_scalar_int128(const ZMatrix& w, std::span<const std::int64_t> x, std::span<ZOmegaWide> y);

}  // namespace okapi::exact
