#include "kv/rotation.hpp"

#include <bit>
#include <cmath>

#include "core/error.hpp"

namespace okapi::kv {

namespace {

// splitmix64: a fixed, portable stream (the signs must not depend on the standard library).
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<float> random_signs(int64_t n, uint64_t& state) {
  std::vector<float> signs(static_cast<size_t>(n));
  for (float& s : signs) s = (next_random(state) & 1) != 0 ? -1.0f : 1.0f;
  return signs;
}

void multiply(float* x, const std::vector<float>& signs) {
  for (size_t i = 0; i < signs.size(); ++i) x[i] *= signs[i];
}

}  // namespace

void walsh_hadamard(float* x, int64_t n) {
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t i = 0; i < n; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= norm;
}

HadamardRotation::HadamardRotation(int64_t dim, uint64_t seed) : dim_(dim) {
  if (dim <= 0) throw_error("rotation: head width {} must be positive", dim);
  window_ = static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(dim)));
  uint64_t state = seed;
  signs_first_ = random_signs(dim, state);
  signs_second_ = random_signs(dim, state);
}

HadamardRotation HadamardRotation::plain(int64_t dim) {
  if (dim <= 0 || !std::has_single_bit(static_cast<uint64_t>(dim))) {
    throw_error("rotation: the plain Walsh–Hadamard transform needs a power-of-two width, not {}", dim);
  }
  HadamardRotation r;
  r.dim_ = r.window_ = dim;
  r.plain_ = true;
  return r;
}

void HadamardRotation::apply(float* x) const {
  if (plain_) return walsh_hadamard(x, dim_);
  multiply(x, signs_first_);
  walsh_hadamard(x, window_);
  multiply(x, signs_second_);
  walsh_hadamard(x + (dim_ - window_), window_);
}

void HadamardRotation::inverse(float* x) const {
  if (plain_) return walsh_hadamard(x, dim_);
  walsh_hadamard(x + (dim_ - window_), window_);
  multiply(x, signs_second_);
  walsh_hadamard(x, window_);
  multiply(x, signs_first_);
}

}  // namespace okapi::kv
