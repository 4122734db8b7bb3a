#include "core/dtype.hpp"

#include <array>
#include <cctype>

namespace okapi {
namespace {

constexpr int64_t kQK = 256;  // super-block size of the k-quants and TQ types

constexpr std::array kLayouts = {
    DTypeLayout{DType::F32, "f32", 1, 4, 0, false},
    DTypeLayout{DType::F16, "f16", 1, 2, 0, false},
    DTypeLayout{DType::Q4_0, "q4_0", 32, 18, 0, true},
    DTypeLayout{DType::Q4_1, "q4_1", 32, 20, 0, true},
    DTypeLayout{DType::Q5_0, "q5_0", 32, 22, 0, true},
    DTypeLayout{DType::Q5_1, "q5_1", 32, 24, 0, true},
    DTypeLayout{DType::Q8_0, "q8_0", 32, 34, 0, true},
    DTypeLayout{DType::Q8_1, "q8_1", 32, 36, 0, true},
    DTypeLayout{DType::Q2_K, "q2_K", kQK, 84, 0, true},
    DTypeLayout{DType::Q3_K, "q3_K", kQK, 110, 0, true},
    DTypeLayout{DType::Q4_K, "q4_K", kQK, 144, 0, true},
    DTypeLayout{DType::Q5_K, "q5_K", kQK, 176, 0, true},
    DTypeLayout{DType::Q6_K, "q6_K", kQK, 210, 0, true},
    DTypeLayout{DType::Q8_K, "q8_K", kQK, 292, 0, true},
    DTypeLayout{DType::IQ2_XXS, "iq2_xxs", kQK, 66, 0, true},
    DTypeLayout{DType::IQ2_XS, "iq2_xs", kQK, 74, 0, true},
    DTypeLayout{DType::IQ3_XXS, "iq3_xxs", kQK, 98, 0, true},
    DTypeLayout{DType::IQ1_S, "iq1_s", kQK, 50, 0, true},
    DTypeLayout{DType::IQ4_NL, "iq4_nl", 32, 18, 0, true},
    DTypeLayout{DType::IQ3_S, "iq3_s", kQK, 110, 0, true},
    DTypeLayout{DType::IQ2_S, "iq2_s", kQK, 82, 0, true},
    DTypeLayout{DType::IQ4_XS, "iq4_xs", kQK, 136, 0, true},
    DTypeLayout{DType::I8, "i8", 1, 1, 0, false},
    DTypeLayout{DType::I16, "i16", 1, 2, 0, false},
    DTypeLayout{DType::I32, "i32", 1, 4, 0, false},
    DTypeLayout{DType::I64, "i64", 1, 8, 0, false},
    DTypeLayout{DType::F64, "f64", 1, 8, 0, false},
    DTypeLayout{DType::IQ1_M, "iq1_m", kQK, 56, 0, true},
    DTypeLayout{DType::BF16, "bf16", 1, 2, 0, false},
    DTypeLayout{DType::TQ1_0, "tq1_0", kQK, 54, 0, true},
    DTypeLayout{DType::TQ2_0, "tq2_0", kQK, 66, 0, true},
    DTypeLayout{DType::MXFP4, "mxfp4", 32, 17, 0, true},
    // I2_S: blocks of 128 weights in 32 bytes (bitnet.cpp's x86 QK_I2_S packing); the per-tensor
    // scale (and padding) is handled in tensor_bytes().
    DTypeLayout{DType::I2_S, "i2_s", 128, 32, 0, true},
    DTypeLayout{DType::IQ1_BN, "iq1_bn", 64, 13, 2, true},
    DTypeLayout{DType::IQ2_BN, "iq2_bn", 64, 16, 4, true},
    DTypeLayout{DType::I8_S, "i8_s", 1, 1, 8, true},
};

// bitnet.cpp stores the I2_S tensor scale in a 32-byte tail after the packed weights.
constexpr uint64_t kI2sTailBytes = 32;

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

std::optional<DTypeLayout> dtype_layout(uint32_t id) {
  for (const auto& l : kLayouts) {
    if (static_cast<uint32_t>(l.type) == id) return l;
  }
  return std::nullopt;
}

const DTypeLayout& layout(DType type) {
  for (const auto& l : kLayouts) {
    if (l.type == type) return l;
  }
  return kLayouts[0];  // unreachable for valid enum values
}

std::string_view dtype_name(DType type) { return layout(type).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& l : kLayouts) {
    if (l.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::tolower(static_cast<unsigned char>(l.name[i])) ==
             std::tolower(static_cast<unsigned char>(name[i]));
    }
    if (same) return l.type;
  }
  return std::nullopt;
}


std::optional<size_t> row_bytes(DType type, int64_t n) {
  const auto& l = layout(type);
  if (n < 0 || n % l.block_size != 0) return std::nullopt;
  uint64_t bytes = 0;
  if (mul_overflows(static_cast<uint64_t>(n / l.block_size), l.block_bytes, &bytes)) return std::nullopt;
  if (__builtin_add_overflow(bytes, l.row_prefix_bytes, &bytes)) return std::nullopt;
  return static_cast<size_t>(bytes);
}

std::optional<uint64_t> tensor_bytes(DType type, std::span<const int64_t> ne) {
  if (ne.empty()) return std::nullopt;
  for (int64_t d : ne) {
    if (d <= 0) return std::nullopt;
  }
  auto row = row_bytes(type, ne[0]);
  if (!row) return std::nullopt;
  uint64_t total = *row;
  for (size_t i = 1; i < ne.size(); ++i) {
    if (mul_overflows(total, static_cast<uint64_t>(ne[i]), &total)) return std::nullopt;
  }
  if (type == DType::I2_S && __builtin_add_overflow(total, kI2sTailBytes, &total)) return std::nullopt;
  return total;
}

}  // namespace okapi
