// The exact-mode guarantee (seed 000, docs/exact-mode.md): stories260K logits for a fixed token
// sequence (a batched prefill, then token-by-token decode) are the same bits for 1, 2 and 4
// threads, scalar and AVX2 kernels, the NTT and the direct attention paths and any batching, and
// their SHA-256 equals the digest committed in tests/data/exact/stories260k_logits.sha256 (derived
// from a gcc Release build; CI runs it again in the clang++ sanitized build, and
// scripts/test_exact_identity.sh in clang++ Release and gcc -O0 builds). Through the CLI: the same greedy text and perplexity line for every thread count
// and with OKAPI_FORCE_SCALAR=1.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/cpu.hpp"
#include "core/sha256.hpp"
#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "kv/exact_kernels.hpp"
#include "kv/exact_store.hpp"
#include "model/evaluate.hpp"
#include "backend/exact_ops.hpp"
#include "model/model.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi::test {
namespace {

std::filesystem::path stories() { return repo_dir() / "models/stories260K.gguf"; }

constexpr int64_t kPrompt = 16;

// " Once upon a time, there was a little girl named Lily." as stories260K ids, then 8 more.
std::vector<int32_t> sequence() {
  std::vector<int32_t> t = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426};
  for (int i = 0; i < 8; ++i) t.push_back(static_cast<int32_t>(260 + (i * 37) % 250));
  return t;
}

std::string token_list() {
  std::ostringstream s;
  for (const int32_t t : sequence()) s << (s.tellp() > 0 ? "," : "") << t;
  return s.str();
}

struct Config {
  int threads = 1;
  bool avx2 = false;
  kv::ExactScores scores = kv::ExactScores::Ntt;
  int64_t prefill_batch = kPrompt;  // then one token at a time
};

std::vector<float> exact_logits(const model::Model& m, const Config& c) {
  const model::HParams& hp = m.hparams();
  ThreadPool pool(c.threads);
  backend::ExactOps ops(&pool, c.avx2 ? Isa::avx2 : Isa::scalar);
  const auto store = kv::make_exact_store({hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, 32}, c.scores,
                                          c.avx2 ? kv::ExactKernel::avx2 : kv::ExactKernel::scalar);
  const std::vector<int32_t> tokens = sequence();
  const std::span<const int32_t> all(tokens);
  auto logits = model::evaluate_all(m, ops, *store, all.first(kPrompt), c.prefill_batch);
  const auto decode = model::evaluate_all(m, ops, *store, all.subspan(kPrompt), 1, static_cast<int32_t>(kPrompt));
  logits.insert(logits.end(), decode.begin(), decode.end());
  return logits;
}

std::string committed_digest() {
  std::istringstream in(read_file(repo_dir() / "tests/data/exact/stories260k_logits.sha256"));
  std::string digest;
  in >> digest;
  return digest;
}

TEST(ExactIdentity, LogitsAreTheSameBitsForEveryThreadCountKernelAndAttentionPath) {
  const auto m = model::Model::load(gguf::File::open(stories()));
  const std::vector<float> first = exact_logits(*m, {});
  ASSERT_EQ(first.size(), sequence().size() * static_cast<size_t>(m->n_vocab()));
  std::vector<bool> kernels{false};
  if (cpu_features().use_avx2()) kernels.push_back(true);
  for (const bool avx2 : kernels)
    for (const int threads : {1, 2, 4})
      for (const kv::ExactScores scores : {kv::ExactScores::Ntt, kv::ExactScores::Direct, kv::ExactScores::NttCrt}) {
        const auto logits = exact_logits(*m, {threads, avx2, scores, kPrompt});
        EXPECT_EQ(std::memcmp(logits.data(), first.data(), first.size() * sizeof(float)), 0)
            << "threads " << threads << " avx2 " << avx2 << " scores " << static_cast<int>(scores);
      }
  // Exact mode has no batch-dependent kernels: prefill token by token or in odd batches, same bits.
  for (const int64_t batch : {1, 5}) {
    const auto logits = exact_logits(*m, {2, false, kv::ExactScores::Direct, batch});
    EXPECT_EQ(std::memcmp(logits.data(), first.data(), first.size() * sizeof(float)), 0) << "batch " << batch;
  }
  EXPECT_EQ(sha256_hex(first.data(), first.size() * sizeof(float)), committed_digest())
      << "the logits differ from the committed digest (another compiler, flag or libm must not change them)";
}

// The CLI's logits (OKAPI_FORCE_SCALAR=1 forces every scalar kernel, the KV store's and the batch
// exp included) hash to the same committed digest.
TEST(ExactIdentity, CliLogitsMatchTheDigestWithScalarAndSimdKernels) {
  const auto dir = make_temp_dir("exact_identity");
  for (const std::string env : {"", "OKAPI_FORCE_SCALAR=1 "}) {
    for (const char* attention : {"ntt", "direct", "ntt-crt"}) {
      const auto out = dir / "logits.bin";
      const CommandResult r = run_command(env + cli_path().string() + " logits --exact --exact-attention " +
                                          attention + " -m " + stories().string() + " --tokens " + token_list() +
                                          " -b 16 -t 2 --force -o " + out.string());  // replaces logits.json
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const auto json = nlohmann::json::parse(read_file(dir / "logits.json"));
      EXPECT_EQ(json["logits_sha256"], committed_digest()) << env << attention;
    }
  }
  std::filesystem::remove_all(dir);
}

// Seed 000's Theorem 4 as it is meant: the weight products run over Z[w] with the Frobenius shim
// W pi^K applied at load (pi = w, norm 41) and divided out after each matvec give the committed
// digest bit for bit, for K = 0 (Z[w] without a shim) up to 18, the largest K whose shimmed
// stories260K weights fit int64 parts. K = 19 is refused with the overflow, never rounded.
TEST(ExactIdentity, ZOmegaRingWithTheFrobeniusShimKeepsTheDigest) {
  const auto dir = make_temp_dir("exact_zomega");
  for (const char* k : {"0", "1", "7", "18"}) {
    const auto out = dir / "logits.bin";
    const CommandResult r = run_command(cli_path().string() + " logits --exact --exact-ring zomega --frobenius " + k +
                                        " -m " + stories().string() + " --tokens " + token_list() +
                                        " -b 16 -t 2 --force -o " + out.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto json = nlohmann::json::parse(read_file(dir / "logits.json"));
    EXPECT_EQ(json["logits_sha256"], committed_digest()) << "--frobenius " << k;
  }
  const CommandResult over = run_cli("logits --exact --exact-ring zomega --frobenius 19 -m " + stories().string() +
                                     " --tokens 1,2 --force -o " + (dir / "x.bin").string());
  EXPECT_EQ(over.exit_code, 1) << over.output;
  EXPECT_NE(over.output.find("Frobenius shim pi^19 on weight"), std::string::npos) << over.output;
  EXPECT_NE(over.output.find("(--frobenius)"), std::string::npos) << over.output;  // the CLI names the flag
  EXPECT_NE(over.output.find("overflows int64"), std::string::npos) << over.output;
  std::filesystem::remove_all(dir);
}

// The first line of the CLI's stdout that starts with `prefix` (stderr is captured too).
std::string line_starting(const std::string& output, const std::string& prefix) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return line;
  return "";
}

TEST(ExactIdentity, CliGreedyTextIsTheSameForEveryThreadCount) {
  std::string first;
  for (const std::string env : {"", "OKAPI_FORCE_SCALAR=1 "}) {
    for (const char* threads : {"1", "2", "4"}) {
      for (const char* attention : {"ntt", "direct"}) {
        const CommandResult r = run_command(env + cli_path().string() + " run --exact --exact-attention " + attention +
                                            " -n 32 --temp 0 --json -t " + threads + " -p 'Once upon a time'");
        ASSERT_EQ(r.exit_code, 0) << r.output;
        const auto json = nlohmann::json::parse(line_starting(r.output, "{"));
        const std::string text = json["text"].get<std::string>() + " " + json["tokens"].dump();
        if (first.empty()) first = text;
        EXPECT_EQ(text, first) << env << " -t " << threads << " " << attention;
        EXPECT_EQ(json["generated_tokens"], 32);
      }
    }
  }
}

TEST(ExactIdentity, CliPerplexityLineIsTheSameForEveryThreadCount) {
  std::string first;
  for (const std::string env : {"", "OKAPI_FORCE_SCALAR=1 "}) {
    for (const char* threads : {"1", "2", "4"}) {
      const CommandResult r = run_command(env + cli_path().string() + " perplexity --exact -m " + stories().string() +
                                          " -f " + (repo_dir() / "examples/story.txt").string() + " -c 64 -t " + threads);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const std::string line = line_starting(r.output, "Final estimate") + " | " + line_starting(r.output, "[1]");
      ASSERT_NE(line.find("PPL = "), std::string::npos) << r.output;
      if (first.empty()) first = line;
      EXPECT_EQ(line, first) << env << " -t " << threads;
    }
  }
}

TEST(ExactIdentity, CliRejectsBadExactFlags) {
  const std::string model = " -m " + stories().string();
  CommandResult r = run_cli("run --exact --exact-attention fft -n 1" + model);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("'direct', 'ntt' or 'ntt-crt'"), std::string::npos) << r.output;
  r = run_cli("run --exact-attention direct -n 1" + model);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("needs --exact"), std::string::npos) << r.output;
  r = run_cli("run --exact --exact-ring rational -n 1" + model);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_cli("run --exact --frobenius 3 -n 1" + model);
  EXPECT_NE(r.output.find("--frobenius needs --exact-ring zomega"), std::string::npos) << r.output;
  r = run_cli("run --exact-ring zomega -n 1" + model);
  EXPECT_NE(r.output.find("--exact-ring needs --exact"), std::string::npos) << r.output;
  r = run_cli("bench --exact -ctk f16 -p 4 -n 0 -r 1" + model);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cannot be combined with --exact"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace okapi::test
