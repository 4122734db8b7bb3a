// A seeded orthogonal rotation of one head's rows (--kv-rotate hadamard): q·k = (Rq)·(Rk), and a
// weighted sum of rotated values rotates back with Rᵀ. Rotating spreads a few large channels over
// all lanes, so a per-block scale quantizer wastes far fewer levels on outliers.
//
// R = H₂ D₂ H₁ D₁ for any width n: D are random ±1 diagonals; H₁ is the normalized Walsh–Hadamard
// transform of the first p lanes and H₂ that of the last p, p the largest power of two <= n. When
// n is a power of two the windows coincide (R = H D₂ H D₁, still orthogonal and mixing every lane);
// otherwise p > n / 2, so the two windows overlap and together cover every lane. Each factor is
// orthogonal, so R is; the cost is 2 p log₂ p additions per row.
#pragma once
#include <cstdint>
#include <vector>

namespace okapi::kv {

class HadamardRotation {
 public:
  // One rotation per (layer, kv head) from `seed`.
  HadamardRotation(int64_t dim, uint64_t seed);
  // The seed-000 VHT2: the normalized Walsh–Hadamard transform alone, no random signs (dim a
  // power of two; it is its own inverse).
  static HadamardRotation plain(int64_t dim);
  int64_t dim() const { return dim_; }
  void apply(float* x) const;    // x = R x
  void inverse(float* x) const;  // x = Rᵀ x

 private:
  HadamardRotation() = default;
  int64_t dim_ = 0, window_ = 0;
  bool plain_ = false;
  std::vector<float> signs_first_, signs_second_;
};

// The normalized Walsh–Hadamard transform of n values (n a power of two): orthogonal and
// symmetric, so it is its own inverse.
void walsh_hadamard(float* x, int64_t n);

}  // namespace okapi::kv
