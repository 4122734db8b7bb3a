#include "support/peer_logits.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "backend/cpu_ops.hpp"
#include "core/shared_dir.hpp"
#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "model/evaluate.hpp"
#include "model/model.hpp"
#include "support/cache_types.hpp"
#include "support/cli.hpp"
#include "synth/synth.hpp"

namespace okapi::test {

std::filesystem::path peer_dump_logits_tool() { return okapi::shared_dir() / "peers/llama-dump-logits"; }

synth::Preset tiny_preset(std::string_view name) {
  synth::Preset p = synth::preset_by_name(name);
  const bool grouped = p.n_head_kv < p.n_head;
  p.n_embd = 64;
  p.n_head = 4;
  p.n_head_kv = grouped ? 2 : 4;
  if (p.head_dim > 0) p.head_dim = 16;
  p.n_ff = 96;
  p.n_vocab = 512;
  if (p.rope_dims > 0) p.rope_dims = 12;  // phi3: partial rotary, 12 of 16 dims as 96 of 128
  return p;
}

std::filesystem::path write_synth_model(const synth::Preset& preset, const std::string& arch, const std::string& type,
                                        int64_t n_layer, const std::filesystem::path& path) {
  synth::SynthOptions options;
  options.arch = arch;
  options.type = type;
  options.layers = n_layer;
  options.n_threads = 2;
  synth::write_synth(preset, options, path);
  return path;
}

namespace {

std::vector<float> read_floats(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  in.seekg(0, std::ios::end);
  std::vector<float> v(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

}  // namespace

PeerLogits peer_logits(const std::filesystem::path& model, const std::string& prompt, const std::string& kv) {
  const std::filesystem::path prefix = model.parent_path() / (model.stem().string() + ".peer-" + kv);
  const CommandResult r = run_command(shell_quote(peer_dump_logits_tool().string()) + " -m " +
                                      shell_quote(model.string()) + " -p " + shell_quote(prompt) + " -o " +
                                      shell_quote(prefix.string()) + " -t 2 --kv " + shell_quote(kv));
  if (r.exit_code != 0) throw std::runtime_error("llama-dump-logits failed on " + model.string() + ":\n" + r.output);
  std::ifstream in(prefix.string() + ".json");
  const nlohmann::json j = nlohmann::json::parse(in);
  PeerLogits p;
  p.tokens = j.at("tokens").get<std::vector<int32_t>>();
  p.n_vocab = j.at("n_vocab").get<int64_t>();
  p.logits = read_floats(prefix.string() + ".logits.f32");
  if (p.logits.size() != p.tokens.size() * static_cast<size_t>(p.n_vocab))
    throw std::runtime_error("llama-dump-logits wrote " + std::to_string(p.logits.size()) + " logits for " +
                             std::to_string(p.tokens.size()) + " tokens");
  return p;
}

std::vector<float> okapi_logits(const std::filesystem::path& model_path, const std::vector<int32_t>& tokens,
                                const std::string& kv, int64_t batch_size, int threads) {
  const auto model = model::Model::load(gguf::File::open(model_path));
  ThreadPool pool(threads);
  backend::CpuOps ops(&pool);
  ops.prepare(model->weights());
  const model::HParams& hp = model->hparams();
  auto store = ops.make_kv({hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, static_cast<int64_t>(tokens.size())},
                           {test::cache_types(kv.c_str(), kv.c_str()), kv::ExactScores::Direct});
  return model::evaluate_all(*model, ops, *store, tokens, batch_size);
}

PeerComparison compare_logits(const PeerLogits& peer, const std::vector<float>& mine, float near_tie) {
  PeerComparison c;
  const int64_t n = peer.n_vocab;
  for (size_t t = 0; t < peer.tokens.size(); ++t) {
    const float* ref = peer.logits.data() + static_cast<int64_t>(t) * n;
    const float* got = mine.data() + static_cast<int64_t>(t) * n;
    double row_abs = 0, ref_max = 0;
    for (int64_t i = 0; i < n; ++i) {
      row_abs = std::max(row_abs, static_cast<double>(std::fabs(got[i] - ref[i])));
      ref_max = std::max(ref_max, static_cast<double>(std::fabs(ref[i])));
    }
    c.max_abs = std::max(c.max_abs, row_abs);
    c.max_rel = std::max(c.max_rel, ref_max > 0 ? row_abs / ref_max : row_abs);
    const int64_t ref_pick = std::max_element(ref, ref + n) - ref;
    const int64_t pick = std::max_element(got, got + n) - got;
    c.top1_agree += pick == ref_pick;
    c.near_agree += pick == ref_pick || ref[pick] >= ref[ref_pick] - near_tie;
    ++c.positions;
  }
  return c;
}

PeerComparison expect_matches_peer(const std::filesystem::path& model, const std::string& prompt,
                                   const PeerCheck& check) {
  const PeerLogits peer = peer_logits(model, prompt, check.kv);
  const std::vector<float> mine =
      okapi_logits(model, peer.tokens, check.kv, check.token_by_token ? 1 : 512, check.threads);
  EXPECT_EQ(mine.size(), peer.logits.size()) << model;
  if (mine.size() != peer.logits.size()) return {};
  const PeerComparison c = compare_logits(peer, mine, check.near_tie);
  std::printf("  %-40s kv %-3s %-14s %3lld tokens: max rel %.3g  max|d| %.3g  top1 %lld/%lld (%lld with near-ties)\n",
              model.filename().string().c_str(), check.kv.c_str(), check.token_by_token ? "token-by-token" : "batch",
              static_cast<long long>(c.positions), c.max_rel, c.max_abs, static_cast<long long>(c.top1_agree),
              static_cast<long long>(c.positions), static_cast<long long>(c.near_agree));
  if (check.max_rel > 0) {
    EXPECT_LE(c.max_rel, check.max_rel) << model << " kv " << check.kv;
  }
  EXPECT_GE(static_cast<double>(check.near_tie > 0 ? c.near_agree : c.top1_agree),
            check.min_top1 * static_cast<double>(c.positions))
      << model << " kv " << check.kv;
  return c;
}

void expect_matches_peer_every_cache_and_mode(const std::filesystem::path& model, const std::string& prompt) {
  for (const char* kv : {"f32", "f16"}) {
    for (const bool one_by_one : {false, true}) {
      SCOPED_TRACE(std::string("kv ") + kv + (one_by_one ? " token by token" : " batch"));
      PeerCheck check;
      check.kv = kv;
      check.token_by_token = one_by_one;
      expect_matches_peer(model, prompt, check);
    }
  }
}

std::string peer_test_prompt(int n_words) {
  static const char* const kWords[] = {"the", "little", "fox", "ran", "over", "a", "green", "hill", "and", "saw",
                                       "river", "where", "children", "played", "with", "bright", "stones", "under",
                                       "old", "trees", "while", "birds", "sang", "songs", "of", "morning", "light"};
  constexpr size_t kCount = sizeof(kWords) / sizeof(kWords[0]);
  std::string s = "Once upon a time";
  uint32_t state = 12345;
  for (int i = 0; i < n_words; ++i) {
    state = state * 1664525u + 1013904223u;
    s += ' ';
    s += kWords[(state >> 16) % kCount];
    if (i % 11 == 10) s += '.';
  }
  return s;
}

}  // namespace okapi::test
