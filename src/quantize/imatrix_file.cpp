#include "quantize/imatrix_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/mapped_file.hpp"
#include "format/gguf.hpp"

namespace okapi::quantize {

namespace {

constexpr std::string_view kSumsSuffix = ".in_sum2";
constexpr std::string_view kCountsSuffix = ".counts";
constexpr std::string_view kKeyDatasets = "imatrix.datasets";
constexpr std::string_view kKeyChunkCount = "imatrix.chunk_count";
constexpr std::string_view kKeyChunkSize = "imatrix.chunk_size";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::vector<float> f32_values(const gguf::TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  if (!out.empty()) std::memcpy(out.data(), t.data, out.size() * sizeof(float));
  return out;
}

void check_finite(const std::string& file, const std::string& name, std::span<const float> values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i]))
      throw_error("importance matrix '{}': entry '{}' has a non-finite value ({}) at index {}", file, name,
                  values[i], i);
  }
}

Imatrix read_gguf(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  const std::string file = path.string();
  const gguf::File gf = gguf::File::parse(bytes, file);
  if (const gguf::Value* type = gf.find("general.type"); type != nullptr) {
    if (!type->is_string() || type->as_string() != "imatrix")
      throw_error("'{}' is not an importance matrix (general.type is {}, not \"imatrix\")", file,
                  type->to_display());
  }
  if (gf.tensors().empty()) throw_error("importance matrix '{}' has no data (no tensors)", file);

  Imatrix out;
  const gguf::Value* datasets = gf.find(kKeyDatasets);
  const gguf::Value* chunk_count = gf.find(kKeyChunkCount);
  const gguf::Value* chunk_size = gf.find(kKeyChunkSize);
  try {
    // llama.cpp takes the datasets only when they are an array of strings.
    if (datasets != nullptr && datasets->is_array() &&
        datasets->as_array().element_type == gguf::ValueType::STRING)
      out.datasets = datasets->as_string_array();
    if (chunk_count != nullptr) out.chunk_count = chunk_count->as_int();
    if (chunk_size != nullptr) out.chunk_size = chunk_size->as_int();
  } catch (const Error& e) {
    throw_error("importance matrix '{}': bad imatrix.* metadata: {}", file, e.what());
  }
  if (out.chunk_count < 0 || out.chunk_count > std::numeric_limits<uint32_t>::max())
    throw_error("importance matrix '{}': imatrix.chunk_count is {}", file, out.chunk_count);
  if (out.chunk_size < 0 || out.chunk_size > std::numeric_limits<uint32_t>::max())
    throw_error("importance matrix '{}': imatrix.chunk_size is {}", file, out.chunk_size);
  out.has_metadata = datasets != nullptr && chunk_count != nullptr && chunk_size != nullptr;

  // Pair "<name>.in_sum2" with "<name>.counts"; other tensors are ignored, as llama.cpp does.
  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> pairs;
  for (const gguf::TensorInfo& t : gf.tensors()) {
    if (ends_with(t.name, kSumsSuffix)) {
      pairs[t.name.substr(0, t.name.size() - kSumsSuffix.size())].first = &t;
    } else if (ends_with(t.name, kCountsSuffix)) {
      pairs[t.name.substr(0, t.name.size() - kCountsSuffix.size())].second = &t;
    }
  }
  if (pairs.empty())
    throw_error("importance matrix '{}' has no '<name>.in_sum2' / '<name>.counts' tensors", file);

  for (const auto& [name, pair] : pairs) {
    const auto [sums, counts] = pair;
    if (sums == nullptr || counts == nullptr)
      throw_error("importance matrix '{}': entry '{}' has {} but no {}", file, name,
                  sums == nullptr ? "counts" : "sums", sums == nullptr ? "sums (.in_sum2)" : "counts (.counts)");
    if (sums->type != DType::F32 || counts->type != DType::F32)
      throw_error("importance matrix '{}': entry '{}': sums and counts must be F32, not {} and {}", file, name,
                  dtype_name(sums->type), dtype_name(counts->type));
    const int64_t n_values = sums->n_elements();
    const int64_t n_counts = counts->n_elements();
    if (n_values < 1 || n_counts < 1 || n_values % n_counts != 0)
      throw_error("importance matrix '{}': entry '{}' has {} sums for {} counts (not a multiple)", file, name,
                  n_values, n_counts);
    ImatrixEntry entry;
    entry.n_mat = n_counts;
    entry.n_per_row = n_values / n_counts;
    entry.sums = f32_values(*sums);
    check_finite(file, name + std::string(kSumsSuffix), entry.sums);
    const std::vector<float> raw_counts = f32_values(*counts);
    entry.counts.reserve(raw_counts.size());
    for (size_t j = 0; j < raw_counts.size(); ++j) {
      const float c = raw_counts[j];
      if (!std::isfinite(c) || c < 0.0f || c > 9.0e18f)
        throw_error("importance matrix '{}': entry '{}' has count {} for matrix {}", file, name, c, j);
      entry.counts.push_back(std::lround(c));
    }
    out.entries.emplace(name, std::move(entry));
  }
  return out;
}

class LegacyReader {
 public:
  LegacyReader(std::string file, std::span<const uint8_t> bytes) : file_(std::move(file)), bytes_(bytes) {}

  bool at_end() const { return pos_ == bytes_.size(); }
  size_t pos() const { return pos_; }

  int32_t i32(std::string_view what) {
    int32_t v = 0;
    take(&v, sizeof v, what);
    return v;
  }
  void take(void* dst, size_t n, std::string_view what) {
    if (bytes_.size() - pos_ < n)
      throw_error("importance matrix '{}' is truncated: {} needs {} bytes at offset {}, the file has {}", file_, what,
                  n, pos_, bytes_.size());
    if (n > 0) std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }
  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  std::string file_;
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

Imatrix read_legacy(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  const std::string file = path.string();
  if (bytes.empty()) throw_error("importance matrix '{}' is empty", file);
  LegacyReader in(file, bytes);
  const int32_t n_entries = in.i32("the entry count");
  if (n_entries < 1)
    throw_error("'{}' is neither a GGUF file nor a legacy .dat importance matrix (entry count {})", file, n_entries);
  Imatrix out;
  out.legacy = true;
  out.chunk_size = 0;
  for (int32_t i = 0; i < n_entries; ++i) {
    const int32_t len = in.i32("a name length");
    if (len < 1 || static_cast<size_t>(len) > in.remaining())
      throw_error("importance matrix '{}': entry {} has a name length of {} at offset {} (the file has {} bytes)",
                  file, i + 1, len, in.pos() - 4, bytes.size());
    std::string name(static_cast<size_t>(len), '\0');
    in.take(name.data(), name.size(), "a name");
    if (name.find('\0') != std::string::npos)
      throw_error("importance matrix '{}': entry {} has a NUL byte in its name", file, i + 1);
    const int32_t ncall = in.i32("a call count");
    const int32_t n_values = in.i32("a value count");
    if (ncall < 0) throw_error("importance matrix '{}': entry '{}' has a call count of {}", file, name, ncall);
    if (n_values < 1 || static_cast<size_t>(n_values) > in.remaining() / sizeof(float))
      throw_error("importance matrix '{}': entry '{}' has {} values but {} bytes remain", file, name, n_values,
                  in.remaining());
    if (out.entries.count(name) != 0) throw_error("importance matrix '{}': entry '{}' appears twice", file, name);
    ImatrixEntry entry;
    entry.legacy = true;
    entry.n_per_row = n_values;
    entry.n_mat = 1;
    entry.sums.resize(static_cast<size_t>(n_values));
    in.take(entry.sums.data(), entry.sums.size() * sizeof(float), "the values");
    check_finite(file, name, entry.sums);
    entry.counts = {ncall};
    out.entries.emplace(std::move(name), std::move(entry));
  }
  // Optional trailer: the chunk count, then the dataset name (each may be cut short, as
  // llama.cpp's loader tolerates).
  if (in.remaining() >= sizeof(int32_t)) {
    const int32_t n_chunks = in.i32("the chunk count");
    out.chunk_count = std::max<int32_t>(n_chunks, 0);
    if (in.remaining() >= sizeof(int32_t)) {
      const int32_t len = in.i32("the dataset name length");
      if (len > 0 && static_cast<size_t>(len) <= in.remaining()) {
        std::string dataset(static_cast<size_t>(len), '\0');
        in.take(dataset.data(), dataset.size(), "the dataset name");
        dataset.resize(std::strlen(dataset.c_str()));
        out.datasets.push_back(std::move(dataset));
      }
    }
  }
  return out;
}

void check_entry(const std::string& name, const ImatrixEntry& e) {
  if (e.n_per_row < 1 || e.n_mat < 1 || e.sums.size() != static_cast<size_t>(e.n_per_row * e.n_mat) ||
      e.counts.size() != static_cast<size_t>(e.n_mat))
    throw_error("importance matrix entry '{}': {} sums and {} counts for {} x {} (n_per_row x n_mat)", name,
                e.sums.size(), e.counts.size(), e.n_per_row, e.n_mat);
  for (const int64_t c : e.counts)
    if (c < 0) throw_error("importance matrix entry '{}' has a negative count ({})", name, c);
}

template <typename T>
std::span<const uint8_t> as_bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

}  // namespace

Imatrix read_imatrix(const std::filesystem::path& path) {
  require_input_file(path, "importance matrix");
  const MappedFile mapped(path);
  const std::span<const uint8_t> bytes = mapped.bytes();
  uint32_t magic = 0;
  if (bytes.size() >= sizeof magic) std::memcpy(&magic, bytes.data(), sizeof magic);
  if (magic == gguf::kMagic) return read_gguf(path, bytes);
  return read_legacy(path, bytes);
}

void write_imatrix_gguf(const Imatrix& imatrix, const std::filesystem::path& path) {
  gguf::Writer w;
  w.set("general.type", "imatrix");
  gguf::Array datasets;
  datasets.element_type = gguf::ValueType::STRING;
  for (const std::string& d : imatrix.datasets) datasets.items.emplace_back(d);
  w.set(std::string(kKeyDatasets), std::move(datasets));
  if (imatrix.chunk_count < 0 || imatrix.chunk_count > std::numeric_limits<uint32_t>::max() ||
      imatrix.chunk_size < 0 || imatrix.chunk_size > std::numeric_limits<uint32_t>::max())
    throw_error("importance matrix: chunk count {} or chunk size {} out of range", imatrix.chunk_count,
                imatrix.chunk_size);
  w.set(std::string(kKeyChunkCount), static_cast<uint32_t>(imatrix.chunk_count));
  w.set(std::string(kKeyChunkSize), static_cast<uint32_t>(imatrix.chunk_size));
  // std::map iterates in the byte order of the names: llama-imatrix's std::sort.
  std::vector<std::vector<float>> counts_f(imatrix.entries.size());
  size_t i = 0;
  for (const auto& [name, e] : imatrix.entries) {
    if (e.legacy)
      throw_error("importance matrix entry '{}' holds legacy .dat values; convert them (to_raw) first", name);
    check_entry(name, e);
    std::vector<float>& counts = counts_f[i++];
    counts.reserve(e.counts.size());
    for (const int64_t c : e.counts) counts.push_back(static_cast<float>(c));
    // ggml writes a tensor's dimensions up to its last one above 1 (ggml_n_dims): [n_per_row] and
    // [1] for a dense weight, [n_per_row, n_mat] and [1, n_mat] for experts.
    std::vector<int64_t> sums_shape = {e.n_per_row};
    std::vector<int64_t> counts_shape = {1};
    if (e.n_mat > 1) {
      sums_shape.push_back(e.n_mat);
      counts_shape.push_back(e.n_mat);
    }
    w.add_tensor_view(name + std::string(kSumsSuffix), DType::F32, std::move(sums_shape), as_bytes_of(e.sums));
    w.add_tensor_view(name + std::string(kCountsSuffix), DType::F32, std::move(counts_shape), as_bytes_of(counts));
  }
  if (imatrix.entries.empty()) throw_error("importance matrix has no entries; nothing to write");
  w.write(path);
}

void write_imatrix_dat(const Imatrix& imatrix, const std::filesystem::path& path) {
  // As save_imatrix_legacy: entries without any activation are skipped, values stored as
  // (sum / count) * ncall with ncall = ceil(max count / chunk_size), 1 where a matrix saw nothing.
  std::vector<uint8_t> body;
  auto put = [&body](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    body.insert(body.end(), b, b + n);
  };
  auto put_i32 = [&put](int64_t v, std::string_view what) {
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
      throw_error("importance matrix: {} ({}) does not fit the .dat format's 32 bits", what, v);
    const auto v32 = static_cast<int32_t>(v);
    put(&v32, sizeof v32);
  };
  int64_t n_entries = 0;
  for (const auto& [name, e] : imatrix.entries) {
    check_entry(name, e);
    if (std::all_of(e.counts.begin(), e.counts.end(), [](int64_t c) { return c == 0; })) continue;
    ++n_entries;
    put_i32(static_cast<int64_t>(name.size()), "a name length");
    put(name.data(), name.size());
    int64_t ncall = 0;
    std::vector<float> values;
    if (e.legacy) {
      ncall = e.counts[0];
      values = e.sums;
    } else {
      if (imatrix.chunk_size < 1)
        throw_error("importance matrix: the .dat format needs the chunk size (it is {})", imatrix.chunk_size);
      const int64_t max_count = *std::max_element(e.counts.begin(), e.counts.end());
      ncall = (max_count + imatrix.chunk_size - 1) / imatrix.chunk_size;
      values.resize(e.sums.size());
      for (size_t j = 0; j < values.size(); ++j) {
        float count = static_cast<float>(e.counts[j / static_cast<size_t>(e.n_per_row)]);
        float value = e.sums[j];
        if (count == 0.0f) {
          value = 1.0f;
          count = 1.0f;
        }
        values[j] = (value / count) * static_cast<float>(ncall);
      }
    }
    put_i32(ncall, "a call count");
    put_i32(static_cast<int64_t>(values.size()), "a value count");
    put(values.data(), values.size() * sizeof(float));
  }
  if (n_entries == 0) throw_error("importance matrix has no entries with data; nothing to write");
  put_i32(imatrix.chunk_count, "the chunk count");
  const std::string dataset = imatrix.datasets.empty() ? std::string() : imatrix.datasets.back();
  put_i32(static_cast<int64_t>(dataset.size()), "the dataset name length");
  put(dataset.data(), dataset.size());

  const auto n32 = static_cast<int32_t>(std::min<int64_t>(n_entries, std::numeric_limits<int32_t>::max()));
  AtomicFileWriter out(path);
  out.write(&n32, sizeof n32);
  out.write(body.data(), body.size());
  out.commit();
}

Imatrix to_raw(Imatrix imatrix, int64_t chunk_size) {
  bool any_legacy = imatrix.legacy;
  for (const auto& [name, e] : imatrix.entries) any_legacy = any_legacy || e.legacy;
  if (!any_legacy) return imatrix;
  if (chunk_size < 1) throw_error("importance matrix: converting .dat values needs a chunk size (it is {})", chunk_size);
  for (auto& [name, e] : imatrix.entries) {
    if (!e.legacy) continue;
    for (float& v : e.sums) v *= static_cast<float>(chunk_size);
    const int64_t ncall = e.counts.empty() ? 0 : e.counts[0];
    e.counts.assign(1, ncall * chunk_size);
    e.n_per_row = static_cast<int64_t>(e.sums.size());
    e.n_mat = 1;
    e.legacy = false;
  }
  imatrix.legacy = false;
  imatrix.chunk_size = chunk_size;
  return imatrix;
}

void merge_imatrix(Imatrix& into, const Imatrix& from_file, int64_t chunk_size) {
  const Imatrix from = to_raw(from_file, chunk_size);
  for (const auto& [name, e] : from.entries) {
    check_entry(name, e);
    auto [it, fresh] = into.entries.try_emplace(name, e);
    if (fresh) continue;
    ImatrixEntry& d = it->second;
    if (d.sums.size() != e.sums.size())
      throw_error("importance matrices disagree on '{}': {} sums here, {} in the other", name, d.sums.size(),
                  e.sums.size());
    if (d.counts.size() == 1 && e.counts.size() > 1) {
      d.counts.assign(e.counts.size(), d.counts[0]);
      d.n_mat = e.n_mat;
      d.n_per_row = e.n_per_row;
    }
    for (size_t j = 0; j < e.sums.size(); ++j) d.sums[j] += e.sums[j];
    if (e.counts.size() == 1) {
      // A one-count entry (a .dat one or a dense tensor) adds to every matrix, as llama-imatrix does
      // for .dat files.
      for (int64_t& c : d.counts) c += e.counts[0];
    } else if (d.counts.size() == e.counts.size()) {
      for (size_t j = 0; j < e.counts.size(); ++j) d.counts[j] += e.counts[j];
    } else {
      throw_error("importance matrices disagree on '{}': {} counts here, {} in the other", name, d.counts.size(),
                  e.counts.size());
    }
  }
  into.datasets.insert(into.datasets.end(), from.datasets.begin(), from.datasets.end());
}

std::vector<float> importance_weights(const ImatrixEntry& entry) {
  std::vector<float> out(entry.sums.size());
  if (entry.legacy) {
    // llama-quantize: sums / ncall, or the sums as stored when ncall is 0.
    const int64_t ncall = entry.counts.empty() ? 0 : entry.counts[0];
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = ncall > 0 ? entry.sums[i] / static_cast<float>(ncall) : entry.sums[i];
    return out;
  }
  check_entry("(importance weights)", entry);
  const auto n = static_cast<size_t>(entry.n_per_row);
  for (size_t j = 0; j < entry.counts.size(); ++j) {
    const auto count = static_cast<float>(entry.counts[j]);
    for (size_t i = 0; i < n; ++i) out[j * n + i] = count > 0.0f ? entry.sums[j * n + i] / count : 1.0f;
  }
  return out;
}

}  // namespace okapi::quantize
