// Seeded random test inputs shared by the op and kernel tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace okapi::test {

// n samples of normal(0, sigma) from std::mt19937(seed).
std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f);

// Up to max_pieces pieces of bytes that stress UTF-8 handling: ASCII, well-formed 2 to 4 byte
// sequences, and the malformed kinds: sequences cut short, overlong forms, surrogates, code points
// above U+10FFFF, lone continuation bytes, C0/C1/F5..FF, and NUL unless allow_nul is false.
std::string utf8_torture_bytes(std::mt19937& rng, size_t max_pieces, bool allow_nul = true);

}  // namespace okapi::test
