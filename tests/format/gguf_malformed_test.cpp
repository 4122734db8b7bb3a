// Hostile and broken files: each is rejected with an okapi::Error naming the field, its offset
// and the offending value, and none crashes (run under ASan/UBSan in the sanitizer build).
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "support/malformed_gguf.hpp"
#include "support/paths.hpp"

namespace okapi::gguf {
namespace {

std::string parse_error(std::span<const uint8_t> bytes) {
  try {
    (void)File::parse(bytes, "test.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GgufMalformed, TheValidBaseFileParses) {
  const auto bytes = test::small_valid_gguf();
  const File file = File::parse(bytes);
  EXPECT_EQ(file.metadata().size(), 7u);
  EXPECT_EQ(file.tensors().size(), 3u);
  EXPECT_EQ(file.at("test.nested").as_array().items[1].as_string_array(), (std::vector<std::string>{"y", "z"}));
}

TEST(GgufMalformed, EveryCorpusCaseIsRejectedWithItsFieldAndOffset) {
  const auto corpus = test::malformed_gguf_corpus();
  EXPECT_GE(corpus.size(), 55u);
  for (const auto& c : corpus) {
    SCOPED_TRACE(c.name);
    const std::string message = parse_error(c.bytes);
    ASSERT_FALSE(message.empty()) << "accepted";
    EXPECT_NE(message.find(c.expected_error), std::string::npos)
        << "message:  " << message << "\nexpected: " << c.expected_error;
    EXPECT_EQ(message.rfind("test.gguf: ", 0), 0u) << message;  // names the file
  }
}

TEST(GgufMalformed, CorpusNamesAreUnique) {
  std::set<std::string> names;
  for (const auto& c : test::malformed_gguf_corpus()) EXPECT_TRUE(names.insert(c.name).second) << c.name;
}

// Cut a valid file at every byte: each prefix that loses part of a tensor's data or anything
// before it is rejected; only the trailing padding after the last tensor may go.
TEST(GgufMalformed, EveryTruncationIsRejected) {
  const auto bytes = test::small_valid_gguf();
  const File file = File::parse(bytes);
  uint64_t data_end = 0;
  for (const TensorInfo& t : file.tensors()) data_end = std::max(data_end, t.file_offset + t.nbytes);
  ASSERT_LT(data_end, bytes.size());
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    SCOPED_TRACE(cut);
    const std::string message = parse_error(std::span(bytes).first(cut));
    if (cut < data_end) {
      ASSERT_FALSE(message.empty());
      EXPECT_TRUE(message.find("file truncated") != std::string::npos ||
                  message.find("bytes left") != std::string::npos ||  // a count or length too large
                  message.find("lies outside the file") != std::string::npos)
          << message;
      EXPECT_NE(message.find(" at offset "), std::string::npos) << message;
    } else {
      EXPECT_EQ(message, "");
    }
  }
}

TEST(GgufMalformed, VersionTwoIsAccepted) {
  auto bytes = test::small_valid_gguf();
  bytes[4] = 2;
  EXPECT_EQ(File::parse(bytes).version(), 2u);
}

TEST(GgufMalformed, ArraysNestedUpToTheLimitAreAccepted) {
  Value value = Array{ValueType::U8, {uint8_t{7}}};
  for (int depth = 1; depth < kMaxArrayDepth; ++depth) value = Array{ValueType::ARRAY, {value}};
  Writer writer;
  writer.set("deep", value);
  const auto bytes = writer.to_bytes();
  const File file = File::parse(bytes);
  const Value* v = &file.at("deep");
  for (int depth = 1; depth < kMaxArrayDepth; ++depth) v = &v->as_array().items.at(0);
  EXPECT_EQ(v->as_int_array(), (std::vector<int64_t>{7}));
  // One level more: the writer refuses it.
  Writer deeper;
  deeper.set("deep", Array{ValueType::ARRAY, {value}});
  EXPECT_THROW((void)deeper.to_bytes(), Error);
}

TEST(GgufMalformed, OpenReportsMissingFiles) {
  EXPECT_THROW((void)File::open("/nonexistent/okapi.gguf"), Error);
}

TEST(GgufMalformed, CorpusCanBeWrittenToADirectory) {
  const auto dir = test::make_temp_dir("gguf-corpus");
  test::write_gguf_corpus(dir / "corpus");
  const size_t files = static_cast<size_t>(
      std::distance(std::filesystem::directory_iterator(dir / "corpus"), std::filesystem::directory_iterator()));
  EXPECT_EQ(files, test::malformed_gguf_corpus().size() + 1);
  EXPECT_NO_THROW((void)File::open(dir / "corpus" / "valid.gguf"));
  EXPECT_THROW((void)File::open(dir / "corpus" / "bad_magic.gguf"), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace okapi::gguf
