// okapi imatrix against llama-imatrix on the same synth model, text, -c and chunk count: the same
// entries (names, shapes), identical counts (per expert for MoE weights) and sums within float
// summation order; the verb's merging, formats and errors.
#include "eval/imatrix.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "quantize/imatrix_file.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "support/peer_quantize.hpp"

namespace okapi::test {
namespace {

namespace fs = std::filesystem;

class ImatrixTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("imatrix"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::string q(const fs::path& p) { return shell_quote(p.string()); }

// Runs `okapi imatrix ARGS` and expects success.
void okapi_imatrix(const std::string& args) {
  const CommandResult r = run_cli("imatrix " + args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

struct Agreement {
  double max_rel = 0;  // worst entry: max |okapi - llama| / max |llama|
  std::string worst;
};

// Same entries, shapes and counts; the sums within `tolerance` (relative to each matrix's
// largest). Expert counts may differ by `routing_flips` tokens routed to another expert (near-tied
// router logits of a random model, decided by float rounding); the experts involved are then
// compared only for their shapes.
Agreement expect_agrees(const quantize::Imatrix& mine, const quantize::Imatrix& peer, double tolerance,
                        int64_t routing_flips = 0) {
  Agreement a;
  EXPECT_EQ(mine.chunk_count, peer.chunk_count);
  EXPECT_EQ(mine.chunk_size, peer.chunk_size);
  EXPECT_EQ(mine.entries.size(), peer.entries.size());
  for (const auto& [name, p] : peer.entries) {
    const auto it = mine.entries.find(name);
    if (it == mine.entries.end()) {
      ADD_FAILURE() << "okapi has no entry " << name;
      continue;
    }
    const quantize::ImatrixEntry& m = it->second;
    EXPECT_EQ(m.n_per_row, p.n_per_row) << name;
    EXPECT_EQ(m.n_mat, p.n_mat) << name;
    if (p.n_mat == 1 || routing_flips == 0) {
      EXPECT_EQ(m.counts, p.counts) << name;
    } else if (m.counts.size() == p.counts.size()) {
      int64_t moved = 0;
      for (size_t e = 0; e < p.counts.size(); ++e) moved += std::abs(m.counts[e] - p.counts[e]);
      EXPECT_LE(moved, 2 * routing_flips) << name;
      if (moved > 0) std::printf("%s: %lld routing choices differ from llama.cpp's\n", name.c_str(), static_cast<long long>(moved / 2));
    }
    if (m.sums.size() != p.sums.size()) {
      ADD_FAILURE() << name << ": " << m.sums.size() << " sums, llama.cpp " << p.sums.size();
      continue;
    }
    // Per matrix (expert), relative to that matrix's largest sum.
    for (int64_t e = 0; e < p.n_mat; ++e) {
      if (m.counts.size() == p.counts.size() && m.counts[static_cast<size_t>(e)] != p.counts[static_cast<size_t>(e)])
        continue;
      const auto begin = static_cast<size_t>(e * p.n_per_row), end = begin + static_cast<size_t>(p.n_per_row);
      float scale = 0;
      for (size_t i = begin; i < end; ++i) scale = std::max(scale, std::fabs(p.sums[i]));
      for (size_t i = begin; i < end; ++i) {
        const double rel = scale > 0 ? std::fabs(m.sums[i] - p.sums[i]) / scale : std::fabs(m.sums[i]);
        if (rel > a.max_rel) {
          a.max_rel = rel;
          a.worst = name;
        }
      }
    }
  }
  for (const auto& [name, m] : mine.entries)
    if (!peer.entries.count(name)) ADD_FAILURE() << "llama.cpp has no entry " << name;
  EXPECT_LE(a.max_rel, tolerance) << "worst entry " << a.worst;
  return a;
}

// okapi's and llama-imatrix's matrices of `model` over the same text, -c and chunks.
void compare_with_peer(const fs::path& dir, const fs::path& model, int ctx, int chunks,
                       const std::vector<std::string>& extra = {}, double tolerance = 1e-3,
                       int64_t routing_flips = 0) {
  const fs::path text = write_calibration_text(dir / "calib.txt", 3000);
  std::vector<std::string> peer_args = {"--chunks", std::to_string(chunks)};
  std::string okapi_args;
  for (const std::string& e : extra) {
    peer_args.push_back(e);
    okapi_args += " " + e;
  }
  peer_imatrix(model, text, dir / "peer.gguf", ctx, peer_args);
  okapi_imatrix("-m " + q(model) + " -f " + q(text) + " -o " + q(dir / "okapi.gguf") + " -c " + std::to_string(ctx) +
                " --chunks " + std::to_string(chunks) + " -t 2" + okapi_args);
  const quantize::Imatrix peer = quantize::read_imatrix(dir / "peer.gguf");
  const quantize::Imatrix mine = quantize::read_imatrix(dir / "okapi.gguf");
  EXPECT_EQ(mine.datasets, peer.datasets);
  const Agreement a = expect_agrees(mine, peer, tolerance, routing_flips);
  std::printf("imatrix vs llama-imatrix (%s, -c %d, %d chunks): %zu entries, max relative difference %.2e (%s)\n",
              model.filename().c_str(), ctx, chunks, peer.entries.size(), a.max_rel, a.worst.c_str());
}

TEST_F(ImatrixTest, DenseMatchesLlamaImatrix) {
  OKAPI_REQUIRE_DATA(peer_imatrix_tool());
  const fs::path model = write_synth_model(tiny_preset("stories15M"), "", "F32", 2, dir_ / "dense.gguf");
  compare_with_peer(dir_, model, 64, 5);
  const quantize::Imatrix mine = quantize::read_imatrix(dir_ / "okapi.gguf");
  EXPECT_EQ(mine.entries.size(), 14u);  // 2 blocks x (q, k, v, output, gate, up, down)
  EXPECT_EQ(mine.entries.at("blk.1.ffn_down.weight").counts, (std::vector<int64_t>{5 * 64}));
  EXPECT_FALSE(mine.entries.count("output.weight"));
}

TEST_F(ImatrixTest, DenseWithOutputAndLongChunks) {
  OKAPI_REQUIRE_DATA(peer_imatrix_tool());
  // -c 600: llama-imatrix runs up to 3 chunks a batch (here 2, split equally into micro-batches
  // of 256 positions each); the output weight collected too.
  const fs::path model = write_synth_model(tiny_preset("stories15M"), "", "F32", 1, dir_ / "dense1.gguf");
  compare_with_peer(dir_, model, 600, 2, {"--process-output"});
  const quantize::Imatrix mine = quantize::read_imatrix(dir_ / "okapi.gguf");
  ASSERT_TRUE(mine.entries.count("output.weight"));
  EXPECT_EQ(mine.entries.at("output.weight").counts, (std::vector<int64_t>{2 * 600}));
}

// The experts' gate sums add up to n_used times the router's whatever the routing: each token's
// FFN input reaches n_used experts, and the router sees every token's.
void expect_routing_invariant(const quantize::Imatrix& mine, int64_t n_layer, int64_t n_used) {
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string block = "blk." + std::to_string(l) + ".";
    const quantize::ImatrixEntry& router = mine.entries.at(block + "ffn_gate_inp.weight");
    const quantize::ImatrixEntry& gate = mine.entries.at(block + "ffn_gate_exps.weight");
    ASSERT_EQ(gate.n_per_row, router.n_per_row);
    int64_t routed = 0;
    for (const int64_t c : gate.counts) routed += c;
    EXPECT_EQ(routed, n_used * router.counts.at(0)) << block;
    EXPECT_EQ(mine.entries.at(block + "ffn_down_exps.weight").counts, gate.counts) << block;
    EXPECT_EQ(mine.entries.at(block + "ffn_up_exps.weight").counts, gate.counts) << block;
    for (int64_t j = 0; j < router.n_per_row; ++j) {
      double total = 0;
      for (int64_t e = 0; e < gate.n_mat; ++e) total += gate.sums[static_cast<size_t>(e * gate.n_per_row + j)];
      const double want = static_cast<double>(n_used) * router.sums[static_cast<size_t>(j)];
      EXPECT_NEAR(total, want, 1e-5 * want) << block << " column " << j;
    }
  }
}

// The random routers' logits are close together: a few of the routing choices are near ties that
// the engines' rounding decides differently (at most 4 allowed; a token routed elsewhere in block 0
// also changes its later inputs, hence the looser bound on the sums).
TEST_F(ImatrixTest, MoeMatchesLlamaImatrixPerExpert) {
  OKAPI_REQUIRE_DATA(peer_imatrix_tool());
  synth::Preset p = tiny_preset("qwen3-30b-a3b");
  p.n_expert = 8;
  p.n_expert_used = 4;
  p.n_ff_exp = 32;
  const fs::path model = write_synth_model(p, "", "F32", 2, dir_ / "moe.gguf");
  compare_with_peer(dir_, model, 64, 4, {}, 2e-2, 4);
  const quantize::Imatrix mine = quantize::read_imatrix(dir_ / "okapi.gguf");
  EXPECT_EQ(mine.entries.size(), 16u);  // 2 blocks x (q, k, v, output, router, 3 expert tensors)
  EXPECT_EQ(mine.entries.at("blk.0.ffn_up_exps.weight").n_mat, 8);
  EXPECT_EQ(mine.entries.at("blk.0.ffn_gate_inp.weight").counts, (std::vector<int64_t>{4 * 64}));
  expect_routing_invariant(mine, 2, 4);
}

// qwen2moe: a shared expert and its sigmoid gate (ffn_gate_inp_shexp, a [n_embd] weight).
TEST_F(ImatrixTest, SharedExpertMatchesLlamaImatrix) {
  OKAPI_REQUIRE_DATA(peer_imatrix_tool());
  synth::Preset p = tiny_preset("qwen2-57b-a14b");
  p.n_expert = 8;
  p.n_expert_used = 2;
  p.n_ff_exp = 32;
  p.n_ff_shexp = 80;
  const fs::path model = write_synth_model(p, "", "F32", 2, dir_ / "qwen2moe.gguf");
  compare_with_peer(dir_, model, 64, 3, {}, 2e-2, 4);
  const quantize::Imatrix mine = quantize::read_imatrix(dir_ / "okapi.gguf");
  EXPECT_EQ(mine.entries.at("blk.1.ffn_gate_inp_shexp.weight").counts, (std::vector<int64_t>{3 * 64}));
  EXPECT_EQ(mine.entries.at("blk.1.ffn_down_shexp.weight").n_per_row, 80);
  expect_routing_invariant(mine, 2, 2);
}

// gpt-oss: experts with biases and the clamped SwiGLU run one by one (not Ops::expert_ffns).
TEST_F(ImatrixTest, GptOssExpertsMatchLlamaImatrix) {
  OKAPI_REQUIRE_DATA(peer_imatrix_tool());
  synth::Preset p = tiny_preset("gpt-oss-20b");
  p.sliding_window = 8;
  p.n_expert = 8;
  p.n_expert_used = 3;
  p.n_ff_exp = 64;
  p.n_ff = 64;
  p.expert_gain = 4.0f;
  const fs::path model = write_synth_model(p, "", "F32", 2, dir_ / "gpt-oss.gguf");
  compare_with_peer(dir_, model, 64, 3, {}, 2e-2, 4);
  expect_routing_invariant(quantize::read_imatrix(dir_ / "okapi.gguf"), 2, 3);
}

// Dense rows in micro-batches of fewer than 16 tokens are not counted (llama-imatrix's rule):
// -c 520 runs 3 chunks a batch (micro-batches of 170 positions of each, the last 10 x 3 = 30
// tokens), so with 4 chunks the fourth is alone in its batch: 512 + 8 positions, the 8 not counted.
TEST_F(ImatrixTest, SmallMicroBatchesAreSkippedAsLlamaImatrix) {
  OKAPI_REQUIRE_DATA(peer_imatrix_tool());
  const fs::path model = write_synth_model(tiny_preset("stories15M"), "", "F32", 1, dir_ / "small.gguf");
  compare_with_peer(dir_, model, 520, 4);
  const quantize::Imatrix mine = quantize::read_imatrix(dir_ / "okapi.gguf");
  EXPECT_EQ(mine.entries.at("blk.0.attn_q.weight").counts, (std::vector<int64_t>{3 * 520 + 512}));
}

TEST_F(ImatrixTest, FormatsAndMergingAgreeWithLlamaImatrix) {
  OKAPI_REQUIRE_DATA(peer_imatrix_tool());
  const fs::path model = write_synth_model(tiny_preset("stories15M"), "", "F32", 1, dir_ / "m.gguf");
  const fs::path text = write_calibration_text(dir_ / "calib.txt", 3000);
  const std::string base = "-m " + q(model) + " -f " + q(text) + " -c 64 --chunks 2 -t 2 --no-ppl";
  okapi_imatrix(base + " -o " + q(dir_ / "a.gguf"));
  okapi_imatrix(base + " --chunk 2 --output-format dat -o " + q(dir_ / "b.dat"));
  // okapi merges (no text) as llama-imatrix does
  okapi_imatrix("--in-file " + q(dir_ / "a.gguf") + "," + q(dir_ / "b.dat") + " -c 64 -o " + q(dir_ / "merged.gguf"));
  const std::string peer = shell_quote(peer_imatrix_tool().string()) + " -m " + q(model) + " -c 64 --in-file " +
                           q(dir_ / "a.gguf") + " --in-file " + q(dir_ / "b.dat") + " -o " + q(dir_ / "peer.gguf");
  const CommandResult r = run_command(peer);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const quantize::Imatrix mine = quantize::read_imatrix(dir_ / "merged.gguf");
  const quantize::Imatrix theirs = quantize::read_imatrix(dir_ / "peer.gguf");
  expect_agrees(mine, theirs, 0.0);
  EXPECT_EQ(mine.datasets, theirs.datasets);
  EXPECT_EQ(mine.chunk_count, 4);
  // collecting on top of a merged file adds to it
  okapi_imatrix(base + " --in-file " + q(dir_ / "a.gguf") + " -o " + q(dir_ / "twice.gguf"));
  const quantize::Imatrix twice = quantize::read_imatrix(dir_ / "twice.gguf");
  const quantize::Imatrix once = quantize::read_imatrix(dir_ / "a.gguf");
  EXPECT_EQ(twice.chunk_count, 4);
  EXPECT_EQ(twice.entries.at("blk.0.ffn_up.weight").counts, (std::vector<int64_t>{4 * 64}));
  // (the new squares add onto the loaded sums, as llama-imatrix accumulates: not bit-equal to 2x)
  const float one = once.entries.at("blk.0.ffn_up.weight").sums[3];
  EXPECT_NEAR(twice.entries.at("blk.0.ffn_up.weight").sums[3], 2 * one, 1e-5 * one);
  EXPECT_EQ(twice.datasets.size(), 2u);
}

TEST_F(ImatrixTest, SaveFrequencyWritesSnapshots) {
  const fs::path model = write_synth_model(tiny_preset("stories15M"), "", "F32", 1, dir_ / "m.gguf");
  const fs::path text = write_calibration_text(dir_ / "calib.txt", 3000);
  okapi_imatrix("-m " + q(model) + " -f " + q(text) + " -c 32 --chunks 4 --save-frequency 2 --no-ppl -o " +
                q(dir_ / "i.gguf"));
  EXPECT_EQ(quantize::read_imatrix(dir_ / "i.gguf.at_2").chunk_count, 2);
  EXPECT_EQ(quantize::read_imatrix(dir_ / "i.gguf.at_4").chunk_count, 4);
  EXPECT_EQ(quantize::read_imatrix(dir_ / "i.gguf").chunk_count, 4);
}

TEST_F(ImatrixTest, PrintsRunningPerplexity) {
  const fs::path model = write_synth_model(tiny_preset("stories15M"), "", "F32", 1, dir_ / "m.gguf");
  const fs::path text = write_calibration_text(dir_ / "calib.txt", 3000);
  const CommandResult r = run_cli("imatrix -m " + q(model) + " -f " + q(text) + " -c 32 --chunks 3 -o " +
                                  q(dir_ / "i.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[1]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[3]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Final estimate: PPL = "), std::string::npos) << r.output;
}

TEST_F(ImatrixTest, Errors) {
  const fs::path model = write_synth_model(tiny_preset("stories15M"), "", "F32", 1, dir_ / "m.gguf");
  const fs::path text = write_calibration_text(dir_ / "calib.txt", 200);
  auto fails = [&](const std::string& args, const std::string& fragment) {
    const CommandResult r = run_cli("imatrix " + args);
    EXPECT_NE(r.exit_code, 0) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(fragment), std::string::npos) << args << "\n" << r.output;
  };
  const std::string m = "-m " + q(model);
  fails(m + " -f " + q(text) + " -c 4096 -o " + q(dir_ / "x.gguf"), "you need at least 8192 tokens");
  fails(m + " -f " + q(text) + " -c 0 -o " + q(dir_ / "x.gguf"), "-c");
  fails(m + " -f " + q(text) + " -c abc", "-c");
  fails(m + " -f " + q(dir_ / "missing.txt"), "does not exist");
  fails("-m " + q(dir_ / "nomodel.gguf") + " -f " + q(text), "does not exist");
  fails(m + " -o " + q(dir_ / "x.gguf"), "no text (-f)");
  fails("-f " + q(text), "needs a model");
  fails(m + " -f " + q(text) + " -c 32 -o " + q(dir_), "directory");
  fails(m + " -f " + q(text) + " -c 32 -o " + q(text), "-f");
  fails("--in-file " + q(dir_ / "none.gguf") + " -o " + q(dir_ / "x.gguf"), "does not exist");
  fails("--in-file " + q(text) + " -o " + q(dir_ / "x.gguf"), "importance matrix");
  fails(m + " -f " + q(text) + " --output-format xml", "--output-format");
  EXPECT_FALSE(fs::exists(dir_ / "x.gguf"));
}

}  // namespace
}  // namespace okapi::test
