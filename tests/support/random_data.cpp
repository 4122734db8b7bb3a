#include "support/random_data.hpp"

#include <random>

namespace okapi::test {

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

}  // namespace okapi::test
