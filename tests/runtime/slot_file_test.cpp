// Slot files (runtime/slot_file.hpp) and the KV cells under them (KvStore::save_cells /
// load_cells): a round trip gives back the same attention scores and values, ring layers
// included; a file of another shape, cache type or model, a truncated or corrupt file, and a
// legacy plain token list are each read (or refused) as the format says, never past its end.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kv/cache_type.hpp"
#include "kv/kv_store.hpp"
#include "runtime/slot_file.hpp"
#include "support/cache_types.hpp"
#include "support/paths.hpp"

namespace okapi::runtime {
namespace {

using tokenizer::TokenId;

constexpr uint64_t kFingerprint = 0x1234;
constexpr int64_t kVocab = 512;

kv::KvShape shape(std::vector<int64_t> window = {}) {
  kv::KvShape s{3, 2, 8, 6, 600};
  s.window = std::move(window);
  s.batch = 4;
  return s;
}

std::unique_ptr<kv::KvStore> store(const kv::KvShape& s, const char* type = "f16") {
  return kv::make_store(s, test::cache_types(type, type), isa());
}

// Writes n positions of random K/V.
void fill(kv::KvStore& kv, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  const kv::KvShape& s = kv.shape();
  std::vector<float> k(static_cast<size_t>(s.n_head_kv * s.head_dim_k)), v(static_cast<size_t>(s.n_head_kv * s.head_dim_v));
  for (int64_t p = 0; p < n; ++p)
    for (int64_t l = 0; l < s.n_layer; ++l) {
      for (auto& x : k) x = d(rng);
      for (auto& x : v) x = d(rng);
      kv.append(l, p, k.data(), v.data());
    }
}

// Scores and value sums of a query over the positions [first, n) every layer still holds.
std::vector<float> readout(const kv::KvStore& kv, int64_t n) {
  const kv::KvShape& s = kv.shape();
  std::vector<float> q(static_cast<size_t>(s.head_dim_k), 0.5f), out;
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const int64_t w = s.window_of(l);
    const int64_t first = w > 0 ? std::max<int64_t>(0, n - w + 1) : 0;
    for (int64_t h = 0; h < s.n_head_kv; ++h) {
      std::vector<float> scores(static_cast<size_t>(n - first)), values(static_cast<size_t>(s.head_dim_v));
      kv.scores(l, h, q.data(), first, n, scores.data());
      std::vector<float> probs(scores.size(), 1.0f / static_cast<float>(scores.size()));
      kv.accumulate_values(l, h, probs.data(), first, n, values.data());
      out.insert(out.end(), scores.begin(), scores.end());
      out.insert(out.end(), values.begin(), values.end());
    }
  }
  return out;
}

std::vector<TokenId> tokens(int64_t n) {
  std::vector<TokenId> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<TokenId>((i * 37) % kVocab));
  return t;
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void write_all(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(SlotFile, RoundTripGivesTheSameCells) {
  const auto dir = test::make_temp_dir("slot_file");
  for (const char* type : {"f16", "f32"}) {
    for (const auto& window : {std::vector<int64_t>{}, std::vector<int64_t>{0, 5, 0}}) {
      auto saved = store(shape(window), type);
      const int64_t n = 300;  // past the ring of the windowed layer (256 cells)
      fill(*saved, n, 1);
      const auto path = dir / "a.bin";
      const SlotFileStats written = write_slot_file(path, tokens(n), *saved, kFingerprint, kVocab);
      EXPECT_EQ(written.tokens, n);
      EXPECT_EQ(written.bytes, std::filesystem::file_size(path));

      auto fresh = store(shape(window), type);
      fill(*fresh, 20, 2);  // whatever was there is replaced
      SlotFileContents contents = read_slot_file(path, *fresh, kFingerprint, kVocab);
      EXPECT_EQ(contents.tokens, tokens(n));
      fresh->truncate(0);
      fresh->load_cells(n, contents.cells);
      EXPECT_EQ(fresh->kept_prefix(n), n) << type;
      EXPECT_EQ(readout(*fresh, n), readout(*saved, n)) << type << " windowed " << !window.empty();
    }
  }
}

TEST(SlotFile, RefusesAnotherModelShapeOrCacheType) {
  const auto dir = test::make_temp_dir("slot_file");
  auto saved = store(shape());
  fill(*saved, 10, 1);
  const auto path = dir / "a.bin";
  write_slot_file(path, tokens(10), *saved, kFingerprint, kVocab);
  EXPECT_THROW(read_slot_file(path, *store(shape()), kFingerprint + 1, kVocab), Error);  // another model file
  EXPECT_THROW(read_slot_file(path, *store(shape()), kFingerprint, kVocab + 1), Error);
  EXPECT_THROW(read_slot_file(path, *store(shape(), "f32"), kFingerprint, kVocab), Error);
  kv::KvShape wider = shape();
  wider.head_dim_k = 16;
  EXPECT_THROW(read_slot_file(path, *store(wider), kFingerprint, kVocab), Error);
  kv::KvShape shorter = shape();
  shorter.n_ctx = 8;  // 10 tokens do not fit
  EXPECT_THROW(read_slot_file(path, *store(shorter), kFingerprint, kVocab), Error);
  EXPECT_NO_THROW(read_slot_file(path, *store(shape()), kFingerprint, kVocab));
}

TEST(SlotFile, EveryTruncationAndCorruptionIsRefused) {
  const auto dir = test::make_temp_dir("slot_file");
  auto saved = store(shape());
  fill(*saved, 6, 1);
  const auto path = dir / "a.bin";
  write_slot_file(path, tokens(6), *saved, kFingerprint, kVocab);
  const std::string good = read_all(path);
  auto fresh = store(shape());
  const auto bad = dir / "bad.bin";
  for (size_t cut = 0; cut < good.size(); cut += 7) {
    write_all(bad, good.substr(0, cut));
    EXPECT_THROW(read_slot_file(bad, *fresh, kFingerprint, kVocab), Error) << "cut at " << cut;
  }
  for (size_t at = 0; at < good.size(); at += 5) {
    std::string flipped = good;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x5a);
    write_all(bad, flipped);
    // A flipped byte is refused, or (in a token id) read as another valid token: never past the end.
    try {
      const SlotFileContents c = read_slot_file(bad, *fresh, kFingerprint, kVocab);
      EXPECT_GE(at, 24u) << "a header byte flipped unnoticed";
      EXPECT_LT(at, 24u + 6 * 4) << "only a token id may change unnoticed";
      fresh->load_cells(static_cast<int64_t>(c.tokens.size()), c.cells);
    } catch (const Error&) {
    }
  }
  write_all(bad, good + "x");
  EXPECT_THROW(read_slot_file(bad, *fresh, kFingerprint, kVocab), Error);
  // load_cells checks sizes itself too.
  SlotFileContents c = read_slot_file(path, *fresh, kFingerprint, kVocab);
  EXPECT_THROW(fresh->load_cells(7, c.cells), Error);
  EXPECT_THROW(fresh->load_cells(6, c.cells.substr(0, c.cells.size() - 1)), Error);
}

TEST(SlotFile, ReadsLlamaServersPlainTokenList) {
  // Older llama-server files hold a plain token list as the payload: rewritten as the suite does.
  const auto dir = test::make_temp_dir("slot_file");
  auto saved = store(shape());
  fill(*saved, 5, 1);
  const auto path = dir / "a.bin";
  write_slot_file(path, tokens(5), *saved, kFingerprint, kVocab);
  std::string data = read_all(path);
  uint32_t words = 0;
  std::memcpy(&words, data.data() + 8, 4);
  ASSERT_EQ(words, 5u + 4);
  const std::string plain = data.substr(0, 12) + data.substr(24, 5 * 4) + data.substr(12 + words * 4);
  std::string legacy = plain;
  const uint32_t n = 5;
  std::memcpy(legacy.data() + 8, &n, 4);
  write_all(path, legacy);
  const SlotFileContents c = read_slot_file(path, *store(shape()), kFingerprint, kVocab);
  EXPECT_EQ(c.tokens, tokens(5));
}

TEST(SlotFile, StoresThatCannotSaveSayWhy) {
  kv::KvShape s{2, 2, 32, 32, 64};  // q8_0 blocks are 32 values
  auto codec = kv::make_store(s, test::cache_types("q8_0", "q8_0"), isa());
  if (codec->can_save_cells()) GTEST_SKIP() << "q8_0 stores save their cells";
  const auto dir = test::make_temp_dir("slot_file");
  EXPECT_THROW(write_slot_file(dir / "a.bin", tokens(1), *codec, kFingerprint, kVocab), Error);
  EXPECT_FALSE(std::filesystem::exists(dir / "a.bin"));
}

}  // namespace
}  // namespace okapi::runtime
