// Tensor-by-tensor checks of okapi's quantizers against files llama-quantize wrote: every tensor
// of a type in the quantized file, requantized by okapi from the same tensor of the F32 input
// (with llama-quantize's importance weights, sums / counts per column, when an imatrix is given),
// must come out byte for byte the same.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "format/gguf.hpp"
#include "kernels/format_table.hpp"

namespace okapi::test {

// llama-quantize's importance weights from an imatrix GGUF: per weight tensor, [n_mat][n_per_row]
// sums / count of each matrix (1 where a matrix saw no activation).
inline std::map<std::string, std::vector<float>> peer_importance(const std::filesystem::path& imatrix) {
  std::map<std::string, std::vector<float>> out;
  const gguf::File f = gguf::File::open(imatrix);
  const std::string suffix = ".in_sum2";
  for (const auto& t : f.tensors()) {
    if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string name = t.name.substr(0, t.name.size() - suffix.size());
    const gguf::TensorInfo& counts = f.tensor(name + ".counts");
    EXPECT_EQ(t.type, DType::F32);
    EXPECT_EQ(counts.type, DType::F32);
    const int64_t n_per_row = t.shape[0], n_mat = counts.n_elements();
    std::vector<float> sums(static_cast<size_t>(t.n_elements())), c(static_cast<size_t>(n_mat));
    std::memcpy(sums.data(), t.data, sums.size() * sizeof(float));
    std::memcpy(c.data(), counts.data, c.size() * sizeof(float));
    std::vector<float>& w = out[name];
    w.resize(sums.size());
    for (int64_t m = 0; m < n_mat; ++m) {
      for (int64_t i = 0; i < n_per_row; ++i) {
        const auto k = static_cast<size_t>(m * n_per_row + i);
        w[k] = c[static_cast<size_t>(m)] > 0.0f ? sums[k] / c[static_cast<size_t>(m)] : 1.0f;
      }
    }
  }
  return out;
}

// Requantizes every tensor of `type` in `quantized` from the F32 tensor of the same name in `input`
// (rows of matrix m with importance row m of its entry in `importance`, if any) and expects the same
// bytes. Returns how many tensors were compared.
inline int expect_same_tensor_bytes(const std::filesystem::path& input, const std::filesystem::path& quantized,
                                    DType type, const std::map<std::string, std::vector<float>>& importance = {}) {
  const gguf::File in = gguf::File::open(input);
  const gguf::File out = gguf::File::open(quantized);
  const quant::Format& f = quant::format(type, Isa::scalar);
  int compared = 0;
  for (const auto& t : out.tensors()) {
    if (t.type != type) continue;
    const gguf::TensorInfo& src = in.tensor(t.name);
    EXPECT_EQ(src.type, DType::F32) << t.name;
    if (src.type != DType::F32) continue;
    const int64_t n = t.shape[0], rows = t.n_rows();
    const int64_t rows_per_mat = t.shape.size() > 1 ? t.shape[1] : 1;
    const size_t row_out = *row_bytes(type, n);
    EXPECT_EQ(t.nbytes, row_out * static_cast<size_t>(rows)) << t.name;
    if (t.nbytes != row_out * static_cast<size_t>(rows)) continue;
    std::vector<float> x(static_cast<size_t>(n));
    std::vector<uint8_t> mine(row_out);
    const auto it = importance.find(t.name);
    int64_t differing = 0, first = -1;
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(x.data(), src.data + static_cast<size_t>(r * n) * sizeof(float), x.size() * sizeof(float));
      if (it != importance.end() && f.quantize_weighted != nullptr) {
        const int64_t m = r / rows_per_mat;
        if (it->second.size() < static_cast<size_t>((m + 1) * n)) {
          ADD_FAILURE() << t.name << ": the importance matrix has too few columns";
          return compared;
        }
        f.quantize_weighted(x.data(), mine.data(), n, it->second.data() + m * n);
      } else {
        f.quantize_ref(x.data(), mine.data(), n);
      }
      if (std::memcmp(mine.data(), t.data + static_cast<size_t>(r) * row_out, row_out) != 0) {
        if (first < 0) first = r;
        ++differing;
      }
    }
    EXPECT_EQ(differing, 0) << t.name << ": " << differing << " of " << rows << " rows differ, first " << first
                            << (it != importance.end() ? " (with importance)" : "");
    ++compared;
  }
  return compared;
}

}  // namespace okapi::test
