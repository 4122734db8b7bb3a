#include "kv/lloyd_max.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/cpu.hpp"
#include "core/half.hpp"

namespace okapi::kv {

namespace {

// Max (1960) / Lloyd levels of the standard normal, computed by Lloyd's iteration to 1e-15
// (centroid of each cell between midpoints) and rounded to float.
constexpr std::array<float, 2> kLevels1 = {-0.797884561f, 0.797884561f};
constexpr std::array<float, 4> kLevels2 = {-1.510417608f, -0.452780035f, 0.452780035f, 1.510417608f};
constexpr std::array<float, 8> kLevels3 = {-2.151945705f, -1.343909279f, -0.756005281f, -0.245094179f,
                                           0.245094179f,  0.756005281f,  1.343909279f,  2.151945705f};
constexpr std::array<float, 16> kLevels4 = {-2.732589571f, -2.069017227f, -1.618046386f, -1.256231197f,
                                            -0.942340456f, -0.656759119f, -0.388048299f, -0.128395030f,
                                            0.128395030f,  0.388048299f,  0.656759119f,  0.942340456f,
                                            1.256231197f,  1.618046386f,  2.069017227f,  2.732589571f};

constexpr std::array<TbqSpec, 4> kSpecs = {{
    {"tbq2.5", 3, 2}, {"tbq3", 3, 3}, {"tbq3.5", 4, 3}, {"tbq4", 4, 4},
}};

size_t plane_bytes(int64_t count) { return static_cast<size_t>((count + 7) / 8); }
int64_t half(int64_t dim) { return dim / 2; }

// Coordinates that plane k covers.
int64_t plane_count(const TbqSpec& spec, int k, int64_t dim) { return k < spec.bits_lo ? dim : half(dim); }

int bits_of(const TbqSpec& spec, int64_t c, int64_t dim) { return c < half(dim) ? spec.bits_hi : spec.bits_lo; }

// The nearest level's index (levels ascending; ties to the lower one).
int nearest(std::span<const float> levels, float z) {
  int i = 0;
  while (i + 1 < static_cast<int>(levels.size()) && z > 0.5f * (levels[static_cast<size_t>(i)] + levels[static_cast<size_t>(i) + 1])) ++i;
  return i;
}

}  // namespace

std::span<const TbqSpec> tbq_specs() { return kSpecs; }

const TbqSpec* find_tbq(std::string_view name) {
  for (const TbqSpec& s : kSpecs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::span<const float> lloyd_max_levels(int bits) {
  switch (bits) {
    case 1: return kLevels1;
    case 2: return kLevels2;
    case 3: return kLevels3;
    default: return kLevels4;
  }
}

size_t tbq_row_bytes(const TbqSpec& spec, int64_t dim) {
  size_t bytes = sizeof(uint16_t);
  for (int k = 0; k < std::max(spec.bits_hi, spec.bits_lo); ++k) bytes += plane_bytes(plane_count(spec, k, dim));
  return bytes;
}

void tbq_encode(const TbqSpec& spec, const float* x, int64_t dim, uint8_t* out) {
  std::memset(out, 0, tbq_row_bytes(spec, dim));
  double norm2 = 0;
  for (int64_t c = 0; c < dim; ++c) norm2 += static_cast<double>(x[c]) * x[c];
  if (!(norm2 > 0) || !std::isfinite(norm2)) return;  // s = 0: the row decodes to zeros
  const auto inv = static_cast<float>(std::sqrt(static_cast<double>(dim) / norm2));
  double xc = 0, cc = 0;
  for (int64_t c = 0; c < dim; ++c) {
    const int bits = bits_of(spec, c, dim);
    const std::span<const float> levels = lloyd_max_levels(bits);
    const int index = nearest(levels, x[c] * inv);
    const float level = levels[static_cast<size_t>(index)];
    xc += static_cast<double>(x[c]) * level;
    cc += static_cast<double>(level) * level;
    uint8_t* plane = out + sizeof(uint16_t);
    for (int k = 0; k < bits; ++k) {
      if ((index >> k) & 1) plane[c / 8] |= static_cast<uint8_t>(1u << (c % 8));
      plane += plane_bytes(plane_count(spec, k, dim));
    }
  }
  const double s = std::clamp(xc / cc, -65504.0, 65504.0);
  const uint16_t h = fp32_to_fp16(static_cast<float>(s));
  std::memcpy(out, &h, sizeof(h));
}

// Byte b of a bit plane spread to 8 bytes of 0 / 1 (coordinate 8j + i in byte i).
constexpr std::array<uint64_t, 256> kSpreadBits = [] {
  std::array<uint64_t, 256> t{};
  for (unsigned b = 0; b < 256; ++b) {
    for (unsigned i = 0; i < 8; ++i) t[b] |= static_cast<uint64_t>((b >> i) & 1) << (8 * i);
  }
  return t;
}();

namespace avx512 {
// False (nothing written) for a width pair it has no instance of.
bool tbq_decode_rows(const TbqSpec& spec, const uint8_t* in, size_t stride, int64_t n, int64_t dim,
                     float* out);  // kv/avx512/
}

namespace {
// 16 coordinates per step, halves of whole steps: dims that are multiples of 32.
bool avx512_decodes(Isa tier, int64_t dim) { return tier >= Isa::avx512 && dim % 32 == 0; }
}  // namespace

void tbq_decode_rows(const TbqSpec& spec, const uint8_t* in, size_t stride, int64_t n, int64_t dim, float* out,
                     Isa tier) {
  if (avx512_decodes(tier, dim) && avx512::tbq_decode_rows(spec, in, stride, n, dim, out)) return;
  for (int64_t r = 0; r < n; ++r) tbq_decode(spec, in + static_cast<size_t>(r) * stride, dim, out + r * dim, tier);
}

void tbq_decode(const TbqSpec& spec, const uint8_t* in, int64_t dim, float* out, Isa tier) {
  if (avx512_decodes(tier, dim) && avx512::tbq_decode_rows(spec, in, 0, 1, dim, out)) return;
  uint16_t h;
  std::memcpy(&h, in, sizeof(h));
  const float s = fp16_to_fp32(h);
  const int64_t hd = half(dim);
  if (dim % 16 == 0) {
    // 8 coordinates at a time: their level indices assembled plane by plane as 8 bytes.
    const uint8_t* planes[4] = {};
    const uint8_t* p = in + sizeof(uint16_t);
    const int max_bits = std::max(spec.bits_hi, spec.bits_lo);
    for (int k = 0; k < max_bits; ++k) {
      planes[k] = p;
      p += plane_bytes(plane_count(spec, k, dim));
    }
    float scaled[2][16];  // s * level for the first and the second half's widths
    for (int half_index = 0; half_index < 2; ++half_index) {
      const std::span<const float> levels = lloyd_max_levels(half_index == 0 ? spec.bits_hi : spec.bits_lo);
      for (size_t i = 0; i < levels.size(); ++i) scaled[half_index][i] = s * levels[i];
    }
    for (int64_t c = 0; c < dim; c += 8) {
      const int half_index = c < hd ? 0 : 1;
      const int bits = half_index == 0 ? spec.bits_hi : spec.bits_lo;
      uint64_t index = 0;
      for (int k = 0; k < bits; ++k) index |= kSpreadBits[planes[k][c / 8]] << k;
      const float* table = scaled[half_index];
      for (int i = 0; i < 8; ++i) out[c + i] = table[(index >> (8 * i)) & 0xF];
    }
    return;
  }
  for (int64_t c = 0; c < dim; ++c) {
    const int bits = bits_of(spec, c, dim);
    const uint8_t* plane = in + sizeof(uint16_t);
    int index = 0;
    for (int k = 0; k < bits; ++k) {
      index |= ((plane[c / 8] >> (c % 8)) & 1) << k;
      plane += plane_bytes(plane_count(spec, k, dim));
    }
    out[c] = s * lloyd_max_levels(bits)[static_cast<size_t>(index)];
  }
}

}  // namespace okapi::kv
