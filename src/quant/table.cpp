#include <algorithm>
#include <cstring>

#include "core/cpu.hpp"
#include "core/error.hpp"
#include "quant/quant.hpp"

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

std::vector<Format> build_table() {
  std::vector<Format> table;
  detail::add_float_formats(table);
  detail::add_legacy_formats(table);
  detail::add_kquant_formats(table);
  detail::add_ternary_formats(table);
  for (auto& f : table) {
    f.dequantize = f.dequantize_ref;
    f.quantize = f.quantize_ref;
    f.vec_dot = f.vec_dot_ref;
  }
  if (cpu_features().use_avx2()) detail::use_avx2_kernels(table);
  return table;
}

const std::vector<Format>& table() {
  static const std::vector<Format> t = build_table();
  return t;
}

}  // namespace

const Format* find_format(DType type) {
  for (const auto& f : table()) {
    if (f.type == type) return &f;
  }
  return nullptr;
}

const Format& format(DType type) {
  const Format* f = find_format(type);
  if (f == nullptr) throw_error("weight format {} is not supported by okapi", dtype_name(type));
  return *f;
}

std::vector<DType> supported_types() {
  std::vector<DType> out;
  for (const auto& f : table()) out.push_back(f.type);
  return out;
}

}  // namespace okapi::quant
