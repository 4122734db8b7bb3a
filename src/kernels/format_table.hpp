// The weight-format table: per block format, its reference (scalar) dequantize / quantize /
// dot-product and the fastest version of each for an ISA tier (core/cpu.hpp), plus, where a tier
// has them, kernels over weights repacked into interleaved row groups. Layouts are bit-compatible
// with ggml (ggml-common.h). Nothing above quant/ switches on a format or a tier: it looks the row
// up in the table of its tier.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/cpu.hpp"
#include "core/dtype.hpp"

namespace okapi::quant {

// `src` is one row in storage layout (for IQ*_BN including its row prefix), `n` its length in
// elements (a multiple of the block size).
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
// One row quantized with per-column importance weights (an importance matrix's row for this
// tensor: n floats, never null), as ggml's quantize_<type>(..., quant_weights) does row by row.
using QuantizeWeightedRowFn = void (*)(const float* src, void* dst, int64_t n, const float* importance);
// Dot product of a weight row `w` (this format) with an activation row `a` already quantized to
// `vec_dot_type`; n elements. Returns the float result as ggml's vec_dot does.
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);

// Kernels over weights repacked at load into groups of `rows` interleaved rows (the layout is the
// tier's own). One kernel serves decode and prefill: each (row, token) result is one SIMD lane
// that runs through the blocks in order with the same operations whatever the number of tokens,
// rows or threads, so a token's logits are bit-identical alone or inside a batch.
struct RowGroupKernels {
  int64_t rows = 0;  // rows per group; 0: no repacked kernels for this format on this tier
  // Bytes of one packed group of rows of n_in elements (a multiple of 64).
  size_t (*group_bytes)(int64_t n_in) = nullptr;
  // Packs n_rows (1..rows) rows of n_in elements, w_row bytes apart in storage layout, into one
  // group at `group` (the missing rows are packed as zeros).
  void (*pack)(const void* w, size_t w_row, int64_t n_rows, int64_t n_in, void* group) = nullptr;
  // Bytes of one prepared activation row, and its preparation from n_in floats.
  size_t (*activation_bytes)(int64_t n_in) = nullptr;
  void (*prepare_activation)(const float* x, int64_t n_in, void* a) = nullptr;
  // y[t * y_stride + r] = dot(weight row r, activation row t) for r < n_rows, t < n_tokens; the
  // rows are ceil(n_rows / rows) consecutive groups at `groups`, activation rows a_row bytes apart.
  void (*gemm)(int64_t n_in, const void* groups, int64_t n_rows, const void* a, size_t a_row, int64_t n_tokens,
               float* y, int64_t y_stride) = nullptr;
};

// Multi-token tiles over weights as stored, for batches where the tier has no row groups: a tile
// of weight rows x tokens whose per-token operations are those of the format's vec_dot, so a
// batched row equals the single-token one.
struct TileKernels {
  // y[t * y_stride + r] = scale * dot(weight row r, activation row t), r < n_rows, t < n_tokens.
  // Weight rows are w_row bytes apart; activation rows (vec_dot_type) a_row bytes apart.
  // a_scales: with float_scales, the activation blocks' fp16 d as floats (Q8_0 activations,
  // n / 32 per token, rows contiguous), else null.
  void (*gemm)(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
               const float* a_scales, int64_t n_tokens, float scale, float* y, int64_t y_stride) = nullptr;
  bool float_scales = false;
};

struct Format {
  DType type = DType::F32;
  DequantizeRowFn dequantize_ref = nullptr;
  // ggml's quantizer without an importance matrix (quant_weights == NULL). nullptr: okapi cannot
  // produce this format without importance weights (see quantize_weighted) or at all.
  QuantizeRowFn quantize_ref = nullptr;
  // ggml's quantizer with an importance matrix. nullptr: the format ignores importance weights
  // (ggml's Q8_0, F16, TQ*: quantize_ref is used).
  QuantizeWeightedRowFn quantize_weighted = nullptr;
  // ggml refuses this format without an importance matrix (IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M):
  // quantize_ref is nullptr and quantize_weighted is not.
  bool requires_importance = false;
  DType vec_dot_type = DType::F32;       // the activation format the dot product pairs with
  VecDotFn vec_dot_ref = nullptr;
  // Fastest implementation for this CPU; equal to the _ref pointers when there is no SIMD one.
  DequantizeRowFn dequantize = nullptr;
  QuantizeRowFn quantize = nullptr;
  VecDotFn vec_dot = nullptr;
  RowGroupKernels row_groups;  // this tier's repacked kernels, if any
  TileKernels tiles;           // this tier's multi-token tiles, if any (gemm null: none)
};

// The table of the tier in use (isa()), or of `tier` (which must be one of available_isas(),
// else okapi::Error). nullptr when okapi has no kernels for the type (e.g. the IQ* codebook types).
const Format* find_format(DType type);
const Format* find_format(DType type, Isa tier);
const Format& format(DType type);  // throws okapi::Error for an unsupported type
const Format& format(DType type, Isa tier);
std::vector<DType> supported_types();

// Whole-tensor helpers: handle per-tensor metadata (I2_S's trailing scale) and row prefixes.
// `shape` is ggml ne[]; `data` must hold tensor_bytes(type, shape) bytes. Throws okapi::Error.
void dequantize_tensor(DType type, std::span<const uint8_t> data, std::span<const int64_t> shape,
                       float* out, bool use_reference = false);
std::vector<uint8_t> quantize_tensor(DType type, const float* src, std::span<const int64_t> shape,
                                     bool use_reference = false);
// The factor a row-level result (dequantize / vec_dot of one row) must be multiplied by for this
// tensor: I2_S's per-tensor scale (stored after the packed rows), 1 for every other format.
float tensor_scale(DType type, std::span<const uint8_t> data, std::span<const int64_t> shape);

namespace detail {
// A table row with its reference kernels; table.cpp fills in the fast pointers afterwards.
Format reference_format(DType type, DequantizeRowFn dequantize, QuantizeRowFn quantize, DType vec_dot_type,
                        VecDotFn vec_dot);
// Each family registers its rows; table.cpp collects them and then lets the SIMD families
// replace the fast pointers when the CPU supports them.
void add_float_formats(std::vector<Format>& table);    // F32 F16 BF16
void add_legacy_formats(std::vector<Format>& table);   // Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1
void add_kquant_formats(std::vector<Format>& table);   // Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K
void add_ternary_formats(std::vector<Format>& table);  // TQ1_0 TQ2_0 I2_S IQ1_BN IQ2_BN
void add_iq4_nl_format(std::vector<Format>& table);    // IQ4_NL
void add_iq4_xs_format(std::vector<Format>& table);    // IQ4_XS        (scalar/iq4_xs.cpp)
void add_mxfp4_format(std::vector<Format>& table);     // MXFP4         (scalar/mxfp4.cpp)
void add_iq2_formats(std::vector<Format>& table);      // IQ2_XXS IQ2_XS IQ2_S (scalar/iq2*.cpp)
void add_iq3_formats(std::vector<Format>& table);      // IQ3_XXS IQ3_S (scalar/iq3*.cpp)
void add_iq1_formats(std::vector<Format>& table);      // IQ1_S IQ1_M   (scalar/iq1*.cpp)
// IQ1_S / IQ1_M quantizers (they search the IQ2 family's grid neighbourhoods): fills in
// quantize_weighted and requires_importance of the rows add_iq1_formats made (scalar/iq1_quantize.cpp).
void add_iq1_quantizers(std::vector<Format>& table);
void use_avx2_kernels(std::vector<Format>& table);     // called only for the avx2 tier and above
void use_avx512_kernels(std::vector<Format>& table);   // called only for the avx512 tier
// The i-quant and MXFP4 families install their own SIMD kernels (avx2/, avx512/ family files);
// use_avx2_kernels / use_avx512_kernels call these.
void use_avx2_iq_kernels(std::vector<Format>& table);      // IQ4_XS MXFP4 (avx2/iq4_xs_mxfp4*.cpp)
void use_avx2_iq2_kernels(std::vector<Format>& table);     // avx2/iq2*.cpp
void use_avx2_iq3_kernels(std::vector<Format>& table);     // avx2/iq3*.cpp
void use_avx2_iq1_kernels(std::vector<Format>& table);     // avx2/iq1*.cpp
void use_avx512_iq_kernels(std::vector<Format>& table);    // avx512/*iq4_xs_mxfp4*.cpp
void use_avx512_iq2_kernels(std::vector<Format>& table);   // avx512/*iq2*.cpp
void use_avx512_iq3_kernels(std::vector<Format>& table);   // avx512/*iq3*.cpp
void use_avx512_iq1_kernels(std::vector<Format>& table);   // avx512/*iq1*.cpp
}  // namespace detail

}  // namespace okapi::quant
