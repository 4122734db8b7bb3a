// TurboQuant-style KV rows (cache types tbq2.5, tbq3, tbq3.5, tbq4). A row (one token's keys or
// values of one kv head) is rotated by the store's seeded Hadamard rotation, after which every
// coordinate of x / ||x|| * sqrt(dim) is close to N(0, 1) whatever the row looked like; each one
// is replaced by the nearest level of the Lloyd–Max quantizer for N(0, 1) with `bits` bits, and
// one fp16 scale per row (the least-squares fit s = <x, c> / <c, c>, TurboQuant's per-head norm
// refined) restores the magnitude. Fractional widths give the first half of the coordinates one
// bit more than the second (after a random rotation no coordinate is special).
//
// Row layout: fp16 s, then bit planes: plane k holds bit k of every coordinate's level index
// (coordinate c at byte c / 8, bit c % 8); the planes for k < bits_lo cover all coordinates, the
// extra plane of a fractional width covers the first half. Decoding needs no table beyond one
// codebook of at most 16 floats, so a SIMD decode is a few mask-adds and one permute per 16 values.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/cpu.hpp"

namespace okapi::kv {

struct TbqSpec {
  std::string_view name;
  int bits_hi = 0;  // coordinates [0, dim / 2)
  int bits_lo = 0;  // coordinates [dim / 2, dim)
};

// The tbq types, narrowest first; nullptr for another name.
std::span<const TbqSpec> tbq_specs();
const TbqSpec* find_tbq(std::string_view name);

// The Lloyd–Max levels of N(0, 1) for `bits` (1..4), ascending: 2^bits values.
std::span<const float> lloyd_max_levels(int bits);

size_t tbq_row_bytes(const TbqSpec& spec, int64_t dim);
// Encodes an already rotated row of dim values.
void tbq_encode(const TbqSpec& spec, const float* x, int64_t dim, uint8_t* out);
// The rotated row back: s * level[index] per coordinate. `tier` (one of available_isas()) picks
// the kernel; every tier gives the same bits.
void tbq_decode(const TbqSpec& spec, const uint8_t* in, int64_t dim, float* out, Isa tier);
// n rows, row i at in + i * stride, into out + i * dim: the values tbq_decode gives each.
void tbq_decode_rows(const TbqSpec& spec, const uint8_t* in, size_t stride, int64_t n, int64_t dim, float* out,
                     Isa tier);

}  // namespace okapi::kv
