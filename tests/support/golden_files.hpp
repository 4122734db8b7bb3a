// Reading the shared data: JSON files, byte ranges of model files (by file offset, so golden tests
// need no GGUF reader), the tensor tables of the golden dequant JSON files, and file listings.
#pragma once
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/sha256.hpp"

namespace okapi::test {

std::filesystem::path golden_dir();  // <shared>/golden

// Throw okapi::Error when the file cannot be opened.
nlohmann::json load_json(const std::filesystem::path& path);                  // keys sorted
nlohmann::ordered_json load_ordered_json(const std::filesystem::path& path);  // keys in file order
std::vector<uint8_t> read_range(const std::filesystem::path& path, uint64_t offset, uint64_t size);

// The regular files directly in <shared>/<dir> for each of `dirs` (absent folders are skipped)
// whose extension is `extension` (".gguf"), sorted by path.
std::vector<std::filesystem::path> shared_files(std::initializer_list<std::string_view> dirs,
                                                std::string_view extension);
// Every GGUF file of the shared data: models, golden models, vocabularies.
std::vector<std::filesystem::path> shared_gguf_files();

template <typename T>
std::string sha_of(const std::vector<T>& v) {
  return sha256_hex(v.data(), v.size() * sizeof(T));
}

// The formats the legacy golden suites check: F32/F16/BF16, the legacy and the ternary families.
bool is_checked_type(DType t);

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
  std::vector<GoldenTensor> tensors;  // sorted by name; types okapi does not know are left out

  const GoldenTensor* find(const std::string& name) const;
};

// `json_path` is <root>/public/dequant/<stem>.json; the model is <root>/public/models/<model_file>.
GoldenModel load_dequant_golden(const std::filesystem::path& json_path);

std::vector<uint8_t> read_tensor(const GoldenModel& m, const GoldenTensor& t);
int64_t element_count(const std::vector<int64_t>& shape);
// The tensor's stored bytes dequantized to F32 with the reference rows.
std::vector<float> dequantize_golden(const GoldenModel& m, const GoldenTensor& t);

// "tq2_0 x3, q4_0 x29" style summary of a per-type count.
std::string describe_counts(const std::map<DType, int>& counts);

}  // namespace okapi::test
