// The writer: byte-identical round trips of every shared GGUF file, and writer -> reader round
// trips of every value type.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "support/golden_files.hpp"
#include "support/paths.hpp"

namespace okapi::gguf {
namespace {

namespace fs = std::filesystem;

Writer copy_of(const File& file) {
  Writer writer;
  writer.copy_metadata(file);
  for (const TensorInfo& t : file.tensors()) writer.add_tensor_view(t.name, t.type, t.shape, t.bytes());
  return writer;
}

TEST(GgufWriter, ReproducesEverySharedFileByteForByte) {
  OKAPI_REQUIRE_SHARED();
  const auto files = test::shared_gguf_files();
  ASSERT_GE(files.size(), 40u);
  for (const auto& path : files) {
    SCOPED_TRACE(path.string());
    const File file = File::open(path);
    const std::vector<uint8_t> bytes = copy_of(file).to_bytes();
    ASSERT_EQ(bytes.size(), file.file_size());
    const auto original = file.bytes();
    const auto mismatch = std::mismatch(bytes.begin(), bytes.end(), original.begin());
    EXPECT_TRUE(mismatch.first == bytes.end()) << "first difference at byte " << (mismatch.first - bytes.begin());
  }
}

TEST(GgufWriter, WritesAtomicallyToDisk) {
  OKAPI_REQUIRE_SHARED();
  const File file = File::open(okapi::shared_dir() / "models" / "stories260K.gguf");
  const fs::path dir = okapi::test::make_temp_dir("gguf-writer");
  const fs::path out = dir / "copy.gguf";
  copy_of(file).write(out);
  const File copy = File::open(out);
  ASSERT_EQ(copy.file_size(), file.file_size());
  EXPECT_TRUE(std::equal(copy.bytes().begin(), copy.bytes().end(), file.bytes().begin()));
  // Only the destination remains: no temp file left beside it.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

Array array_of(ValueType type, std::vector<Value> items) { return Array{type, std::move(items)}; }

TEST(GgufWriter, RoundTripsEveryValueType) {
  Writer writer;
  writer.set("u8", uint8_t{200});
  writer.set("i8", int8_t{-100});
  writer.set("u16", uint16_t{60000});
  writer.set("i16", int16_t{-30000});
  writer.set("u32", uint32_t{4000000000u});
  writer.set("i32", int32_t{-2000000000});
  writer.set("f32", 1.5f);
  writer.set("bool", true);
  writer.set("string", std::string("héllo \"world\""));
  writer.set("empty_string", std::string());
  writer.set("u64", std::numeric_limits<uint64_t>::max());
  writer.set("i64", std::numeric_limits<int64_t>::min());
  writer.set("f64", -0.125);
  writer.set("empty_array", array_of(ValueType::F32, {}));
  writer.set("strings", array_of(ValueType::STRING, {"a", "", "ccc"}));
  writer.set("nested", array_of(ValueType::ARRAY, {array_of(ValueType::STRING, {"x", "y"}),
                                                   array_of(ValueType::STRING, {}),
                                                   array_of(ValueType::I32, {int32_t{7}})}));
  writer.set("floats", array_of(ValueType::F32, {1.0f, -2.0f}));
  writer.set("ints", array_of(ValueType::I64, {int64_t{-5}, int64_t{6}}));

  const std::vector<uint8_t> bytes = writer.to_bytes();
  const File file = File::parse(bytes);
  EXPECT_EQ(file.version(), 3u);
  ASSERT_EQ(file.metadata().size(), 18u);
  EXPECT_EQ(file.metadata()[0].key, "u8");
  EXPECT_EQ(file.metadata()[17].key, "ints");
  for (const KeyValue& kv : file.metadata()) {
    SCOPED_TRACE(kv.key);
    const Value* want = writer.find(kv.key);
    ASSERT_NE(want, nullptr);
    EXPECT_EQ(kv.value.type(), want->type());
    EXPECT_EQ(kv.value.to_display(100), want->to_display(100));
  }
  EXPECT_EQ(file.at("u8").as_uint(), 200u);
  EXPECT_EQ(file.at("i8").as_int(), -100);
  EXPECT_EQ(file.at("u32").as_int(), 4000000000);
  EXPECT_EQ(file.at("f32").as_double(), 1.5);
  EXPECT_TRUE(file.at("bool").as_bool());
  EXPECT_EQ(file.at("string").as_string(), "héllo \"world\"");
  EXPECT_EQ(file.at("empty_string").as_string(), "");
  EXPECT_EQ(file.at("u64").as_uint(), std::numeric_limits<uint64_t>::max());
  EXPECT_THROW((void)file.at("u64").as_int(), Error);
  EXPECT_EQ(file.at("i64").as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_THROW((void)file.at("i64").as_uint(), Error);
  EXPECT_EQ(file.at("f64").as_double(), -0.125);
  EXPECT_TRUE(file.at("empty_array").as_array().items.empty());
  EXPECT_EQ(file.at("empty_array").as_array().element_type, ValueType::F32);
  EXPECT_EQ(file.at("strings").as_string_array(), (std::vector<std::string>{"a", "", "ccc"}));
  const Array& nested = file.at("nested").as_array();
  ASSERT_EQ(nested.items.size(), 3u);
  EXPECT_EQ(nested.items[0].as_string_array(), (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(nested.items[1].as_string_array().empty());
  EXPECT_EQ(nested.items[2].as_int_array(), (std::vector<int64_t>{7}));
  EXPECT_EQ(file.at("floats").as_float_array(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(file.at("ints").as_int_array(), (std::vector<int64_t>{-5, 6}));
  EXPECT_THROW((void)file.at("string").as_int(), Error);
  EXPECT_THROW((void)file.at("missing"), Error);
  EXPECT_EQ(file.find("missing"), nullptr);
  // Written again, the parsed file gives the same bytes.
  Writer again;
  again.copy_metadata(file);
  EXPECT_EQ(again.to_bytes(), bytes);
}

TEST(GgufWriter, LaysOutTensorsAlignedAndPadded) {
  Writer writer;
  writer.set("general.architecture", "test");
  writer.add_tensor("a", DType::F32, {3}, std::vector<uint8_t>(12, 0xAA));
  writer.add_tensor("b", DType::Q8_0, {32, 2}, std::vector<uint8_t>(68, 0xBB));
  writer.add_tensor("c", DType::F16, {5}, std::vector<uint8_t>(10, 0xCC));
  const std::vector<uint8_t> bytes = writer.to_bytes();
  const File file = File::parse(bytes);
  EXPECT_EQ(file.alignment(), 32u);
  EXPECT_EQ(file.data_offset() % 32, 0u);
  ASSERT_EQ(file.tensors().size(), 3u);
  EXPECT_EQ(file.tensors()[0].offset, 0u);
  EXPECT_EQ(file.tensors()[1].offset, 32u);
  EXPECT_EQ(file.tensors()[2].offset, 128u);
  EXPECT_EQ(file.tensors()[1].n_rows(), 2);
  EXPECT_EQ(bytes.size(), file.data_offset() + 160u);  // the last tensor is padded too
  EXPECT_EQ(file.tensor("b").bytes()[67], 0xBB);
  EXPECT_EQ(bytes[file.data_offset() + 12], 0);  // zero padding
  EXPECT_EQ(file.architecture(), "test");
}

TEST(GgufWriter, HonoursGeneralAlignment) {
  Writer writer;
  writer.set("general.alignment", uint32_t{64});
  writer.add_tensor("a", DType::F32, {3}, std::vector<uint8_t>(12, 1));
  writer.add_tensor("b", DType::F32, {3}, std::vector<uint8_t>(12, 2));
  const File file = File::parse(writer.to_bytes());
  EXPECT_EQ(file.alignment(), 64u);
  EXPECT_EQ(file.data_offset() % 64, 0u);
  EXPECT_EQ(file.tensors()[1].offset, 64u);
}

TEST(GgufWriter, RejectsWhatTheReaderWouldReject) {
  const auto fails = [](auto&& build) {
    Writer writer;
    build(writer);
    EXPECT_THROW((void)writer.to_bytes(), Error);
  };
  fails([](Writer& w) { w.add_tensor("a", DType::F32, {3}, std::vector<uint8_t>(11)); });
  fails([](Writer& w) { w.add_tensor("a", DType::Q4_0, {16}, std::vector<uint8_t>(9)); });
  fails([](Writer& w) { w.add_tensor("", DType::F32, {1}, std::vector<uint8_t>(4)); });
  fails([](Writer& w) { w.add_tensor(std::string(64, 'x'), DType::F32, {1}, std::vector<uint8_t>(4)); });
  fails([](Writer& w) { w.add_tensor("a", DType::F32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)); });
  fails([](Writer& w) {
    w.add_tensor("a", DType::F32, {1}, std::vector<uint8_t>(4));
    w.add_tensor("a", DType::F32, {1}, std::vector<uint8_t>(4));
  });
  fails([](Writer& w) { w.set("general.alignment", uint32_t{48}); });
  fails([](Writer& w) { w.set("general.alignment", uint64_t{32}); });
  fails([](Writer& w) { w.set("mixed", Array{ValueType::STRING, {Value("a"), Value(int32_t{1})}}); });
}

TEST(GgufWriter, SetReplacesInPlaceAndRemoveDeletes) {
  Writer writer;
  writer.set("a", int32_t{1});
  writer.set("b", int32_t{2});
  writer.set("a", "now a string");
  writer.remove("b");
  writer.set("c", 3.0f);
  const File file = File::parse(writer.to_bytes());
  ASSERT_EQ(file.metadata().size(), 2u);
  EXPECT_EQ(file.metadata()[0].key, "a");
  EXPECT_EQ(file.metadata()[0].value.as_string(), "now a string");
  EXPECT_EQ(file.metadata()[1].key, "c");
}

}  // namespace
}  // namespace okapi::gguf
