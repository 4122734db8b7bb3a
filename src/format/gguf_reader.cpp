// GGUF reader. Every count, length, type and offset read from the file is checked against the
// bytes that remain before it is used, so a hostile file can neither read out of bounds nor make
// the reader allocate more than a small multiple of its own size.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "core/error.hpp"
#include "format/gguf.hpp"

namespace okapi::gguf {
namespace {

// Smallest possible encodings, used to bound counts by the bytes left in the file.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;             // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // 1-char name, 1 dim, type, offset

// Bytes one array element takes at least in the file.
uint64_t min_element_bytes(ValueType type) {
  switch (type) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: return 8;     // the length
    case ValueType::ARRAY: return 4 + 8;  // element type and count
  }
  return 1;
}

bool valid_value_type(uint32_t id) { return id <= static_cast<uint32_t>(ValueType::F64); }

// Where a tensor info's `offset` field lies: after the name, n_dims, ne[] and type.
uint64_t offset_field_position(const TensorInfo& t) {
  return t.info_offset + 8 + t.name.size() + 4 + 8 * t.shape.size() + 4;
}

}  // namespace

// Reads one file front to back; fills a File or throws okapi::Error.
class Parser {
 public:
  Parser(File& file, std::span<const uint8_t> bytes) : file_(file), bytes_(bytes) {}

  void run() {
    read_header();
    read_metadata();
    read_alignment();
    read_tensor_infos();
    place_tensors();
  }

 private:
  File& file_;
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;

  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename... Args>
  [[noreturn]] void fail(uint64_t offset, std::string_view field, fmt::format_string<Args...> format,
                         Args&&... args) const {
    throw Error(fmt::format("{}: {} at offset {}: {}", file_.name_, field, offset,
                            fmt::format(format, std::forward<Args>(args)...)));
  }

  void need(uint64_t n, std::string_view field) const {
    if (n > remaining()) {
      fail(pos_, field, "file truncated: needs {} bytes, only {} left (file size {})", n, remaining(),
           bytes_.size());
    }
  }

  template <typename T>
  T read(std::string_view field) {
    need(sizeof(T), field);
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(std::string_view field) {
    const uint64_t start = pos_;
    const auto length = read<uint64_t>(field);
    if (length > remaining()) {
      fail(start, field, "string length {} exceeds the {} bytes left in the file", length, remaining());
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(length));
    pos_ += length;
    return s;
  }

  ValueType read_value_type(std::string_view field) {
    const uint64_t start = pos_;
    const auto id = read<uint32_t>(field);
    if (!valid_value_type(id)) fail(start, field, "invalid value type {}", id);
    return static_cast<ValueType>(id);
  }

  void read_header() {
    const auto magic = read<uint32_t>("magic");
    if (magic != kMagic) {
      fail(0, "magic", "not a GGUF file: magic 0x{:08x}, expected 0x{:08x} (\"GGUF\")", magic, kMagic);
    }
    const auto version = read<uint32_t>("version");
    if (version == 1) {
      fail(4, "version", "GGUF v1 (32-bit counts) is not supported; re-convert the model to v2 or v3");
    }
    if (version != 2 && version != 3) {
      const uint32_t swapped = __builtin_bswap32(version);
      if (swapped == 2 || swapped == 3) {
        fail(4, "version", "big-endian GGUF (version {} byte-swapped) is not supported", swapped);
      }
      fail(4, "version", "unsupported GGUF version {} (supported: 2, 3)", version);
    }
    file_.version_ = version;
    n_tensors_ = read<uint64_t>("tensor_count");
    n_kv_ = read<uint64_t>("metadata_kv_count");
    // Each count must fit in what is left of the file, even at the smallest possible encoding.
    if (n_tensors_ > remaining() / kMinTensorInfoBytes) {
      fail(8, "tensor_count", "{} tensors cannot fit in the {} bytes left (each info needs at least {})",
           n_tensors_, remaining(), kMinTensorInfoBytes);
    }
    if (n_kv_ > remaining() / kMinKeyValueBytes) {
      fail(16, "metadata_kv_count", "{} key-value pairs cannot fit in the {} bytes left (each needs at least {})",
           n_kv_, remaining(), kMinKeyValueBytes);
    }
  }

  Value read_value(ValueType type, const std::string& field, int depth) {
    switch (type) {
      case ValueType::U8: return read<uint8_t>(field);
      case ValueType::I8: return read<int8_t>(field);
      case ValueType::U16: return read<uint16_t>(field);
      case ValueType::I16: return read<int16_t>(field);
      case ValueType::U32: return read<uint32_t>(field);
      case ValueType::I32: return read<int32_t>(field);
      case ValueType::F32: return read<float>(field);
      case ValueType::U64: return read<uint64_t>(field);
      case ValueType::I64: return read<int64_t>(field);
      case ValueType::F64: return read<double>(field);
      case ValueType::BOOL: {
        const uint64_t start = pos_;
        const auto b = read<uint8_t>(field);
        if (b > 1) fail(start, field, "bool value {} is neither 0 nor 1", b);
        return b == 1;
      }
      case ValueType::STRING: return read_string(field);
      case ValueType::ARRAY: return read_array(field, depth + 1);
    }
    fail(pos_, field, "invalid value type {}", static_cast<uint32_t>(type));
  }

  Value read_array(const std::string& field, int depth) {
    const uint64_t start = pos_;
    if (depth > kMaxArrayDepth) fail(start, field, "arrays nested deeper than {}", kMaxArrayDepth);
    Array array;
    array.element_type = read_value_type(field + " element type");
    const uint64_t count_offset = pos_;
    const auto count = read<uint64_t>(field + " count");
    const uint64_t min_bytes = min_element_bytes(array.element_type);
    if (count > remaining() / min_bytes) {
      fail(count_offset, field + " count",
           "{} elements of type {} cannot fit in the {} bytes left (at least {} bytes each)", count,
           value_type_name(array.element_type), remaining(), min_bytes);
    }
    array.items.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) {
      array.items.push_back(read_value(array.element_type, field, depth));
    }
    return Value(std::move(array));
  }

  void read_metadata() {
    std::unordered_set<std::string> seen;
    file_.metadata_.reserve(static_cast<size_t>(n_kv_));
    for (uint64_t i = 0; i < n_kv_; ++i) {
      const uint64_t key_offset = pos_;
      std::string key = read_string(fmt::format("metadata key #{}", i));
      if (!seen.insert(key).second) fail(key_offset, fmt::format("metadata key '{}'", key), "duplicate key");
      const std::string field = fmt::format("value of '{}'", key);
      const ValueType type = read_value_type(fmt::format("value type of '{}'", key));
      Value value = read_value(type, field, 0);
      file_.metadata_.push_back(KeyValue{std::move(key), std::move(value), key_offset});
    }
  }

  void read_alignment() {
    for (const KeyValue& kv : file_.metadata_) {
      if (kv.key != "general.alignment") continue;
      const std::string field = "'general.alignment'";
      const auto* align = std::get_if<uint32_t>(&kv.value.data);
      if (align == nullptr) {
        fail(kv.file_offset, field, "type is {}, expected u32", value_type_name(kv.value.type()));
      }
      if (*align == 0 || !std::has_single_bit(*align) || *align > kMaxAlignment) {
        fail(kv.file_offset, field, "{} is not a power of two between 1 and {}", *align, kMaxAlignment);
      }
      file_.alignment_ = *align;
    }
  }

  TensorInfo read_tensor_info(uint64_t index) {
    TensorInfo info;
    info.info_offset = pos_;
    const std::string name_field = fmt::format("tensor #{} name", index);
    info.name = read_string(name_field);
    if (info.name.empty()) fail(info.info_offset, name_field, "empty tensor name");
    if (info.name.size() > kMaxTensorName) {
      fail(info.info_offset, name_field, "name is {} bytes long, the limit is {}", info.name.size(),
           kMaxTensorName);
    }
    const std::string who = fmt::format("tensor '{}'", info.name);

    const uint64_t dims_offset = pos_;
    const auto n_dims = read<uint32_t>("n_dims of " + who);
    if (n_dims == 0 || n_dims > kMaxDims) {
      fail(dims_offset, "n_dims of " + who, "{} dimensions, expected 1 to {}", n_dims, kMaxDims);
    }
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne_offset = pos_;
      const std::string field = fmt::format("ne[{}] of {}", d, who);
      const auto ne = read<int64_t>(field);
      if (ne <= 0) fail(ne_offset, field, "dimension {} is not positive", ne);
      if (__builtin_mul_overflow(n_elements, ne, &n_elements)) {
        fail(ne_offset, field, "element count overflows int64 (shape so far {} x {})",
             fmt::join(info.shape, " x "), ne);
      }
      info.shape.push_back(ne);
    }

    const uint64_t type_offset = pos_;
    const auto type_id = read<uint32_t>("type of " + who);
    const auto layout = dtype_layout(type_id);
    if (!layout || layout->type == DType::I8_S) fail(type_offset, "type of " + who, "unknown tensor type {}", type_id);
    info.type = layout->type;
    if (info.shape[0] % layout->block_size != 0) {
      fail(type_offset, "type of " + who, "ne[0] = {} is not a multiple of the {} block size {}",
           info.shape[0], layout->name, layout->block_size);
    }
    const auto nbytes = tensor_bytes(info.type, info.shape);
    if (!nbytes) {
      fail(type_offset, "type of " + who, "byte size of {} [{}] overflows", layout->name,
           fmt::join(info.shape, ", "));
    }
    info.nbytes = *nbytes;
    info.offset = read<uint64_t>("offset of " + who);
    return info;
  }

  void read_tensor_infos() {
    file_.tensors_.reserve(static_cast<size_t>(n_tensors_));
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      TensorInfo info = read_tensor_info(i);
      if (!file_.tensor_index_.emplace(info.name, file_.tensors_.size()).second) {
        fail(info.info_offset, fmt::format("tensor #{} name", i), "duplicate tensor name '{}'", info.name);
      }
      file_.tensors_.push_back(std::move(info));
    }
    // The data section starts at the next multiple of the alignment (alignment <= 1 MiB, and pos_
    // is at most the file size, so this cannot overflow).
    const uint64_t a = file_.alignment_;
    file_.data_offset_ = (pos_ + a - 1) / a * a;
  }

  void place_tensors() {
    const uint64_t size = bytes_.size();
    for (TensorInfo& t : file_.tensors_) {
      const uint64_t field_offset = offset_field_position(t);
      const std::string field = fmt::format("offset of tensor '{}'", t.name);
      if (t.offset % file_.alignment_ != 0) {
        fail(field_offset, field, "data offset {} is not a multiple of the alignment {}", t.offset,
             file_.alignment_);
      }
      uint64_t end = 0;
      if (__builtin_add_overflow(file_.data_offset_, t.offset, &t.file_offset) ||
          __builtin_add_overflow(t.file_offset, t.nbytes, &end) || end > size) {
        fail(field_offset, field, "data [{} + {}, {} bytes) lies outside the file ({} bytes)",
             file_.data_offset_, t.offset, t.nbytes, size);
      }
      t.data = bytes_.data() + t.file_offset;
    }
    // Tensors must not share bytes: sort by offset and compare neighbours.
    std::vector<const TensorInfo*> order;
    order.reserve(file_.tensors_.size());
    for (const TensorInfo& t : file_.tensors_) order.push_back(&t);
    // Stable, so of two tensors at the same offset the later one is reported.
    std::stable_sort(order.begin(), order.end(),
                     [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const TensorInfo& prev = *order[i - 1];
      const TensorInfo& next = *order[i];
      if (prev.offset + prev.nbytes > next.offset) {
        fail(offset_field_position(next), fmt::format("offset of tensor '{}'", next.name),
             "data at {} overlaps tensor '{}' (offset {}, {} bytes)", next.offset, prev.name, prev.offset,
             prev.nbytes);
      }
    }
  }
};

File File::parse(std::span<const uint8_t> bytes, std::string name) {
  File file;
  file.name_ = std::move(name);
  file.bytes_ = bytes;
  Parser(file, bytes).run();
  return file;
}

File File::open(const std::filesystem::path& path) {
  auto mapping = std::make_shared<MappedFile>(path);
  File file = parse(mapping->bytes(), path.string());
  file.mapping_ = std::move(mapping);
  return file;
}

const Value* File::find(std::string_view key) const {
  for (const KeyValue& kv : metadata_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const Value& File::at(std::string_view key) const {
  if (const Value* v = find(key)) return *v;
  throw_error("{}: metadata key '{}' not found", name_, key);
}

std::string File::architecture() const {
  const Value* v = find("general.architecture");
  return v != nullptr && v->is_string() ? v->as_string() : std::string();
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  if (const TensorInfo* t = find_tensor(name)) return *t;
  throw_error("{}: tensor '{}' not found", name_, name);
}

int64_t TensorInfo::n_elements() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

int64_t TensorInfo::n_rows() const {
  return shape.empty() ? 0 : n_elements() / shape[0];
}

}  // namespace okapi::gguf
