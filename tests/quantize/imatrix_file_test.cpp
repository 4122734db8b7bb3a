// Importance-matrix files: okapi's reader and writers against llama-imatrix's own files (GGUF and
// legacy .dat), llama-imatrix reading okapi's files back, round trips and malformed files.
#include "quantize/imatrix_file.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "support/peer_quantize.hpp"

namespace okapi::quantize {
namespace {

namespace fs = std::filesystem;

class ImatrixFileTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("imatrix_file"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

ImatrixEntry make_entry(int64_t n_per_row, int64_t n_mat, float seed, std::vector<int64_t> counts) {
  ImatrixEntry e;
  e.n_per_row = n_per_row;
  e.n_mat = n_mat;
  e.sums.resize(static_cast<size_t>(n_per_row * n_mat));
  for (size_t i = 0; i < e.sums.size(); ++i) e.sums[i] = seed + 0.37f * static_cast<float>(i % 97);
  e.counts = std::move(counts);
  return e;
}

Imatrix sample_imatrix() {
  Imatrix m;
  m.entries["blk.0.attn_q.weight"] = make_entry(8, 1, 1.5f, {256});
  m.entries["blk.0.ffn_down.weight"] = make_entry(16, 1, 0.25f, {256});
  m.entries["blk.1.ffn_up_exps.weight"] = make_entry(8, 4, 3.0f, {100, 0, 412, 7});
  m.datasets = {"calibration.txt"};
  m.chunk_count = 2;
  m.chunk_size = 128;
  return m;
}

void expect_same(const Imatrix& a, const Imatrix& b) {
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (const auto& [name, e] : a.entries) {
    ASSERT_TRUE(b.entries.count(name)) << name;
    const ImatrixEntry& f = b.entries.at(name);
    EXPECT_EQ(e.n_per_row, f.n_per_row) << name;
    EXPECT_EQ(e.n_mat, f.n_mat) << name;
    EXPECT_EQ(e.sums, f.sums) << name;
    EXPECT_EQ(e.counts, f.counts) << name;
    EXPECT_EQ(e.legacy, f.legacy) << name;
  }
  EXPECT_EQ(a.datasets, b.datasets);
  EXPECT_EQ(a.chunk_count, b.chunk_count);
  EXPECT_EQ(a.chunk_size, b.chunk_size);
}

// Same bytes; on a difference, says where instead of printing binary data.
void expect_same_bytes(const fs::path& a, const fs::path& b) {
  const std::string x = test::read_file(a);
  const std::string y = test::read_file(b);
  if (x == y) return;
  size_t i = 0;
  while (i < x.size() && i < y.size() && x[i] == y[i]) ++i;
  ADD_FAILURE() << a << " (" << x.size() << " bytes) and " << b << " (" << y.size() << " bytes) differ at byte " << i;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string i32_bytes(int32_t v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}

std::string f32_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

void expect_error(const fs::path& path, const std::string& fragment) {
  try {
    (void)read_imatrix(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST_F(ImatrixFileTest, GgufRoundTrip) {
  const Imatrix m = sample_imatrix();
  write_imatrix_gguf(m, dir_ / "m.gguf");
  const Imatrix r = read_imatrix(dir_ / "m.gguf");
  expect_same(m, r);
  EXPECT_FALSE(r.legacy);
  EXPECT_TRUE(r.has_metadata);
  // llama-imatrix's layout: sorted names, in_sum2 then counts, shapes [n_per_row, n_mat] and [1, n_mat].
  const gguf::File f = gguf::File::open(dir_ / "m.gguf");
  EXPECT_EQ(f.at("general.type").as_string(), "imatrix");
  ASSERT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.tensors()[0].name, "blk.0.attn_q.weight.in_sum2");
  EXPECT_EQ(f.tensors()[0].shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(f.tensors()[1].shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(f.tensors()[1].name, "blk.0.attn_q.weight.counts");
  EXPECT_EQ(f.tensors()[4].name, "blk.1.ffn_up_exps.weight.in_sum2");
  EXPECT_EQ(f.tensors()[4].shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(f.tensors()[5].shape, (std::vector<int64_t>{1, 4}));
}

TEST_F(ImatrixFileTest, DatRoundTripAndWeights) {
  const Imatrix m = sample_imatrix();
  write_imatrix_dat(m, dir_ / "m.dat");
  const Imatrix r = read_imatrix(dir_ / "m.dat");
  EXPECT_TRUE(r.legacy);
  EXPECT_EQ(r.chunk_count, 2);
  EXPECT_EQ(r.chunk_size, 0);
  EXPECT_EQ(r.datasets, m.datasets);
  ASSERT_EQ(r.entries.size(), 3u);
  for (const auto& [name, e] : m.entries) {
    const ImatrixEntry& d = r.entries.at(name);
    EXPECT_TRUE(d.legacy);
    EXPECT_EQ(d.n_mat, 1);
    EXPECT_EQ(d.n_per_row, e.n_per_row * e.n_mat);
    // ncall = ceil(max count / chunk size)
    const int64_t max_count = *std::max_element(e.counts.begin(), e.counts.end());
    EXPECT_EQ(d.counts, (std::vector<int64_t>{(max_count + 127) / 128})) << name;
    // llama-quantize's weights agree between the two forms (a matrix without data: 1).
    const std::vector<float> wg = importance_weights(e);
    const std::vector<float> wd = importance_weights(d);
    ASSERT_EQ(wg.size(), wd.size());
    for (size_t i = 0; i < wg.size(); ++i) EXPECT_NEAR(wd[i], wg[i], 1e-6f * std::fabs(wg[i])) << name << " " << i;
  }
  // A legacy entry is written back as read.
  write_imatrix_dat(r, dir_ / "again.dat");
  expect_same_bytes(dir_ / "m.dat", dir_ / "again.dat");
  // and refused by the GGUF writer until converted.
  EXPECT_THROW(write_imatrix_gguf(r, dir_ / "x.gguf"), Error);
  const Imatrix raw = to_raw(r, 128);
  EXPECT_FALSE(raw.entries.at("blk.0.attn_q.weight").legacy);
  EXPECT_EQ(raw.entries.at("blk.0.attn_q.weight").counts, (std::vector<int64_t>{2 * 128}));
  write_imatrix_gguf(raw, dir_ / "x.gguf");
}

TEST_F(ImatrixFileTest, ImportanceWeightsAsLlamaQuantize) {
  const ImatrixEntry e = make_entry(4, 2, 2.0f, {4, 0});
  const std::vector<float> w = importance_weights(e);
  ASSERT_EQ(w.size(), 8u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(w[i], e.sums[i] / 4.0f);
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(w[i], 1.0f);
  ImatrixEntry legacy = make_entry(4, 1, 2.0f, {0});
  legacy.legacy = true;
  EXPECT_EQ(importance_weights(legacy), legacy.sums);  // ncall 0: the values as stored
  legacy.counts = {3};
  EXPECT_EQ(importance_weights(legacy)[1], legacy.sums[1] / 3.0f);
}

TEST_F(ImatrixFileTest, MergeAddsSumsAndBroadcastsCounts) {
  Imatrix a = sample_imatrix();
  Imatrix b = sample_imatrix();
  b.datasets = {"other.txt"};
  merge_imatrix(a, b, 128);
  const ImatrixEntry& e = a.entries.at("blk.1.ffn_up_exps.weight");
  EXPECT_EQ(e.counts, (std::vector<int64_t>{200, 0, 824, 14}));
  EXPECT_EQ(e.sums[3], 2.0f * b.entries.at("blk.1.ffn_up_exps.weight").sums[3]);
  EXPECT_EQ(a.datasets, (std::vector<std::string>{"calibration.txt", "other.txt"}));
  // a one-count entry merged into an expert entry adds to every expert
  Imatrix c;
  c.entries["blk.1.ffn_up_exps.weight"] = make_entry(32, 1, 1.0f, {10});
  merge_imatrix(a, c, 128);
  EXPECT_EQ(a.entries.at("blk.1.ffn_up_exps.weight").counts, (std::vector<int64_t>{210, 10, 834, 24}));
  Imatrix bad;
  bad.entries["blk.0.attn_q.weight"] = make_entry(9, 1, 1.0f, {1});
  EXPECT_THROW(merge_imatrix(a, bad, 128), Error);
}

TEST_F(ImatrixFileTest, WritersRejectInconsistentEntries) {
  Imatrix m = sample_imatrix();
  m.entries["blk.2.attn_k.weight"] = make_entry(8, 2, 1.0f, {1});  // 2 matrices, 1 count
  EXPECT_THROW(write_imatrix_gguf(m, dir_ / "bad.gguf"), Error);
  EXPECT_THROW(write_imatrix_dat(m, dir_ / "bad.dat"), Error);
  EXPECT_FALSE(fs::exists(dir_ / "bad.gguf"));
  EXPECT_FALSE(fs::exists(dir_ / "bad.dat"));
  Imatrix no_chunk = sample_imatrix();
  no_chunk.chunk_size = 0;
  EXPECT_THROW(write_imatrix_dat(no_chunk, dir_ / "bad.dat"), Error);
  EXPECT_THROW(write_imatrix_gguf(Imatrix{}, dir_ / "empty.gguf"), Error);
}

TEST_F(ImatrixFileTest, MalformedFiles) {
  expect_error(dir_ / "missing.gguf", "does not exist");
  expect_error(dir_, "directory");
  write_bytes(dir_ / "empty.dat", "");
  expect_error(dir_ / "empty.dat", "empty");
  write_bytes(dir_ / "zero.dat", i32_bytes(0));
  expect_error(dir_ / "zero.dat", "neither a GGUF file nor");
  // name length past the end
  write_bytes(dir_ / "name.dat", i32_bytes(1) + i32_bytes(1000) + "abc");
  expect_error(dir_ / "name.dat", "name length of 1000");
  // negative value count, truncated values
  const std::string head = i32_bytes(1) + i32_bytes(3) + "abc" + i32_bytes(1);
  write_bytes(dir_ / "nval.dat", head + i32_bytes(-4));
  expect_error(dir_ / "nval.dat", "-4 values");
  write_bytes(dir_ / "short.dat", head + i32_bytes(4) + f32_bytes({1, 2, 3}));
  expect_error(dir_ / "short.dat", "4 values but 12 bytes remain");
  write_bytes(dir_ / "ncall.dat", i32_bytes(1) + i32_bytes(3) + "abc" + i32_bytes(-1) + i32_bytes(1) + f32_bytes({1}));
  expect_error(dir_ / "ncall.dat", "call count of -1");
  write_bytes(dir_ / "nan.dat", head + i32_bytes(2) + f32_bytes({1, std::nanf("")}));
  expect_error(dir_ / "nan.dat", "non-finite");
  write_bytes(dir_ / "trunc.dat", i32_bytes(2) + head.substr(4) + i32_bytes(1) + f32_bytes({1}));
  expect_error(dir_ / "trunc.dat", "truncated");
  // A valid entry without the optional trailer reads.
  write_bytes(dir_ / "notrailer.dat", head + i32_bytes(2) + f32_bytes({1, 2}));
  EXPECT_EQ(read_imatrix(dir_ / "notrailer.dat").entries.at("abc").sums, (std::vector<float>{1, 2}));

  // GGUF: a model is not an importance matrix; half pairs, wrong types, bad counts.
  auto gguf_with = [&](const std::string& file, auto&& fill) {
    gguf::Writer w;
    w.set("general.type", "imatrix");
    fill(w);
    w.write(dir_ / file);
    return dir_ / file;
  };
  const std::vector<float> four = {1, 2, 3, 4};
  auto f32 = [](const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  expect_error(gguf_with("model.gguf",
                         [&](gguf::Writer& w) {
                           w.set("general.type", "model");
                           w.add_tensor("x.weight", DType::F32, {4}, f32(four));
                         }),
               "not an importance matrix");
  expect_error(gguf_with("none.gguf", [&](gguf::Writer& w) { w.add_tensor("x.weight", DType::F32, {4}, f32(four)); }),
               "no '<name>.in_sum2'");
  expect_error(gguf_with("half.gguf", [&](gguf::Writer& w) { w.add_tensor("a.in_sum2", DType::F32, {4, 1}, f32(four)); }),
               "has sums but no counts");
  expect_error(gguf_with("type.gguf",
                         [&](gguf::Writer& w) {
                           w.add_tensor("a.in_sum2", DType::F32, {4, 1}, f32(four));
                           w.add_tensor("a.counts", DType::I32, {1, 1}, std::vector<uint8_t>(4, 0));
                         }),
               "must be F32");
  expect_error(gguf_with("multiple.gguf",
                         [&](gguf::Writer& w) {
                           w.add_tensor("a.in_sum2", DType::F32, {4, 1}, f32(four));
                           w.add_tensor("a.counts", DType::F32, {1, 3}, f32({1, 1, 1}));
                         }),
               "not a multiple");
  expect_error(gguf_with("negcount.gguf",
                         [&](gguf::Writer& w) {
                           w.add_tensor("a.in_sum2", DType::F32, {4, 1}, f32(four));
                           w.add_tensor("a.counts", DType::F32, {1, 1}, f32({-2}));
                         }),
               "count -2");
  expect_error(gguf_with("infsum.gguf",
                         [&](gguf::Writer& w) {
                           w.add_tensor("a.in_sum2", DType::F32, {4, 1},
                                        f32({1, std::numeric_limits<float>::infinity(), 3, 4}));
                           w.add_tensor("a.counts", DType::F32, {1, 1}, f32({2}));
                         }),
               "non-finite");
  expect_error(gguf_with("chunk.gguf",
                         [&](gguf::Writer& w) {
                           w.set("imatrix.chunk_size", "big");
                           w.add_tensor("a.in_sum2", DType::F32, {4, 1}, f32(four));
                           w.add_tensor("a.counts", DType::F32, {1, 1}, f32({2}));
                         }),
               "bad imatrix.* metadata");
  // Without the imatrix.* keys the file reads but says so (llama-quantize refuses it).
  const Imatrix bare = read_imatrix(gguf_with("bare.gguf", [&](gguf::Writer& w) {
    w.add_tensor("a.in_sum2", DType::F32, {4, 1}, f32(four));
    w.add_tensor("a.counts", DType::F32, {1, 1}, f32({2}));
  }));
  EXPECT_FALSE(bare.has_metadata);
  EXPECT_EQ(bare.entries.at("a").counts, (std::vector<int64_t>{2}));
  // truncated GGUF: the gguf reader's error
  const std::string whole = test::read_file(dir_ / "bare.gguf");
  write_bytes(dir_ / "cut.gguf", whole.substr(0, whole.size() / 2));
  EXPECT_THROW((void)read_imatrix(dir_ / "cut.gguf"), Error);
}

// llama-imatrix's own files: okapi reads both formats, writes byte-identical copies, and
// llama-imatrix reads (and merges) okapi's files.
TEST_F(ImatrixFileTest, PeerFilesReadAndWrittenBack) {
  OKAPI_REQUIRE_DATA(test::peer_imatrix_tool());
  const fs::path model = test::write_synth_model(test::tiny_preset("stories15M"), "", "F32", 2, dir_ / "m.gguf");
  const fs::path text = test::write_calibration_text(dir_ / "calib.txt", 600);
  test::peer_imatrix(model, text, dir_ / "peer.gguf", 64, {"--chunks", "3"});
  test::peer_imatrix(model, text, dir_ / "peer.dat", 64, {"--chunks", "3", "--output-format", "dat"});

  const Imatrix g = read_imatrix(dir_ / "peer.gguf");
  const Imatrix d = read_imatrix(dir_ / "peer.dat");
  EXPECT_EQ(g.chunk_size, 64);
  EXPECT_EQ(g.chunk_count, 3);
  EXPECT_EQ(d.chunk_count, 3);
  ASSERT_EQ(g.datasets.size(), 1u);
  EXPECT_EQ(d.datasets, g.datasets);
  // 2 layers x (q, k, v, o, gate, up, down)
  EXPECT_EQ(g.entries.size(), 14u);
  ASSERT_EQ(d.entries.size(), g.entries.size());
  for (const auto& [name, e] : g.entries) {
    EXPECT_EQ(e.n_mat, 1) << name;
    EXPECT_EQ(e.counts, (std::vector<int64_t>{3 * 64})) << name;
    const ImatrixEntry& l = d.entries.at(name);
    EXPECT_EQ(l.counts, (std::vector<int64_t>{3})) << name;
    const std::vector<float> wg = importance_weights(e);
    const std::vector<float> wd = importance_weights(l);
    ASSERT_EQ(wg.size(), wd.size()) << name;
    for (size_t i = 0; i < wg.size(); ++i) EXPECT_NEAR(wd[i], wg[i], 2e-6f * std::fabs(wg[i])) << name;
  }
  // Written back: the same bytes llama-imatrix wrote, in both formats.
  write_imatrix_gguf(g, dir_ / "okapi.gguf");
  expect_same_bytes(dir_ / "okapi.gguf", dir_ / "peer.gguf");
  write_imatrix_dat(g, dir_ / "okapi.dat");
  expect_same_bytes(dir_ / "okapi.dat", dir_ / "peer.dat");

  // llama-imatrix merges okapi's two files (no text: it only combines) and okapi reads the result.
  const std::string merge = test::shell_quote(test::peer_imatrix_tool().string()) + " -m " +
                            test::shell_quote(model.string()) + " --in-file " +
                            test::shell_quote((dir_ / "okapi.gguf").string()) + " --in-file " +
                            test::shell_quote((dir_ / "okapi.dat").string()) + " -c 64 -o " +
                            test::shell_quote((dir_ / "merged.gguf").string());
  const test::CommandResult r = test::run_command(merge);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Imatrix merged = read_imatrix(dir_ / "merged.gguf");
  Imatrix mine = g;
  merge_imatrix(mine, d, 64);
  ASSERT_EQ(merged.entries.size(), mine.entries.size());
  for (const auto& [name, e] : mine.entries) {
    const ImatrixEntry& p = merged.entries.at(name);
    EXPECT_EQ(p.counts, e.counts) << name;
    ASSERT_EQ(p.sums.size(), e.sums.size());
    for (size_t i = 0; i < e.sums.size(); ++i) EXPECT_EQ(p.sums[i], e.sums[i]) << name << " " << i;
  }
  EXPECT_EQ(merged.datasets, mine.datasets);
  EXPECT_EQ(merged.chunk_count, 6);
  // and computes its statistics of okapi's file (it exits 1 when it cannot load it; this build
  // prints the table nowhere, so the exit code is the check)
  const test::CommandResult stats = test::run_command(test::shell_quote(test::peer_imatrix_tool().string()) +
                                                      " -m " + test::shell_quote(model.string()) + " --in-file " +
                                                      test::shell_quote((dir_ / "okapi.gguf").string()) +
                                                      " --show-statistics");
  EXPECT_EQ(stats.exit_code, 0) << stats.output;

}

}  // namespace
}  // namespace okapi::quantize
