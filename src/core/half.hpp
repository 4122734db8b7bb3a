// IEEE fp16 and bfloat16 conversions, bit-identical to ggml's (round to nearest even).
#pragma once
#include <bit>
#include <cstdint>

namespace okapi {

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: exact as a float
    float f = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -f : f;
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t fp32_to_fp16(float f) {
  // Same algorithm as ggml_compute_fp32_to_fp16 (Maratyszcza's FP16 library), which equals the
  // F16C instruction with round-to-nearest-even.
  const float scale_to_inf = std::bit_cast<float>(0x77800000u);
  const float scale_to_zero = std::bit_cast<float>(0x08800000u);
  const float abs_f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) & 0x7fffffffu);
  float base = (abs_f * scale_to_inf) * scale_to_zero;
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = std::bit_cast<uint32_t>(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007c00u;
  const uint32_t mantissa_bits = bits & 0x00000fffu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

inline float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t fp32_to_bf16(float f) {
  // ggml_compute_fp32_to_bf16: quiet NaNs, round to nearest even otherwise.
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64u);
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

}  // namespace okapi
