#include "support/malformed_gguf.hpp"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <limits>

#include "core/error.hpp"
#include "format/gguf.hpp"

namespace okapi::test {
namespace {

using gguf::Array;
using gguf::ValueType;

constexpr uint64_t kTwo63 = uint64_t{1} << 63;
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

// Offsets of the fields of the valid file, and copies of it with one field changed.
class Patcher {
 public:
  Patcher() : base_(small_valid_gguf()), file_(gguf::File::parse(base_, "valid.gguf")) {}

  uint64_t size() const { return base_.size(); }
  const gguf::File& file() const { return file_; }

  uint64_t key_at(std::string_view key) const { return kv(key).file_offset; }
  uint64_t value_type_at(std::string_view key) const { return key_at(key) + 8 + key.size(); }
  uint64_t value_at(std::string_view key) const { return value_type_at(key) + 4; }

  uint64_t info_at(std::string_view name) const { return file_.tensor(name).info_offset; }
  uint64_t n_dims_at(std::string_view name) const { return info_at(name) + 8 + name.size(); }
  uint64_t ne_at(std::string_view name, size_t i) const { return n_dims_at(name) + 4 + 8 * i; }
  uint64_t type_at(std::string_view name) const { return ne_at(name, file_.tensor(name).shape.size()); }
  uint64_t offset_at(std::string_view name) const { return type_at(name) + 4; }

  template <typename T>
  std::vector<uint8_t> with(uint64_t offset, T value) const {
    std::vector<uint8_t> out = base_;
    std::memcpy(out.data() + offset, &value, sizeof(T));
    return out;
  }
  std::vector<uint8_t> spliced(uint64_t offset, uint64_t old_size, const std::vector<uint8_t>& replacement) const {
    std::vector<uint8_t> out(base_.begin(), base_.begin() + static_cast<ptrdiff_t>(offset));
    out.insert(out.end(), replacement.begin(), replacement.end());
    out.insert(out.end(), base_.begin() + static_cast<ptrdiff_t>(offset + old_size), base_.end());
    return out;
  }
  std::vector<uint8_t> cut(uint64_t size) const {
    return {base_.begin(), base_.begin() + static_cast<ptrdiff_t>(size)};
  }

 private:
  std::vector<uint8_t> base_;
  gguf::File file_;

  const gguf::KeyValue& kv(std::string_view key) const {
    for (const auto& kv : file_.metadata()) {
      if (kv.key == key) return kv;
    }
    throw_error("no key '{}' in the valid corpus file", key);
  }
};

std::vector<uint8_t> encoded_string(std::string_view s) {
  std::vector<uint8_t> out(8 + s.size());
  const uint64_t n = s.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, s.data(), s.size());
  return out;
}

// A metadata-only file holding one key whose array nests `depth` levels deep (built by hand:
// the writer refuses to nest deeper than the reader accepts).
std::vector<uint8_t> nested_array_file(int depth) {
  std::vector<uint8_t> out;
  // resize + memcpy rather than insert(): GCC 12 reports a false stringop-overflow on the latter.
  const auto put = [&out](const auto& v) {
    const size_t at = out.size();
    out.resize(at + sizeof(v));
    std::memcpy(out.data() + at, &v, sizeof(v));
  };
  put(gguf::kMagic);
  put(uint32_t{3});
  put(uint64_t{0});  // tensors
  put(uint64_t{1});  // key-value pairs
  const auto key = encoded_string("deep");
  out.insert(out.end(), key.begin(), key.end());
  put(static_cast<uint32_t>(ValueType::ARRAY));
  for (int level = 1; level < depth; ++level) {
    put(static_cast<uint32_t>(ValueType::ARRAY));
    put(uint64_t{1});
  }
  put(static_cast<uint32_t>(ValueType::U8));
  put(uint64_t{0});
  return out;
}

}  // namespace

std::vector<uint8_t> small_valid_gguf() {
  gguf::Writer writer;
  writer.set("general.architecture", "llama");
  writer.set("general.alignment", uint32_t{32});
  writer.set("test.key_a", uint32_t{1});
  writer.set("test.key_b", uint32_t{2});
  writer.set("test.flag", true);
  writer.set("tokenizer.ggml.tokens", Array{ValueType::STRING, {"a", "bb", "ccc"}});
  writer.set("test.nested", Array{ValueType::ARRAY, {Array{ValueType::STRING, {"x"}},
                                                     Array{ValueType::STRING, {"y", "z"}}}});
  std::vector<uint8_t> f32(64);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<uint8_t>(i);
  writer.add_tensor("a", DType::F32, {4, 4}, f32);
  writer.add_tensor("b", DType::Q8_0, {32}, std::vector<uint8_t>(34, 0x11));
  writer.add_tensor("c", DType::F16, {8}, std::vector<uint8_t>(16, 0x22));
  return writer.to_bytes();
}

std::vector<MalformedGguf> malformed_gguf_corpus() {
  const Patcher p;
  std::vector<MalformedGguf> out;
  const auto add = [&out](std::string name, std::vector<uint8_t> bytes, std::string expected) {
    out.push_back(MalformedGguf{std::move(name), std::move(bytes), std::move(expected)});
  };
  const uint64_t size = p.size();
  const uint64_t after_header = size - 24;

  // Header.
  add("empty_file", {}, "magic at offset 0: file truncated");
  add("truncated_header", p.cut(10), "tensor_count at offset 8: file truncated");
  add("bad_magic", p.with<uint32_t>(0, 0x58554747), "magic at offset 0: not a GGUF file: magic 0x58554747");
  add("version_1", p.with<uint32_t>(4, 1), "version at offset 4: GGUF v1");
  add("version_0", p.with<uint32_t>(4, 0), "version at offset 4: unsupported GGUF version 0");
  add("version_4", p.with<uint32_t>(4, 4), "version at offset 4: unsupported GGUF version 4");
  add("version_big_endian", p.with<uint32_t>(4, 0x03000000), "version at offset 4: big-endian GGUF");
  add("tensor_count_2p63", p.with<uint64_t>(8, kTwo63),
      fmt::format("tensor_count at offset 8: {} tensors cannot fit", kTwo63));
  // n * sizeof(pointer) wraps to 8 in 64 bits: the overflow behind an allocation of 8 bytes.
  add("tensor_count_alloc_overflow", p.with<uint64_t>(8, 0x2000000000000001),
      fmt::format("tensor_count at offset 8: {} tensors cannot fit", 0x2000000000000001));
  const uint64_t too_many_tensors = after_header / 33 + 1;
  add("tensor_count_beyond_file", p.with<uint64_t>(8, too_many_tensors),
      fmt::format("tensor_count at offset 8: {} tensors cannot fit in the {} bytes left", too_many_tensors,
                  after_header));
  add("kv_count_u64_max", p.with<uint64_t>(16, kU64Max),
      fmt::format("metadata_kv_count at offset 16: {} key-value pairs cannot fit", kU64Max));
  const uint64_t too_many_kvs = after_header / 13 + 1;
  add("kv_count_beyond_file", p.with<uint64_t>(16, too_many_kvs),
      fmt::format("metadata_kv_count at offset 16: {} key-value pairs cannot fit", too_many_kvs));

  // Metadata strings.
  add("key_length_2p63", p.with<uint64_t>(24, kTwo63),
      fmt::format("metadata key #0 at offset 24: string length {} exceeds", kTwo63));
  add("key_length_u64_max", p.with<uint64_t>(24, kU64Max),
      fmt::format("metadata key #0 at offset 24: string length {} exceeds", kU64Max));
  add("key_length_past_end", p.with<uint64_t>(24, size - 32 + 1),
      fmt::format("metadata key #0 at offset 24: string length {} exceeds the {} bytes left", size - 31, size - 32));
  const uint64_t arch_value = p.value_at("general.architecture");
  add("string_value_length_2p63", p.with<uint64_t>(arch_value, kTwo63),
      fmt::format("value of 'general.architecture' at offset {}: string length {} exceeds", arch_value, kTwo63));
  {
    // Counts lowered to what the cut file could hold, so the cut itself is what gets reported.
    auto bytes = p.cut(arch_value + 3);
    const uint64_t no_tensors = 0;
    const uint64_t one_kv = 1;
    std::memcpy(bytes.data() + 8, &no_tensors, 8);
    std::memcpy(bytes.data() + 16, &one_kv, 8);
    add("truncated_in_string_value", std::move(bytes),
        fmt::format("value of 'general.architecture' at offset {}: file truncated", arch_value));
  }

  // Metadata keys and types.
  const uint64_t key_b = p.key_at("test.key_b");
  add("duplicate_key", p.with<uint8_t>(key_b + 8 + 9, 'a'),
      fmt::format("metadata key 'test.key_a' at offset {}: duplicate key", key_b));
  const uint64_t type_a = p.value_type_at("test.key_a");
  add("value_type_13", p.with<uint32_t>(type_a, 13),
      fmt::format("value type of 'test.key_a' at offset {}: invalid value type 13", type_a));
  add("value_type_u32_max", p.with<uint32_t>(type_a, 0xFFFFFFFF),
      fmt::format("value type of 'test.key_a' at offset {}: invalid value type 4294967295", type_a));
  const uint64_t flag = p.value_at("test.flag");
  add("bool_value_2", p.with<uint8_t>(flag, 2), fmt::format("value of 'test.flag' at offset {}: bool value 2", flag));

  // Arrays.
  const uint64_t tokens = p.value_at("tokenizer.ggml.tokens");
  add("array_element_type_invalid", p.with<uint32_t>(tokens, 13),
      fmt::format("value of 'tokenizer.ggml.tokens' element type at offset {}: invalid value type 13", tokens));
  // count * 8 wraps to 0 in 64 bits.
  add("array_count_mul_overflow", p.with<uint64_t>(tokens + 4, uint64_t{1} << 61),
      fmt::format("value of 'tokenizer.ggml.tokens' count at offset {}: {} elements of type string cannot fit",
                  tokens + 4, uint64_t{1} << 61));
  const uint64_t left_after_count = size - (tokens + 12);
  add("array_count_past_end", p.with<uint64_t>(tokens + 4, left_after_count / 8 + 1),
      fmt::format("value of 'tokenizer.ggml.tokens' count at offset {}: {} elements of type string cannot fit in "
                  "the {} bytes left",
                  tokens + 4, left_after_count / 8 + 1, left_after_count));
  const uint64_t inner = p.value_at("test.nested") + 12;  // the first inner array
  add("nested_array_element_type_invalid", p.with<uint32_t>(inner, 99),
      fmt::format("value of 'test.nested' element type at offset {}: invalid value type 99", inner));
  add("nested_array_count_huge", p.with<uint64_t>(inner + 4, uint64_t{1} << 62),
      fmt::format("value of 'test.nested' count at offset {}: {} elements", inner + 4, uint64_t{1} << 62));
  add("arrays_nested_too_deep", nested_array_file(gguf::kMaxArrayDepth + 1),
      fmt::format("value of 'deep' at offset {}: arrays nested deeper than {}", 40 + 12 * gguf::kMaxArrayDepth,
                  gguf::kMaxArrayDepth));

  // general.alignment.
  const uint64_t align_key = p.key_at("general.alignment");
  const uint64_t align_value = p.value_at("general.alignment");
  add("alignment_type_i32", p.with<uint32_t>(p.value_type_at("general.alignment"), 5),
      fmt::format("'general.alignment' at offset {}: type is i32, expected u32", align_key));
  add("alignment_zero", p.with<uint32_t>(align_value, 0),
      fmt::format("'general.alignment' at offset {}: 0 is not a power of two", align_key));
  add("alignment_48", p.with<uint32_t>(align_value, 48),
      fmt::format("'general.alignment' at offset {}: 48 is not a power of two", align_key));
  add("alignment_2p31", p.with<uint32_t>(align_value, 0x80000000),
      fmt::format("'general.alignment' at offset {}: 2147483648 is not a power of two between 1 and {}", align_key,
                  gguf::kMaxAlignment));

  // Tensor names.
  const uint64_t info_a = p.info_at("a");
  add("tensor_name_length_2p63", p.with<uint64_t>(info_a, kTwo63),
      fmt::format("tensor #0 name at offset {}: string length {} exceeds", info_a, kTwo63));
  add("tensor_name_empty", p.spliced(info_a, 9, encoded_string("")),
      fmt::format("tensor #0 name at offset {}: empty tensor name", info_a));
  add("tensor_name_64_bytes", p.spliced(info_a, 9, encoded_string(std::string(64, 'x'))),
      fmt::format("tensor #0 name at offset {}: name is 64 bytes long, the limit is 63", info_a));
  const uint64_t info_b = p.info_at("b");
  add("duplicate_tensor_name", p.with<uint8_t>(info_b + 8, 'a'),
      fmt::format("tensor #1 name at offset {}: duplicate tensor name 'a'", info_b));

  // Shapes.
  const uint64_t dims_a = p.n_dims_at("a");
  add("n_dims_0", p.with<uint32_t>(dims_a, 0),
      fmt::format("n_dims of tensor 'a' at offset {}: 0 dimensions, expected 1 to 4", dims_a));
  add("n_dims_5", p.with<uint32_t>(dims_a, 5),
      fmt::format("n_dims of tensor 'a' at offset {}: 5 dimensions, expected 1 to 4", dims_a));
  add("n_dims_u32_max", p.with<uint32_t>(dims_a, 0xFFFFFFFF),
      fmt::format("n_dims of tensor 'a' at offset {}: 4294967295 dimensions", dims_a));
  add("ne_zero", p.with<int64_t>(p.ne_at("a", 1), 0),
      fmt::format("ne[1] of tensor 'a' at offset {}: dimension 0 is not positive", p.ne_at("a", 1)));
  add("ne_negative", p.with<int64_t>(p.ne_at("a", 0), -1),
      fmt::format("ne[0] of tensor 'a' at offset {}: dimension -1 is not positive", p.ne_at("a", 0)));
  {
    auto bytes = p.with<int64_t>(p.ne_at("a", 0), int64_t{1} << 32);
    std::memcpy(bytes.data() + p.ne_at("a", 1), &bytes[p.ne_at("a", 0)], 8);
    add("exabyte_element_count_overflow", std::move(bytes),
        fmt::format("ne[1] of tensor 'a' at offset {}: element count overflows int64", p.ne_at("a", 1)));
  }
  {
    auto bytes = p.with<int64_t>(p.ne_at("a", 0), int64_t{1} << 62);
    const int64_t one = 1;
    std::memcpy(bytes.data() + p.ne_at("a", 1), &one, 8);
    add("exabyte_byte_size_overflow", std::move(bytes),
        fmt::format("type of tensor 'a' at offset {}: byte size of f32 [4611686018427387904, 1] overflows",
                    p.type_at("a")));
  }
  {
    auto bytes = p.with<int64_t>(p.ne_at("a", 0), int64_t{1} << 30);
    std::memcpy(bytes.data() + p.ne_at("a", 1), &bytes[p.ne_at("a", 0)], 8);
    add("exabyte_tensor_past_end", std::move(bytes),
        fmt::format("offset of tensor 'a' at offset {}: data [", p.offset_at("a")));
  }

  // Types.
  const uint64_t type_b = p.type_at("b");
  for (uint32_t id : {4u, 31u, 0xFFFFFFFFu}) {
    add(fmt::format("tensor_type_{}", id), p.with<uint32_t>(type_b, id),
        fmt::format("type of tensor 'b' at offset {}: unknown tensor type {}", type_b, id));
  }
  add("block_size_misfit", p.with<uint32_t>(p.type_at("a"), static_cast<uint32_t>(DType::Q8_0)),
      fmt::format("type of tensor 'a' at offset {}: ne[0] = 4 is not a multiple of the q8_0 block size 32",
                  p.type_at("a")));
  add("truncated_in_tensor_info", p.cut(type_b + 2), fmt::format("type of tensor 'b' at offset {}: file truncated", type_b));

  // Offsets and sizes.
  const uint64_t offset_b = p.offset_at("b");
  const uint64_t offset_c = p.offset_at("c");
  add("offset_unaligned", p.with<uint64_t>(offset_b, 65),
      fmt::format("offset of tensor 'b' at offset {}: data offset 65 is not a multiple of the alignment 32", offset_b));
  add("offset_past_end", p.with<uint64_t>(offset_b, uint64_t{1} << 40),
      fmt::format("offset of tensor 'b' at offset {}: data [{} + {}, 34 bytes) lies outside the file", offset_b,
                  p.file().data_offset(), uint64_t{1} << 40));
  add("offset_plus_size_wraps", p.with<uint64_t>(offset_b, kU64Max - 31),
      fmt::format("offset of tensor 'b' at offset {}: data [{} + {}, 34 bytes) lies outside the file", offset_b,
                  p.file().data_offset(), kU64Max - 31));
  add("size_past_end", p.with<int64_t>(p.ne_at("c", 0), 24),
      fmt::format("offset of tensor 'c' at offset {}: data [{} + 128, 48 bytes) lies outside the file ({} bytes)",
                  offset_c, p.file().data_offset(), size));
  add("truncated_in_data", p.cut(p.file().data_offset() + 100),
      fmt::format("offset of tensor 'c' at offset {}: data [{} + 128, 16 bytes) lies outside the file", offset_c,
                  p.file().data_offset()));
  add("overlap_same_offset", p.with<uint64_t>(offset_b, 0),
      fmt::format("offset of tensor 'b' at offset {}: data at 0 overlaps tensor 'a' (offset 0, 64 bytes)", offset_b));
  add("overlap_partial", p.with<uint64_t>(offset_b, 32),
      fmt::format("offset of tensor 'b' at offset {}: data at 32 overlaps tensor 'a'", offset_b));
  add("overlap_next_tensor", p.with<uint64_t>(offset_c, 64),
      fmt::format("offset of tensor 'c' at offset {}: data at 64 overlaps tensor 'b'", offset_c));
  return out;
}

void write_gguf_corpus(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const auto write = [&dir](const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream out(dir / (name + ".gguf"), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw_error("cannot write '{}'", (dir / (name + ".gguf")).string());
  };
  write("valid", small_valid_gguf());
  for (const MalformedGguf& c : malformed_gguf_corpus()) write(c.name, c.bytes);
}

}  // namespace okapi::test
