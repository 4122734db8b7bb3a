// The ring Z[w], w = (1 + sqrt(-163)) / 2, the integers of Q(sqrt(-163)) (class number 1).
// w is a root of x^2 - x + 41, so w^2 = w - 41, conj(w) = 1 - w, w + conj(w) = 1, w conj(w) = 41.
//   (a + bw)(c + dw) = ac + (ad + bc) w + bd (w - 41) = (ac - 41bd) + (ad + bc + bd) w
//   N(a + bw) = (a + bw)(a + b - bw) = a^2 + ab + 41 b^2 = (a + b/2)^2 + 163 b^2 / 4.
// Units are only +-1. 41 splits (41 = w conj(w), N(w) = 41); 2 is inert (no element has norm 2:
// b != 0 gives norm >= 163/4, b = 0 gives a^2). Every operation here is checked: it throws
// okapi::Error instead of overflowing int64.
#pragma once
#include <cstdint>
#include <string>

#include "exact/int128.hpp"

namespace okapi::exact {

struct ZOmega {
  std::int64_t a = 0;  // rational part
  std::int64_t b = 0;  // coefficient of w
  friend bool operator==(const ZOmega&, const ZOmega&) = default;
};

// 128-bit parts: accumulated matrix-vector sums before an exact division brings them back.
struct ZOmegaWide {
  Int128 a = 0;
  Int128 b = 0;
  friend bool operator==(const ZOmegaWide&, const ZOmegaWide&) = default;
};

inline constexpr std::int64_t kOmegaNormConstant = 41;  // w^2 = w - 41

ZOmega add(ZOmega x, ZOmega y);
ZOmega sub(ZOmega x, ZOmega y);
ZOmega mul(ZOmega x, ZOmega y);
ZOmega conjugate(ZOmega x);  // a + b conj(w) = (a + b) - b w
Int128 norm(ZOmega x);     // a^2 + ab + 41 b^2 >= 0 (needs up to ~2^132 for int64 parts: checked)
ZOmega power(ZOmega x, unsigned exponent);
// x / d when d divides x (x conj(d) / N(d) has integer parts); throws okapi::Error otherwise.
ZOmega divide_exact(ZOmega x, ZOmega d);
bool divides(ZOmega d, ZOmega x);
// Same for a 128-bit dividend; the quotient must fit int64 parts (throws otherwise).
ZOmega divide_exact_wide(ZOmegaWide x, ZOmega d);
std::string to_string(ZOmega x);

}  // namespace okapi::exact
