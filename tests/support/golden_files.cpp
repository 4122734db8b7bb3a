#include "support/golden_files.hpp"

#include <algorithm>
#include <fstream>
#include <set>

#include "core/error.hpp"
#include "core/shared_dir.hpp"
#include "kernels/format_table.hpp"

namespace okapi::test {
namespace {

std::ifstream open_input(const std::filesystem::path& path, std::ios::openmode mode = std::ios::in) {
  std::ifstream in(path, mode);
  if (!in) throw_error("cannot open {}", path.string());
  return in;
}

}  // namespace

std::filesystem::path golden_dir() { return okapi::shared_dir() / "golden"; }

nlohmann::json load_json(const std::filesystem::path& path) {
  std::ifstream in = open_input(path);
  return nlohmann::json::parse(in);
}

nlohmann::ordered_json load_ordered_json(const std::filesystem::path& path) {
  std::ifstream in = open_input(path);
  return nlohmann::ordered_json::parse(in);
}

std::vector<uint8_t> read_range(const std::filesystem::path& path, uint64_t offset, uint64_t size) {
  std::ifstream in = open_input(path, std::ios::binary);
  std::vector<uint8_t> bytes(size);
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (!in) throw_error("short read in {}", path.string());
  return bytes;
}

std::vector<std::filesystem::path> shared_files(std::initializer_list<std::string_view> dirs,
                                                std::string_view extension) {
  std::vector<std::filesystem::path> out;
  for (std::string_view d : dirs) {
    const std::filesystem::path dir = okapi::shared_dir() / d;
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.is_regular_file() && entry.path().extension() == extension) out.push_back(entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::filesystem::path> shared_gguf_files() {
  return shared_files({"models", "golden/public/models", "golden/ik/public/models", "vocab"}, ".gguf");
}

bool is_checked_type(DType t) {
  static const std::set<DType> kTypes = {DType::F32,  DType::F16,   DType::BF16,  DType::Q4_0,
                                         DType::Q4_1, DType::Q5_0,  DType::Q5_1,  DType::Q8_0,
                                         DType::Q8_1, DType::TQ1_0, DType::TQ2_0, DType::I2_S,
                                         DType::IQ1_BN, DType::IQ2_BN};
  return kTypes.count(t) != 0;
}

const GoldenTensor* GoldenModel::find(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

GoldenModel load_dequant_golden(const std::filesystem::path& json_path) {
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

std::vector<uint8_t> read_tensor(const GoldenModel& m, const GoldenTensor& t) {
  return read_range(m.gguf, t.file_offset, t.raw_nbytes);
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> dequantize_golden(const GoldenModel& m, const GoldenTensor& t) {
  const auto bytes = read_tensor(m, t);
  std::vector<float> out(static_cast<size_t>(element_count(t.shape)));
  quant::dequantize_tensor(t.type, bytes, t.shape, out.data(), /*use_reference=*/true);
  return out;
}

std::string describe_counts(const std::map<DType, int>& counts) {
  std::string s;
  for (const auto& [type, n] : counts) {
    if (!s.empty()) s += ", ";
    s += std::string(dtype_name(type)) + " x" + std::to_string(n);
  }
  return s;
}

}  // namespace okapi::test
