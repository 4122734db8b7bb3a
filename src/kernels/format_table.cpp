#include <algorithm>
#include <cstring>

#include "core/cpu.hpp"
#include "core/error.hpp"
#include "kernels/float_gemm.hpp"
#include "kernels/format_table.hpp"

namespace okapi::quant {

Format detail::reference_format(DType type, DequantizeRowFn dequantize, QuantizeRowFn quantize, DType vec_dot_type,
                                VecDotFn vec_dot) {
  Format f;
  f.type = type;
  f.dequantize_ref = dequantize;
  f.quantize_ref = quantize;
  f.vec_dot_type = vec_dot_type;
  f.vec_dot_ref = vec_dot;
  return f;
}

namespace {

std::vector<Format> build_table(Isa tier) {
  std::vector<Format> table;
  detail::add_float_formats(table);
  detail::add_legacy_formats(table);
  detail::add_kquant_formats(table);
  detail::add_ternary_formats(table);
  detail::add_iq4_nl_format(table);
  detail::add_iq4_xs_format(table);
  detail::add_mxfp4_format(table);
  detail::add_iq2_formats(table);
  detail::add_iq3_formats(table);
  detail::add_iq1_formats(table);
  detail::add_iq1_quantizers(table);
  for (auto& f : table) {
    f.dequantize = f.dequantize_ref;
    f.quantize = f.quantize_ref;
    f.vec_dot = f.vec_dot_ref;
  }
  if (tier >= Isa::avx2) detail::use_avx2_kernels(table);
  if (tier >= Isa::avx512) detail::use_avx512_kernels(table);
  // F32 / F16 / BF16 weights: the float GEMM's packed panels (shared with training).
  for (auto& f : table) {
    if (f.row_groups.rows == 0) f.row_groups = kernels::float_row_groups(f.type, tier);
  }
  return table;
}

// One table per tier, each built on first use. A tier above isa() is refused: its kernels may not
// run on this CPU (or the environment asked not to use them).
const std::vector<Format>& table(Isa tier) {
  if (tier > isa()) {
    throw_error("ISA tier {} is not available here (the tier in use is {})", isa_name(tier), isa_name(isa()));
  }
  static const std::vector<Format> scalar = build_table(Isa::scalar);
  if (tier == Isa::scalar) return scalar;
  static const std::vector<Format> avx2 = build_table(Isa::avx2);
  if (tier == Isa::avx2) return avx2;
  static const std::vector<Format> avx512 = build_table(Isa::avx512);
  return avx512;
}

}  // namespace

const Format* find_format(DType type, Isa tier) {
  for (const auto& f : table(tier)) {
    if (f.type == type) return &f;
  }
  return nullptr;
}

const Format* find_format(DType type) { return find_format(type, isa()); }

const Format& format(DType type, Isa tier) {
  const Format* f = find_format(type, tier);
  if (f == nullptr) throw_error("weight format {} is not supported by okapi", dtype_name(type));
  return *f;
}

const Format& format(DType type) { return format(type, isa()); }

std::vector<DType> supported_types() {
  std::vector<DType> out;
  for (const auto& f : table(Isa::scalar)) out.push_back(f.type);
  return out;
}

}  // namespace okapi::quant
