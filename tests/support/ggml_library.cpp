#include "support/ggml_library.hpp"

#include <dlfcn.h>

#include <stdexcept>

#include "support/peer_logits.hpp"

namespace okapi::test {

namespace {

using QuantizeChunkFn = size_t (*)(int, const float*, void*, int64_t, int64_t, int64_t, const float*);
using QuantizeInitFn = void (*)(int);
using DequantizeRowFn = void (*)(const void*, float*, int64_t);

}  // namespace

std::filesystem::path GgmlLibrary::path() {
  return peer_dump_logits_tool().parent_path() / "llama.cpp" / "libggml-base.so.0";
}

GgmlLibrary& GgmlLibrary::get() {
  static GgmlLibrary library;
  return library;
}

GgmlLibrary::GgmlLibrary() {
  handle_ = dlopen(path().c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) throw std::runtime_error("cannot open " + path().string() + ": " + dlerror());
}

namespace {

template <typename Fn>
Fn symbol(void* handle, const std::string& name) {
  void* p = dlsym(handle, name.c_str());
  if (p == nullptr) throw std::runtime_error("ggml has no " + name);
  return reinterpret_cast<Fn>(p);
}

}  // namespace

void GgmlLibrary::quantize(DType type, const float* x, void* dst, int64_t n_rows, int64_t n_per_row,
                           const float* importance) {
  symbol<QuantizeInitFn>(handle_, "ggml_quantize_init")(static_cast<int>(type));
  symbol<QuantizeChunkFn>(handle_, "ggml_quantize_chunk")(static_cast<int>(type), x, dst, 0, n_rows, n_per_row,
                                                          importance);
}

void GgmlLibrary::dequantize(DType type, const void* src, float* y, int64_t n) {
  symbol<DequantizeRowFn>(handle_, "dequantize_row_" + std::string(dtype_name(type)))(src, y, n);
}

}  // namespace okapi::test
