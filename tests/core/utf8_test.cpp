// UTF-8 repair against a straightforward reference decoder, on every code point and on seeded
// random byte strings full of malformed sequences; and dump_json's record of what it repaired.
#include "core/utf8.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "core/json_output.hpp"
#include "support/json_repairs.hpp"
#include "support/random_data.hpp"
#include "tokenizer/unicode.hpp"

namespace okapi {
namespace {

// The shortest encoding of a code point (the only well-formed one), by the tokenizer's encoder.
std::string canonical_utf8(uint32_t cp) {
  std::string s;
  tokenizer::append_utf8(s, cp);
  return s;
}

// The value the bit patterns of `bytes` spell (lead 0xxxxxxx / 110xxxxx / 1110xxxx / 11110xxx of
// the right length, then 10xxxxxx), whether or not that is a well-formed encoding.
std::optional<uint32_t> pattern_value(std::string_view bytes) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])); };
  const size_t n = bytes.size();
  uint32_t cp = 0;
  if (n == 1 && b(0) < 0x80) return b(0);
  if (n == 2 && (b(0) & 0xE0) == 0xC0) cp = b(0) & 0x1F;
  else if (n == 3 && (b(0) & 0xF0) == 0xE0) cp = b(0) & 0x0F;
  else if (n == 4 && (b(0) & 0xF8) == 0xF0) cp = b(0) & 0x07;
  else return std::nullopt;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  return cp;
}

// Reference: a sequence is kept when its value is a scalar value (not a surrogate, at most
// U+10FFFF) whose shortest encoding is exactly those bytes; any other byte becomes U+FFFD.
std::string reference_repair(std::string_view text) {
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    size_t kept = 0;
    for (size_t n = 1; n <= 4 && pos + n <= text.size() && kept == 0; ++n) {
      const std::string_view candidate = text.substr(pos, n);
      const auto cp = pattern_value(candidate);
      if (cp && (*cp < 0xD800 || *cp > 0xDFFF) && *cp <= 0x10FFFF && canonical_utf8(*cp) == candidate) kept = n;
    }
    out += kept > 0 ? std::string(text.substr(pos, kept)) : std::string("\xEF\xBF\xBD");
    pos += kept > 0 ? kept : 1;
  }
  return out;
}

void expect_matches_reference(const std::string& text) {
  const std::string want = reference_repair(text);
  bool repaired = false;
  EXPECT_EQ(repair_utf8(text, &repaired), want) << hex_bytes(text);
  EXPECT_EQ(repaired, want != text) << hex_bytes(text);
  EXPECT_EQ(is_valid_utf8(text), want == text) << hex_bytes(text);
}

TEST(Utf8, EveryCodePointAndEveryShortByteStringMatchTheReference) {
  for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x10000 ? 1 : 61)) {
    const std::string s = canonical_utf8(cp);
    EXPECT_EQ(is_valid_utf8(s), cp < 0xD800 || cp > 0xDFFF) << std::hex << cp;
  }
  for (uint32_t a = 0; a < 256; ++a) {
    expect_matches_reference(std::string(1, static_cast<char>(a)));
    for (uint32_t b = 0; b < 256; ++b) expect_matches_reference({static_cast<char>(a), static_cast<char>(b)});
  }
}

TEST(Utf8, RandomMalformedStringsMatchTheReference) {
  std::mt19937 rng(20240611);
  for (int i = 0; i < 20000; ++i) expect_matches_reference(test::utf8_torture_bytes(rng, 12));
}

TEST(Utf8, KnownCases) {
  EXPECT_EQ(repair_utf8("a\xC3"), "a\xEF\xBF\xBD");                        // cut mid-character
  EXPECT_EQ(repair_utf8("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");          // overlong NUL
  EXPECT_EQ(repair_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(repair_utf8(std::string("x\0y", 3)), std::string("x\0y", 3));  // NUL is valid UTF-8
  EXPECT_EQ(repair_utf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(hex_bytes(std::string_view("\x00\xff\x10", 3)), "00ff10");
}

TEST(DumpJson, ValidRecordsAreDumpedUnchanged) {
  nlohmann::ordered_json record = {{"text", "caf\xC3\xA9"}, {"list", {"a", 1, nullptr}}};
  EXPECT_EQ(dump_json(record, 2), record.dump(2));
}

TEST(DumpJson, RepairsEveryStringAndListsItsBytes) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    const std::string a = test::utf8_torture_bytes(rng, 8), b = test::utf8_torture_bytes(rng, 8);
    const std::string c = test::utf8_torture_bytes(rng, 8);
    nlohmann::ordered_json record;
    record["text"] = a;
    record["nested"]["a/b~c"] = {b, 3, c};
    const nlohmann::ordered_json back = nlohmann::ordered_json::parse(dump_json(record, i % 2 == 0 ? -1 : 2));
    const auto repairs = test::checked_repairs(back);
    EXPECT_EQ(test::original_string(back, repairs, "/text"), a);
    EXPECT_EQ(test::original_string(back, repairs, "/nested/a~1b~0c/0"), b);
    EXPECT_EQ(test::original_string(back, repairs, "/nested/a~1b~0c/2"), c);
    const size_t bad = !is_valid_utf8(a) + !is_valid_utf8(b) + !is_valid_utf8(c);
    EXPECT_EQ(repairs.size(), bad);
    EXPECT_EQ(back.contains(kInvalidUtf8Field), bad > 0);
  }
}

}  // namespace
}  // namespace okapi
