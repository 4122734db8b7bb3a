// Element/block types of tensor data, numbered exactly as ggml's `enum ggml_type` so GGUF files
// interoperate. This is the layout half (block size, bytes); quant/ adds the arithmetic.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace okapi {

enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35,
  MXFP4 = 39,    // OCP microscaling FP4 (gpt-oss experts): e8m0 scale + 32 e2m1 values
  I2_S = 36,     // bitnet.cpp: 2-bit ternary, one float scale per tensor after the packed data
  IQ1_BN = 134,  // ik_llama.cpp ternary types (row scale prefix); read and dequantized only
  IQ2_BN = 135,
  // okapi's own, never in a file: bitnet.cpp's per-token int8 activations of I2_S (its I8_S, which
  // has no ggml id): [float s = 127 / max|x|][int32 sum of the levels][int8 levels].
  I8_S = 1024,
};

struct DTypeLayout {
  DType type;
  std::string_view name;   // ggml_type_name(): "f32", "q4_K", "tq2_0", ...
  int64_t block_size;      // elements per block
  size_t block_bytes;      // bytes per block
  size_t row_prefix_bytes; // bytes stored before each row's blocks (ik IQ*_BN row scale)
  bool quantized;
};

// Layout of a known type, or nullopt for an id okapi does not know.
std::optional<DTypeLayout> dtype_layout(uint32_t id);
const DTypeLayout& layout(DType type);  // type must be known
std::string_view dtype_name(DType type);
// Case-insensitive lookup by ggml name ("q4_k", "Q4_K", "tq2_0").
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes of one row of `n` elements; nullopt if n is not a multiple of the block size.
std::optional<size_t> row_bytes(DType type, int64_t n);
// Bytes of a whole tensor with dims ne[0..]; nullopt on a block misfit or on overflow.
std::optional<uint64_t> tensor_bytes(DType type, std::span<const int64_t> ne);

}  // namespace okapi
