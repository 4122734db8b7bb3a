// GGUF v2/v3 reader and writer (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
// The reader validates everything before use: a malformed file throws okapi::Error naming the
// field, its byte offset and the offending value. Tensor data are views into the mapped file.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/dtype.hpp"
#include "core/mapped_file.hpp"

namespace okapi::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;
// Longest tensor name: ggml's GGML_MAX_NAME is 64 including the terminating NUL, and llama.cpp
// rejects names of 64 bytes or more.
inline constexpr size_t kMaxTensorName = 63;
// general.alignment must be a power of two no larger than this. Real files use 32 (sometimes a
// page size, 4-64 KiB); 1 MiB leaves room for huge pages while keeping a hostile value from
// making the writer pad by gigabytes.
inline constexpr uint64_t kMaxAlignment = uint64_t{1} << 20;
// Arrays may nest (an array of arrays); deeper nesting than this is rejected so that a hostile
// file cannot exhaust the stack.
inline constexpr int kMaxArrayDepth = 8;

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8,
  ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view value_type_name(ValueType type);

struct Value;
struct Array {
  ValueType element_type = ValueType::U8;
  std::vector<Value> items;
};

// One metadata value. Integers keep their exact GGUF type so a round trip is byte-identical.
struct Value {
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, Array, uint64_t, int64_t, double>;
  Storage data;

  Value() = default;
  // Implicit by design: writer.set("k", uint32_t{3}) stores a u32. Only exact storage types are
  // accepted, so an int literal is an i32 and a size_t is a u64.
  template <typename T>
    requires(!std::is_same_v<std::decay_t<T>, Value> && std::is_constructible_v<Storage, T>)
  Value(T v) : data(std::move(v)) {}  // NOLINT(google-explicit-constructor)
  Value(const char* s) : data(std::string(s)) {}  // NOLINT(google-explicit-constructor)
  Value(std::string_view s) : data(std::string(s)) {}  // NOLINT(google-explicit-constructor)

  ValueType type() const;
  bool is_string() const { return std::holds_alternative<std::string>(data); }
  bool is_array() const { return std::holds_alternative<Array>(data); }

  // Checked conversions; throw okapi::Error on a type mismatch or a value out of range.
  int64_t as_int() const;
  uint64_t as_uint() const;
  double as_double() const;  // any numeric type
  bool as_bool() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  std::vector<std::string> as_string_array() const;
  std::vector<float> as_float_array() const;
  std::vector<int64_t> as_int_array() const;

  std::string to_display(size_t max_items = 8) const;  // for inspect
};

struct KeyValue {
  std::string key;
  Value value;
  uint64_t file_offset = 0;  // where the key begins
};

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;  // ggml ne[]: shape[0] is the contiguous row length
  uint64_t offset = 0;         // relative to the data section, as stored
  uint64_t file_offset = 0;    // absolute: data_offset + offset
  uint64_t nbytes = 0;         // stored size, no padding
  const uint8_t* data = nullptr;
  uint64_t info_offset = 0;    // where this tensor's info record begins in the file

  int64_t n_elements() const;
  int64_t n_rows() const;  // product of shape[1..]
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(nbytes)}; }
};

class File {
 public:
  // Maps and parses `path`.
  static File open(const std::filesystem::path& path);
  // Parses bytes owned by the caller (they must outlive the File); `name` is used in messages.
  static File parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return bytes_.size(); }
  const std::string& name() const { return name_; }
  std::span<const uint8_t> bytes() const { return bytes_; }
  // True for open(): bytes() is a read-only private mapping of the file (pages dropped from it
  // are read back from the file); false for parse() of caller-owned bytes.
  bool is_mapped() const { return mapping_ != nullptr; }

  const std::vector<KeyValue>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;
  const Value& at(std::string_view key) const;  // throws if missing
  std::string architecture() const;             // general.architecture or ""

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const TensorInfo& tensor(std::string_view name) const;  // throws if missing

 private:
  std::shared_ptr<MappedFile> mapping_;
  std::span<const uint8_t> bytes_;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> metadata_;
  std::vector<TensorInfo> tensors_;
  // name -> index in tensors_: the model loaders look up every tensor by name, and a hostile file
  // may hold a hundred thousand of them.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, size_t, NameHash, std::equal_to<>> tensor_index_;

  friend class Parser;
};

// Builds a GGUF v3 file. Metadata keep insertion order; tensors are laid out in the order added,
// each aligned to general.alignment (default 32) and zero-padded, as llama.cpp writes them. A file
// without tensors ends right after its metadata (no padding), as llama.cpp's vocab files do.
// write()/to_bytes() first check everything the reader would reject (duplicate or bad names,
// shapes, data sizes, mixed-type arrays, bad general.alignment) and throw okapi::Error.
class Writer {
 public:
  void set(std::string key, Value value);  // replaces an existing key in place
  void remove(std::string_view key);
  const Value* find(std::string_view key) const;
  // Copies metadata from a file (optionally skipping some keys).
  void copy_metadata(const File& file, std::span<const std::string_view> skip = {});

  // The data must stay valid until write() returns.
  void add_tensor_view(std::string name, DType type, std::vector<int64_t> shape,
                       std::span<const uint8_t> data);
  void add_tensor(std::string name, DType type, std::vector<int64_t> shape,
                  std::vector<uint8_t> data);
  // Data made only when write() reaches this tensor (e.g. quantized on the fly), so a large model
  // is streamed with one tensor in memory at a time. `produce` must return tensor_bytes(type,
  // shape) bytes; it may throw, and then nothing is written to disk.
  using TensorProducer = std::function<std::vector<uint8_t>()>;
  void add_tensor_producer(std::string name, DType type, std::vector<int64_t> shape, TensorProducer produce);
  size_t tensor_count() const { return tensors_.size(); }

  // Writes atomically (temp file, fsync, rename; a device, FIFO or /dev/stdout in place, see
  // atomic_file.hpp) and returns the bytes written. Throws okapi::Error.
  uint64_t write(const std::filesystem::path& path) const;
  std::vector<uint8_t> to_bytes() const;  // the same bytes, in memory (tests, fuzz seeds)

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    std::span<const uint8_t> view;
    std::vector<uint8_t> owned;
    TensorProducer produce;  // set for deferred tensors; view/owned are empty then
    uint64_t nbytes = 0;     // bytes of data the tensor will write
    std::span<const uint8_t> data() const { return owned.empty() ? view : std::span<const uint8_t>(owned); }
  };
  std::vector<KeyValue> metadata_;
  std::vector<PendingTensor> tensors_;
  uint64_t alignment() const;
  void validate() const;  // throws on what the reader would reject
  template <typename Sink>
  void emit(Sink& sink) const;
};

}  // namespace okapi::gguf
