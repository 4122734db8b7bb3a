// Seeded random test inputs shared by the op and kernel tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace okapi::test {

// n samples of normal(0, sigma) from std::mt19937(seed).
std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f);

}  // namespace okapi::test
