// Checkpoints: an exact round trip of every field, and every kind of damage (a flipped byte
// anywhere, truncation, a foreign file) reported as a clear error instead of a half-read state.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "support/paths.hpp"
#include "train/checkpoint.hpp"

namespace okapi::train {
namespace {

namespace fs = std::filesystem;

CheckpointMeta sample_meta() {
  CheckpointMeta m;
  m.config = config_by_name("stories260K", 512);
  m.config.n_layers = 1;
  m.config.ternary = true;
  m.hyper.steps = 77;
  m.hyper.batch = 3;
  m.hyper.seq = 17;
  m.hyper.accum = 2;
  m.hyper.warmup = 5;
  m.hyper.lr = 3.5e-4f;
  m.hyper.seed = 0xDEADBEEFCAFEull;
  m.hyper.held_out_fraction = 0.125;
  m.step = 41;
  m.sampler.rng = {1, 2, 0xFFFFFFFFFFFFFFFFull, 4};
  m.sampler.windows_drawn = 246;
  m.tokens_seen = 12345;
  m.train_seconds = 6.25;
  m.data_sha256 = std::string(64, 'a');
  m.tokenizer_sha256 = std::string(64, 'b');
  m.tokenizer_path = "/some/tok512.bin";
  m.data_files = {"/data/a.txt", "/data/b.txt"};
  return m;
}

struct Arrays {
  std::vector<float> p, m, v;
};

Arrays sample_arrays(const CheckpointMeta& meta) {
  const size_t n = ParameterLayout(meta.config).total();
  Arrays a{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  for (size_t i = 0; i < n; ++i) {
    a.p[i] = static_cast<float>(i) * 1e-3f - 0.5f;
    a.m[i] = -static_cast<float>(i % 97) * 1e-5f;
    a.v[i] = static_cast<float>(i % 13) * 1e-7f;
  }
  return a;
}

std::string error_of(const fs::path& path) {
  try {
    load_checkpoint(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainCheckpoint, RoundTripsEveryField) {
  const auto dir = test::make_temp_dir("ckpt");
  const CheckpointMeta meta = sample_meta();
  const Arrays a = sample_arrays(meta);
  const fs::path path = checkpoint_path(dir, meta.step);
  save_checkpoint(path, meta, a.p, a.m, a.v);
  const Checkpoint ck = load_checkpoint(path);
  const CheckpointMeta& m = ck.meta;
  EXPECT_EQ(m.config.name, meta.config.name);
  EXPECT_EQ(m.config.n_layers, 1);
  EXPECT_EQ(m.config.dim, meta.config.dim);
  EXPECT_EQ(m.config.n_kv_heads, meta.config.n_kv_heads);
  EXPECT_TRUE(m.config.ternary);
  EXPECT_EQ(m.hyper.steps, 77);
  EXPECT_EQ(m.hyper.accum, 2);
  EXPECT_EQ(m.hyper.lr, 3.5e-4f);
  EXPECT_EQ(m.hyper.seed, meta.hyper.seed);
  EXPECT_EQ(m.hyper.held_out_fraction, 0.125);
  EXPECT_EQ(m.step, 41);
  EXPECT_EQ(m.sampler.rng, meta.sampler.rng);
  EXPECT_EQ(m.sampler.windows_drawn, 246u);
  EXPECT_EQ(m.tokens_seen, 12345u);
  EXPECT_EQ(m.train_seconds, 6.25);
  EXPECT_EQ(m.data_sha256, meta.data_sha256);
  EXPECT_EQ(m.tokenizer_path, meta.tokenizer_path);
  EXPECT_EQ(m.data_files, meta.data_files);
  EXPECT_EQ(ck.params, a.p);
  EXPECT_EQ(ck.adam_m, a.m);
  EXPECT_EQ(ck.adam_v, a.v);
  // Nothing but the checkpoint itself is left in the directory (the temp file was renamed).
  EXPECT_EQ(std::distance(fs::directory_iterator(checkpoint_dir(dir)), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

// A fine-tuning run's checkpoint: the low-rank ranks (own and shared in-factors), the source model
// and the GGUF keys its export carries over.
TEST(TrainCheckpoint, RoundTripsLowRankProjectionsAndTheSourceModel) {
  const auto dir = test::make_temp_dir("ckpt-low-rank");
  CheckpointMeta meta = sample_meta();
  meta.config.ternary = false;
  meta.config.low_rank = {{"blk.0.attn_q", 7, "blk.0.attn_q.lr_in.weight"},
                          {"blk.0.ffn_up", 5, "blk.0.ffn_gate_up.lr_in.weight"},
                          {"blk.0.ffn_gate", 5, "blk.0.ffn_gate_up.lr_in.weight"}};
  meta.init_from = "/models/compressed.gguf";
  meta.export_metadata = {{"okapi.compress.method", gguf::Value("svd")}, {"okapi.compress.ratio", gguf::Value(0.3f)}};
  const Arrays a = sample_arrays(meta);
  const fs::path path = dir / "c.ckpt";
  save_checkpoint(path, meta, a.p, a.m, a.v);
  const Checkpoint ck = load_checkpoint(path);
  ASSERT_EQ(ck.meta.config.low_rank.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ck.meta.config.low_rank[i].name, meta.config.low_rank[i].name);
    EXPECT_EQ(ck.meta.config.low_rank[i].rank, meta.config.low_rank[i].rank);
    EXPECT_EQ(ck.meta.config.low_rank[i].in_factor, meta.config.low_rank[i].in_factor);
  }
  EXPECT_EQ(ck.meta.init_from, meta.init_from);
  ASSERT_EQ(ck.meta.export_metadata.size(), 2u);
  EXPECT_EQ(ck.meta.export_metadata[0].key, "okapi.compress.method");
  EXPECT_EQ(ck.meta.export_metadata[0].value.as_string(), "svd");
  EXPECT_EQ(ck.meta.export_metadata[1].value.type(), gguf::ValueType::F32);
  EXPECT_EQ(ck.meta.export_metadata[1].value.as_double(), static_cast<double>(0.3f));
  EXPECT_EQ(ck.params, a.p);
  fs::remove_all(dir);
}

// Checkpoints written before low-rank training (version 1: no ranks, no source model) still load.
TEST(TrainCheckpoint, Version1CheckpointsStillLoad) {
  const auto dir = test::make_temp_dir("ckpt-v1");
  CheckpointMeta meta = sample_meta();
  const Arrays a = sample_arrays(meta);
  const fs::path path = dir / "c.ckpt";
  save_checkpoint(path, meta, a.p, a.m, a.v);
  // Version 2 -> 1: drop the low-rank count after the config, and init_from and the key blob
  // before the parameter count; then the version and the digest.
  std::string bytes = test::read_file(path);
  bytes.resize(bytes.size() - 64);
  const size_t config_end = 8 + 4 + 4 + meta.config.name.size() + 7 * 8 + 4 + 4 + 1 + 1;
  const size_t keys_blob = gguf::Writer().to_bytes().size();
  const size_t source_begin = bytes.size() - 8 - 3 * a.p.size() * sizeof(float) - (4 + 8 + keys_blob);
  bytes.erase(source_begin, 4 + 8 + keys_blob);
  bytes.erase(config_end, 4);
  const uint32_t version = 1;
  std::memcpy(bytes.data() + 8, &version, sizeof(version));
  bytes += sha256_hex(bytes.data(), bytes.size());
  std::ofstream(path, std::ios::binary) << bytes;
  const Checkpoint ck = load_checkpoint(path);
  EXPECT_EQ(ck.meta.step, meta.step);
  EXPECT_EQ(ck.meta.data_files, meta.data_files);
  EXPECT_TRUE(ck.meta.config.low_rank.empty());
  EXPECT_TRUE(ck.meta.init_from.empty());
  EXPECT_EQ(ck.params, a.p);
  EXPECT_EQ(ck.adam_v, a.v);
  fs::remove_all(dir);
}

TEST(TrainCheckpoint, AnyDamageIsReportedAsCorrupt) {
  const auto dir = test::make_temp_dir("ckpt-damage");
  const CheckpointMeta meta = sample_meta();
  const Arrays a = sample_arrays(meta);
  const fs::path path = dir / "c.ckpt";
  save_checkpoint(path, meta, a.p, a.m, a.v);
  const std::string good = test::read_file(path);
  const auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; };
  // A flipped byte in the header, the parameters, the moments and the digest itself.
  for (size_t offset : {size_t{12}, size_t{300}, good.size() / 2, good.size() - 70, good.size() - 1}) {
    std::string bad = good;
    bad[offset] = static_cast<char>(bad[offset] ^ 0x20);
    write(bad);
    EXPECT_NE(error_of(path).find("corrupt"), std::string::npos) << "offset " << offset << ": " << error_of(path);
  }
  write(good.substr(0, good.size() / 3));  // torn write
  EXPECT_NE(error_of(path).find("corrupt"), std::string::npos);
  write("not a checkpoint at all, but long enough to have a digest at its end......................");
  EXPECT_NE(error_of(path).find("not an okapi checkpoint"), std::string::npos);
  write("");
  EXPECT_NE(error_of(path).find("not an okapi checkpoint"), std::string::npos);
  EXPECT_NE(error_of(dir / "missing.ckpt").find("does not exist"), std::string::npos);
  write(good);
  EXPECT_NO_THROW(load_checkpoint(path));
  fs::remove_all(dir);
}

TEST(TrainCheckpoint, ParameterCountMustMatchTheConfig) {
  const auto dir = test::make_temp_dir("ckpt-size");
  CheckpointMeta meta = sample_meta();
  const Arrays a = sample_arrays(meta);
  meta.config.n_layers = 2;  // the arrays were sized for one layer
  save_checkpoint(dir / "c.ckpt", meta, a.p, a.m, a.v);
  EXPECT_NE(error_of(dir / "c.ckpt").find("parameters stored"), std::string::npos);
  EXPECT_THROW(save_checkpoint(dir / "d.ckpt", meta, a.p, a.m, std::span<const float>(a.v.data(), 3)), Error);
  fs::remove_all(dir);
}

TEST(TrainCheckpoint, ListsByStepAndPrunesOldOnesAndStaleTempFiles) {
  const auto dir = test::make_temp_dir("ckpt-list");
  const CheckpointMeta meta = sample_meta();
  const Arrays a = sample_arrays(meta);
  for (int64_t step : {3, 12, 100, 7}) save_checkpoint(checkpoint_path(dir, step), meta, a.p, a.m, a.v);
  std::ofstream(checkpoint_dir(dir) / "step-00000200.ckpt.tmp.12345") << "torn";  // a killed writer's leftover
  std::ofstream(checkpoint_dir(dir) / "notes.txt") << "not a checkpoint";
  auto list = list_checkpoints(dir);
  ASSERT_EQ(list.size(), 4u);
  EXPECT_EQ(list.front().filename(), "step-00000003.ckpt");
  EXPECT_EQ(list.back().filename(), "step-00000100.ckpt");
  prune_checkpoints(dir, 2);
  list = list_checkpoints(dir);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].filename(), "step-00000012.ckpt");
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir) / "step-00000200.ckpt.tmp.12345"));
  EXPECT_TRUE(fs::exists(checkpoint_dir(dir) / "notes.txt"));
  EXPECT_TRUE(list_checkpoints(dir / "nowhere").empty());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::train
