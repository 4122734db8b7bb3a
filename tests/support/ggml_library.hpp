// llama.cpp's ggml-base library (../shared/peers/llama.cpp/libggml-base.so.0, the peers' build),
// opened at run time as a reference for single rows: ggml's quantizers (ggml_quantize_chunk, with
// or without importance weights) and reference dequantizers (dequantize_row_<type>) on any input a
// test makes up (zero groups, tiny values, every bit pattern), where files from llama-quantize
// only cover what a model holds. Nothing of it is linked into okapi.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "core/dtype.hpp"

namespace okapi::test {

class GgmlLibrary {
 public:
  static std::filesystem::path path();  // the library file (may be absent)
  static GgmlLibrary& get();            // opened once; throws std::runtime_error when it cannot be

  // ggml_quantize_chunk(type, x, dst, 0, n_rows, n_per_row, importance) after ggml_quantize_init.
  void quantize(DType type, const float* x, void* dst, int64_t n_rows, int64_t n_per_row, const float* importance);
  // dequantize_row_<dtype_name(type)>(src, y, n).
  void dequantize(DType type, const void* src, float* y, int64_t n);

 private:
  GgmlLibrary();
  void* handle_ = nullptr;
};

}  // namespace okapi::test
