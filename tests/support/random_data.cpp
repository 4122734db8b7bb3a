#include "support/random_data.hpp"

#include <array>
#include <random>

namespace okapi::test {

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

namespace {

// The canonical encoding of `cp`, or a longer (overlong) one when `length` says so.
std::string encode_utf8(uint32_t cp, size_t length) {
  if (length == 1) return std::string(1, static_cast<char>(cp));
  static constexpr std::array<uint8_t, 5> kLead = {0, 0, 0xC0, 0xE0, 0xF0};
  std::string out(length, '\0');
  for (size_t i = length - 1; i > 0; --i, cp >>= 6) out[i] = static_cast<char>(0x80 | (cp & 0x3F));
  out[0] = static_cast<char>(kLead[length] | cp);
  return out;
}

}  // namespace

std::string utf8_torture_bytes(std::mt19937& rng, size_t max_pieces, bool allow_nul) {
  const auto below = [&rng](uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng); };
  const auto in = [&rng](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  std::string out;
  const size_t pieces = below(static_cast<uint32_t>(max_pieces) + 1);
  for (size_t i = 0; i < pieces; ++i) {
    switch (below(10)) {
      case 0: out += static_cast<char>(in(0x20, 0x7E)); break;
      case 1: out += encode_utf8(in(0x80, 0x7FF), 2); break;
      case 2: out += encode_utf8(below(2) ? in(0x800, 0xD7FF) : in(0xE000, 0xFFFF), 3); break;
      case 3: out += encode_utf8(in(0x10000, 0x10FFFF), 4); break;
      case 4: {  // a well-formed sequence cut short
        const std::string whole = encode_utf8(in(0x10000, 0x10FFFF), in(3, 4));
        out += whole.substr(0, in(1, static_cast<uint32_t>(whole.size()) - 1));
        break;
      }
      case 5: {  // overlong: a code point encoded with more bytes than it needs
        const uint32_t length = in(2, 4);
        out += encode_utf8(below(length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000), length);
        break;
      }
      case 6: out += encode_utf8(in(0xD800, 0xDFFF), 3); break;                 // surrogate
      case 7: out += encode_utf8(in(0x110000, 0x1FFFFF), 4); break;             // beyond U+10FFFF
      case 8: out += static_cast<char>(in(0x80, 0xBF)); break;                  // lone continuation
      default: {
        static constexpr std::array<uint8_t, 6> kNever = {0xC0, 0xC1, 0xF5, 0xF8, 0xFE, 0xFF};
        const uint8_t b = below(4) == 0 ? uint8_t{0} : kNever[below(static_cast<uint32_t>(kNever.size()))];
        if (b != 0 || allow_nul) out += static_cast<char>(b);
      }
    }
  }
  return out;
}

}  // namespace okapi::test
