// Reading the golden JSON files and the tensor bytes they point at (by file offset, so these
// tests need no GGUF reader).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/sha256.hpp"
#include "quant/quant.hpp"
#include "support/paths.hpp"

namespace okapi::test {

inline std::filesystem::path golden_dir() { return okapi::shared_dir() / "golden"; }

inline nlohmann::json load_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return nlohmann::json::parse(in);
}

inline std::vector<uint8_t> read_range(const std::filesystem::path& path, uint64_t offset, uint64_t size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::vector<uint8_t> bytes(size);
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (!in) throw std::runtime_error("short read in " + path.string());
  return bytes;
}

template <typename T>
std::string sha_of(const std::vector<T>& v) {
  return sha256_hex(v.data(), v.size() * sizeof(T));
}

// The formats this suite checks: F32/F16/BF16, the legacy and the ternary families.
inline bool is_checked_type(DType t) {
  static const std::set<DType> kTypes = {DType::F32,  DType::F16,   DType::BF16,  DType::Q4_0,
                                         DType::Q4_1, DType::Q5_0,  DType::Q5_1,  DType::Q8_0,
                                         DType::Q8_1, DType::TQ1_0, DType::TQ2_0, DType::I2_S,
                                         DType::IQ1_BN, DType::IQ2_BN};
  return kTypes.count(t) != 0;
}

// One tensor entry of a public/dequant/<model>.json file.
struct GoldenTensor {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;
  uint64_t file_offset = 0;
  uint64_t raw_nbytes = 0;
  std::string raw_sha256;
  std::string dequant_sha256;
};

struct GoldenModel {
  std::filesystem::path gguf;
  std::vector<GoldenTensor> tensors;  // file order; types okapi does not know are left out

  const GoldenTensor* find(const std::string& name) const {
    for (const auto& t : tensors) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
};

// `json_path` is <root>/public/dequant/<stem>.json; the model is <root>/public/models/<model_file>.
inline GoldenModel load_dequant_golden(const std::filesystem::path& json_path) {
  const auto j = load_json(json_path);
  GoldenModel m;
  m.gguf = json_path.parent_path().parent_path() / "models" / j.at("model_file").get<std::string>();
  for (const auto& [name, t] : j.at("tensors").items()) {
    const auto type = dtype_from_name(t.at("type").get<std::string>());
    if (!type) continue;
    GoldenTensor g;
    g.name = name;
    g.type = *type;
    g.shape = t.at("shape").get<std::vector<int64_t>>();
    g.file_offset = t.at("file_offset").get<uint64_t>();
    g.raw_nbytes = t.at("raw_nbytes").get<uint64_t>();
    g.raw_sha256 = t.at("raw_sha256").get<std::string>();
    g.dequant_sha256 = t.at("dequant_sha256").get<std::string>();
    m.tensors.push_back(std::move(g));
  }
  return m;
}

inline std::vector<uint8_t> read_tensor(const GoldenModel& m, const GoldenTensor& t) {
  return read_range(m.gguf, t.file_offset, t.raw_nbytes);
}

inline int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline std::vector<float> dequantize_golden(const GoldenModel& m, const GoldenTensor& t) {
  const auto bytes = read_tensor(m, t);
  std::vector<float> out(static_cast<size_t>(element_count(t.shape)));
  quant::dequantize_tensor(t.type, bytes, t.shape, out.data(), /*use_reference=*/true);
  return out;
}

// "tq2_0 x3, q4_0 x29" style summary of a per-type count.
inline std::string describe_counts(const std::map<DType, int>& counts) {
  std::string s;
  for (const auto& [type, n] : counts) {
    if (!s.empty()) s += ", ";
    s += std::string(dtype_name(type)) + " x" + std::to_string(n);
  }
  return s;
}

}  // namespace okapi::test
