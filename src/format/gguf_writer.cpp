// GGUF v3 writer. Layout as llama.cpp writes it: header, metadata in insertion order, tensor
// infos, zero padding to the alignment, then each tensor's data followed by zero padding to the
// alignment. A file without tensors ends right after its metadata (as llama.cpp's vocab files do).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_set>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "format/gguf.hpp"

namespace okapi::gguf {
namespace {

constexpr uint32_t kWriteVersion = 3;

uint64_t pad_to(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

struct VectorSink {
  std::vector<uint8_t>& out;
  void write(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    out.insert(out.end(), p, p + size);
  }
  void write_zeros(size_t count) { out.resize(out.size() + count, 0); }
  uint64_t position() const { return out.size(); }
};

struct FileSink {
  AtomicFileWriter& file;
  void write(const void* data, size_t size) { file.write(data, size); }
  void write_zeros(size_t count) { file.write_zeros(count); }
  uint64_t position() const { return file.bytes_written(); }
};

template <typename Sink, typename T>
void put(Sink& sink, T value) {
  sink.write(&value, sizeof(value));
}

template <typename Sink>
void put_string(Sink& sink, std::string_view s) {
  put<Sink, uint64_t>(sink, s.size());
  sink.write(s.data(), s.size());
}

template <typename Sink>
void put_value(Sink& sink, const Value& value) {
  std::visit(
      [&sink](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          put_string(sink, v);
        } else if constexpr (std::is_same_v<T, Array>) {
          put<Sink, uint32_t>(sink, static_cast<uint32_t>(v.element_type));
          put<Sink, uint64_t>(sink, v.items.size());
          for (const Value& item : v.items) put_value(sink, item);
        } else if constexpr (std::is_same_v<T, bool>) {
          put<Sink, uint8_t>(sink, v ? 1 : 0);
        } else {
          put<Sink, T>(sink, v);
        }
      },
      value.data);
}

// Arrays must be homogeneous and no deeper than the reader accepts.
void check_value(const std::string& key, const Value& value, int depth) {
  const Array* array = std::get_if<Array>(&value.data);
  if (array == nullptr) return;
  if (depth >= kMaxArrayDepth) throw_error("metadata '{}': arrays nested deeper than {}", key, kMaxArrayDepth);
  for (size_t i = 0; i < array->items.size(); ++i) {
    if (array->items[i].type() != array->element_type) {
      throw_error("metadata '{}': array of {} holds a {} at index {}", key, value_type_name(array->element_type),
                  value_type_name(array->items[i].type()), i);
    }
    check_value(key, array->items[i], depth + 1);
  }
}

}  // namespace

void Writer::set(std::string key, Value value) {
  for (KeyValue& kv : metadata_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  metadata_.push_back(KeyValue{std::move(key), std::move(value), 0});
}

void Writer::remove(std::string_view key) {
  std::erase_if(metadata_, [key](const KeyValue& kv) { return kv.key == key; });
}

const Value* Writer::find(std::string_view key) const {
  for (const KeyValue& kv : metadata_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

void Writer::copy_metadata(const File& file, std::span<const std::string_view> skip) {
  for (const KeyValue& kv : file.metadata()) {
    if (std::find(skip.begin(), skip.end(), kv.key) != skip.end()) continue;
    set(kv.key, kv.value);
  }
}

void Writer::add_tensor_view(std::string name, DType type, std::vector<int64_t> shape,
                             std::span<const uint8_t> data) {
  const uint64_t nbytes = data.size();
  tensors_.push_back(PendingTensor{std::move(name), type, std::move(shape), data, {}, {}, nbytes});
}

void Writer::add_tensor(std::string name, DType type, std::vector<int64_t> shape, std::vector<uint8_t> data) {
  const uint64_t nbytes = data.size();
  tensors_.push_back(PendingTensor{std::move(name), type, std::move(shape), {}, std::move(data), {}, nbytes});
}

void Writer::add_tensor_producer(std::string name, DType type, std::vector<int64_t> shape, TensorProducer produce) {
  const uint64_t nbytes = tensor_bytes(type, shape).value_or(0);  // 0 for a bad shape: validate() reports it
  tensors_.push_back(PendingTensor{std::move(name), type, std::move(shape), {}, {}, std::move(produce), nbytes});
}

uint64_t Writer::alignment() const {
  const Value* v = find("general.alignment");
  return v == nullptr ? kDefaultAlignment : v->as_uint();
}

void Writer::validate() const {
  std::unordered_set<std::string_view> keys;
  for (const KeyValue& kv : metadata_) {
    if (!keys.insert(kv.key).second) throw_error("metadata key '{}' appears twice", kv.key);
    check_value(kv.key, kv.value, 0);
  }
  if (const Value* v = find("general.alignment")) {
    const auto* align = std::get_if<uint32_t>(&v->data);
    if (align == nullptr) throw_error("general.alignment must be a u32, not {}", value_type_name(v->type()));
    if (*align == 0 || !std::has_single_bit(*align) || *align > kMaxAlignment) {
      throw_error("general.alignment {} is not a power of two between 1 and {}", *align, kMaxAlignment);
    }
  }
  std::unordered_set<std::string_view> names;
  for (const PendingTensor& t : tensors_) {
    if (t.name.empty() || t.name.size() > kMaxTensorName) {
      throw_error("tensor name '{}' must be 1 to {} bytes long", t.name, kMaxTensorName);
    }
    if (!names.insert(t.name).second) throw_error("tensor '{}' added twice", t.name);
    if (t.shape.empty() || t.shape.size() > static_cast<size_t>(kMaxDims)) {
      throw_error("tensor '{}' has {} dimensions, expected 1 to {}", t.name, t.shape.size(), kMaxDims);
    }
    const auto nbytes = tensor_bytes(t.type, t.shape);
    if (!nbytes) {
      throw_error("tensor '{}': shape [{}] is invalid for type {}", t.name, fmt::join(t.shape, ", "),
                  dtype_name(t.type));
    }
    if (*nbytes != t.nbytes) {
      throw_error("tensor '{}': {} [{}] needs {} bytes, got {}", t.name, dtype_name(t.type),
                  fmt::join(t.shape, ", "), *nbytes, t.nbytes);
    }
  }
}

template <typename Sink>
void Writer::emit(Sink& sink) const {
  validate();
  const uint64_t align = alignment();
  put<Sink, uint32_t>(sink, kMagic);
  put<Sink, uint32_t>(sink, kWriteVersion);
  put<Sink, uint64_t>(sink, tensors_.size());
  put<Sink, uint64_t>(sink, metadata_.size());
  for (const KeyValue& kv : metadata_) {
    put_string(sink, kv.key);
    put<Sink, uint32_t>(sink, static_cast<uint32_t>(kv.value.type()));
    put_value(sink, kv.value);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    put_string(sink, t.name);
    put<Sink, uint32_t>(sink, static_cast<uint32_t>(t.shape.size()));
    for (int64_t ne : t.shape) put<Sink, int64_t>(sink, ne);
    put<Sink, uint32_t>(sink, static_cast<uint32_t>(t.type));
    put<Sink, uint64_t>(sink, offset);
    offset += pad_to(t.nbytes, align);
  }
  if (tensors_.empty()) return;
  sink.write_zeros(static_cast<size_t>(pad_to(sink.position(), align) - sink.position()));
  for (const PendingTensor& t : tensors_) {
    if (t.produce) {
      const std::vector<uint8_t> produced = t.produce();
      if (produced.size() != t.nbytes) {
        throw_error("tensor '{}': producer returned {} bytes, expected {}", t.name, produced.size(), t.nbytes);
      }
      sink.write(produced.data(), produced.size());
    } else {
      const auto data = t.data();
      sink.write(data.data(), data.size());
    }
    sink.write_zeros(static_cast<size_t>(pad_to(t.nbytes, align) - t.nbytes));
  }
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out;
  VectorSink sink{out};
  emit(sink);
  return out;
}

uint64_t Writer::write(const std::filesystem::path& path) const {
  validate();  // before creating anything on disk
  AtomicFileWriter file(path);
  FileSink sink{file};
  emit(sink);
  file.commit();
  return file.bytes_written();
}

}  // namespace okapi::gguf
