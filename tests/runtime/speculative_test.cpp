// Speculative decoding: greedy output is byte-identical with every drafter (float and exact mode,
// several KV store types), the rejection rule keeps the target's next-token distribution (and a
// wrong rule is caught by the same check), and bad drafters are clear errors.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "runtime/drafters.hpp"
#include "runtime/engine.hpp"
#include "runtime/scheduler.hpp"
#include "runtime/speculative.hpp"
#include "sample/sampler.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"
#include "support/tiny_models.hpp"
#include "support/cache_types.hpp"

namespace okapi::runtime {
namespace {

const std::filesystem::path kModel = test::repo_dir() / "models" / "stories260K.gguf";

// 100 prompts: word windows of examples/story.txt and of the reference story (2 to 13 words).
std::vector<std::string> prompts() {
  std::string text = test::read_file(test::repo_dir() / "examples/story.txt") + " " +
                     test::read_file(test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt");
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<std::string> out;
  for (size_t i = 0; out.size() < 100; ++i) {
    const size_t start = (i * 7) % (words.size() - 16);
    const size_t len = 2 + i % 12;
    std::string p;
    for (size_t j = 0; j < len; ++j) p += (j ? " " : "") + words[start + j];
    out.push_back(p);
  }
  return out;
}

// A compressed copy of stories260K (seed 003's self-drafter), made once per test binary.
const std::filesystem::path& compressed_model() {
  static const std::filesystem::path path = [] {
    const auto dir = test::make_temp_dir("speculative");
    const auto out = dir / "stories260K-lr.gguf";
    const auto r = test::run_cli("compress -m " + test::shell_quote(kModel.string()) + " -o " +
                                 test::shell_quote(out.string()) + " --method svd --ratio 0.2 -t 1");
    if (r.exit_code != 0) throw Error("compress failed: " + r.output);
    return out;
  }();
  return path;
}

// A target with one drafter kind: a one-slot scheduler drafting with it (as okapi run), and a
// cache of its own with a drafter on it (for looking at single distributions).
struct Rig {
  std::unique_ptr<Engine> target;
  std::optional<DrafterFactory> drafters;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<kv::KvStore> kv;
  std::unique_ptr<Drafter> drafter;  // on kv; null for Kind::None
  std::string name() const { return drafters ? std::string(drafters->name()) : "none"; }
};

enum class Kind { None, Lookup, DraftModel, LayerSkip };

Rig make_rig(Kind kind, bool exact, const std::string& cache = "f32", int draft_max = 6) {
  EngineOptions options{1, test::cache_types(cache, cache)};
  options.exact = exact;
  Rig s;
  s.target = Engine::load(kModel, options);
  DrafterOptions drafting;
  drafting.p_min = 0.0f;  // draft to the limit: the most verification work
  drafting.draft_max = draft_max;
  switch (kind) {
    case Kind::None: break;
    case Kind::Lookup: drafting.lookup = 3; break;
    case Kind::DraftModel: drafting.draft_model = compressed_model().string(); break;
    case Kind::LayerSkip: drafting.skip_layers = "3-4"; break;
  }
  if (drafting.enabled()) s.drafters.emplace(drafting, *s.target, options);
  SchedulerOptions so;
  so.n_ctx_per_slot = 256;
  so.worker_thread = false;
  so.drafters = s.drafters ? &*s.drafters : nullptr;
  so.drafter_seed = 5;
  s.scheduler = std::make_unique<Scheduler>(*s.target, so);
  s.kv = s.target->make_kv(256);
  if (s.drafters) s.drafter = s.drafters->make(*s.kv, 5);
  return s;
}

// Each prompt after the first reuses the slot's cached prefix, as okapi serve and chat do: the
// text must still be what a fresh cache gives.
GenerationResult generate(Rig& s, const std::string& prompt, sample::SamplerConfig config, int64_t n_predict) {
  SequenceRequest request;
  request.prompt = tokenize_prompt(s.target->tokenizer(), prompt);
  request.sampling = config;
  request.max_tokens = n_predict;
  return runtime::generate(*s.scheduler, std::move(request));
}

sample::SamplerConfig greedy() {
  sample::SamplerConfig c;
  c.temperature = 0.0f;
  return c;
}

void expect_greedy_identity(bool exact, int n_prompts, int64_t n_predict) {
  const auto all = prompts();
  Rig plain = make_rig(Kind::None, exact);
  std::vector<std::string> expected;
  for (int i = 0; i < n_prompts; ++i) expected.push_back(generate(plain, all[static_cast<size_t>(i)], greedy(), n_predict).text);
  for (const Kind kind : {Kind::Lookup, Kind::DraftModel, Kind::LayerSkip}) {
    Rig s = make_rig(kind, exact);
    int64_t drafted = 0, accepted = 0;
    for (int i = 0; i < n_prompts; ++i) {
      const GenerationResult r = generate(s, all[static_cast<size_t>(i)], greedy(), n_predict);
      ASSERT_EQ(r.text, expected[static_cast<size_t>(i)]) << s.name() << ", prompt " << i << ": '" << all[static_cast<size_t>(i)] << "'";
      drafted += r.stats.drafted_tokens;
      accepted += r.stats.accepted_tokens;
    }
    // Drafts were made and verified both ways (a drafter that never drafts proves nothing).
    EXPECT_GT(drafted, 0) << s.name();
    EXPECT_GT(accepted, 0) << s.name();
    EXPECT_LT(accepted, drafted) << s.name();
  }
}

TEST(Speculative, GreedyOutputIsByteIdenticalWithEveryDrafter) { expect_greedy_identity(false, 100, 40); }

TEST(Speculative, GreedyOutputIsByteIdenticalInExactMode) { expect_greedy_identity(true, 100, 24); }

TEST(Speculative, RejectedDraftsAreRolledBackInEveryStoreType) {
  const auto all = prompts();
  for (const std::string cache : {"f16", "bf16", "tbq3.5", "sp-full"}) {
    Rig plain = make_rig(Kind::None, false, cache);
    Rig spec = make_rig(Kind::LayerSkip, false, cache);
    for (int i = 0; i < 12; ++i) {
      const std::string& p = all[static_cast<size_t>(i * 7)];
      EXPECT_EQ(generate(spec, p, greedy(), 48).text, generate(plain, p, greedy(), 48).text) << cache << ": '" << p << "'";
    }
  }
}

TEST(Speculative, StopsExactlyAsPlainDecoding) {
  // A token limit inside a round of drafts, an end-of-generation token, and a full context.
  Rig plain = make_rig(Kind::None, false);
  Rig spec = make_rig(Kind::DraftModel, false, "f32", 8);
  for (const int64_t n : {1, 2, 3, 7, 17}) {
    const auto a = generate(plain, "Once upon a time", greedy(), n);
    const auto b = generate(spec, "Once upon a time", greedy(), n);
    EXPECT_EQ(a.tokens, b.tokens) << n;
    EXPECT_EQ(a.stop, b.stop) << n;
  }
  const auto a = generate(plain, "Once upon a time", greedy(), -1);
  const auto b = generate(spec, "Once upon a time", greedy(), -1);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.stop, b.stop);  // end of generation or the 256-cell context
  EXPECT_NE(a.stop, StopReason::TokenLimit);
}

// The target's next-token distribution p after the sampler chain (temperature 1, top-k 40,
// top-p 0.95) against what draft-then-verify emits for it, over 10^6 seeded rounds.
sample::SamplerConfig sampling() {
  sample::SamplerConfig c;
  c.temperature = 1.0f;
  c.top_k = 40;
  c.top_p = 0.95f;
  c.min_p = 0.0f;
  c.seed = 1234;
  return c;
}

struct Distributions {
  sample::Candidates p;
  std::vector<DraftToken> q_draws;  // one drafter call's first draft (its q) or a lookup proposal
};

// p from stories260K after `context`, and the drafter's first proposal with its q.
Distributions distributions(Kind kind, const std::string& prompt) {
  Rig s = make_rig(kind, false);
  const auto tokens = tokenize_prompt(s.target->tokenizer(), prompt);
  std::vector<float> logits(static_cast<size_t>(s.target->model().n_vocab()));
  std::vector<int32_t> positions(tokens.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  s.target->model().forward(s.target->ops(), *s.kv, tokens, positions, model::LogitRows::Last, logits.data());
  sample::Sampler sampler(sampling());
  for (const auto t : tokens) sampler.accept(t);
  Distributions d;
  d.p = sampler.distribution(logits);
  // The drafter sees the context as the target has it: the prompt only.
  d.q_draws = s.drafter->draft(tokens, 1, sampler);
  return d;
}

// Total-variation distance between p and the first token emitted by `rule` over `rounds` rounds,
// drafts drawn from q (or the lookup proposal, prob 1).
template <typename Rule>
double total_variation(const Distributions& d, int rounds, Rule rule) {
  sample::Sampler rng(sampling());
  std::mt19937 draft_rng(99);
  std::map<TokenId, int64_t> counts;
  const DraftToken& proposal = d.q_draws.front();
  std::vector<double> q_weights;
  for (const auto& c : proposal.q.items) q_weights.push_back(c.p);
  std::discrete_distribution<int> q_pick(q_weights.begin(), q_weights.end());
  for (int i = 0; i < rounds; ++i) {
    DraftToken draft;
    if (proposal.q.items.empty()) {
      draft.id = proposal.id;
    } else {
      draft.id = proposal.q.items[static_cast<size_t>(q_pick(draft_rng))].id;
      draft.q = proposal.q;
    }
    ++counts[rule(d.p, draft, rng)];
  }
  double tv = 0;
  std::map<TokenId, double> p;
  for (const auto& c : d.p.items) p[c.id] = c.p;
  for (const auto& [id, n] : counts) p.try_emplace(id, 0.0);
  for (const auto& [id, prob] : p) {
    const auto it = counts.find(id);
    const double seen = it == counts.end() ? 0.0 : static_cast<double>(it->second) / rounds;
    tv += std::abs(seen - prob);
  }
  return tv / 2;
}

TEST(Speculative, SampledTokensKeepTheTargetDistributionAndAWrongRuleIsCaught) {
  constexpr int kRounds = 1'000'000;
  const auto right = [](const sample::Candidates& p, const DraftToken& draft, sample::Sampler& rng) {
    return verify_draft(p, draft, rng).token;
  };
  // A wrong rule: accept as the right one does, but on rejection draw from p instead of the
  // residual max(0, p - q), which over-weights the drafted tokens.
  const auto wrong = [](const sample::Candidates& p, const DraftToken& draft, sample::Sampler& rng) {
    const float q_x = draft.q.items.empty() ? 1.0f : probability_of(draft.q, draft.id);
    if (rng.uniform() < probability_of(p, draft.id) / q_x) return draft.id;
    return rng.draw_from(p);
  };
  // Lookup needs a repeated n-gram to propose anything.
  const std::string repeated = "Tom had a red ball. Tom had a";
  for (const Kind kind : {Kind::Lookup, Kind::DraftModel, Kind::LayerSkip}) {
    const Distributions d = distributions(kind, kind == Kind::Lookup ? repeated : "Once upon a time, there was a");
    ASSERT_FALSE(d.q_draws.empty());
    ASSERT_GT(d.p.items.size(), 3u);  // a real distribution, not a near-certain token
    const double tv = total_variation(d, kRounds, right);
    EXPECT_LE(tv, 0.005) << static_cast<int>(kind);
    const double tv_wrong = total_variation(d, kRounds, wrong);
    EXPECT_GT(tv_wrong, 0.005) << static_cast<int>(kind);
  }
}

TEST(Speculative, VerifyDraftFollowsTheRuleOnHandMadeDistributions) {
  sample::Sampler rng(sampling());
  sample::Candidates p;
  p.items = {{1, 0, 0.5f}, {2, 0, 0.3f}, {3, 0, 0.2f}};
  // A draft the target likes more than the drafter always passes.
  sample::Candidates q;
  q.items = {{1, 0, 0.2f}, {2, 0, 0.8f}};
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(verify_draft(p, {1, q}, rng).accepted);
  // Greedy p (one candidate): accepted exactly when it is the argmax, and then no draw is made.
  sample::Candidates one;
  one.items = {{7, 0, 1.0f}};
  EXPECT_TRUE(verify_draft(one, {7, {}}, rng).accepted);
  const Verdict v = verify_draft(one, {8, {}}, rng);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.token, 7);
  // A token outside p never passes; the replacement comes from p.
  for (int i = 0; i < 100; ++i) {
    const Verdict r = verify_draft(p, {9, {}}, rng);
    EXPECT_FALSE(r.accepted);
    EXPECT_TRUE(r.token >= 1 && r.token <= 3);
  }
}

TEST(Speculative, LookupProposesWhatFollowedTheLatestLongestMatch) {
  LookupDrafter lookup(3);
  sample::Sampler sampler(greedy());
  const std::vector<TokenId> context = {5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 5, 6, 7};
  const auto d = lookup.draft(context, 4, sampler);
  ASSERT_EQ(d.size(), 4u);  // "5 6 7" last occurred before "1 2 5 6"
  EXPECT_EQ(d[0].id, 1);
  EXPECT_EQ(d[1].id, 2);
  EXPECT_EQ(d[2].id, 5);
  EXPECT_EQ(d[3].id, 6);
  EXPECT_TRUE(lookup.draft(std::vector<TokenId>{1, 2, 3}, 4, sampler).empty());
  EXPECT_THROW(LookupDrafter(0), Error);
}

TEST(Speculative, LayerListsParseAndBadOnesAreErrors) {
  const auto skip = parse_layer_list("0,2-3", 5);
  EXPECT_EQ(skip, (std::vector<uint8_t>{1, 0, 1, 1, 0}));
  for (const std::string bad : {"", "x", "1,", "3-1", "5", "0-4", "-1", "1--2"})
    EXPECT_THROW(parse_layer_list(bad, 5), Error) << bad;
}

TEST(Speculative, BadDraftersAreClearErrors) {
  const auto dir = test::make_temp_dir("speculative-bad");
  // Another vocabulary.
  const auto other = dir / "tiny-llama.gguf";
  {
    const auto bytes = test::tiny_model("llama");
    std::ofstream(other, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                  static_cast<std::streamsize>(bytes.size()));
  }
  auto r = test::run_cli("run -m " + test::shell_quote(kModel.string()) + " -n 4 --draft-model " +
                         test::shell_quote(other.string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("okapi: error:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("vocabular"), std::string::npos) << r.output;
  // A corrupt file.
  const auto corrupt = dir / "corrupt.gguf";
  std::ofstream(corrupt, std::ios::binary) << "GGUF\x03";
  r = test::run_cli("run -m " + test::shell_quote(kModel.string()) + " -n 4 -md " + test::shell_quote(corrupt.string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("okapi: error:"), std::string::npos) << r.output;
  // An architecture that cannot skip layers.
  const auto gemma = dir / "tiny-gemma3.gguf";
  {
    const auto bytes = test::tiny_model("gemma3");
    std::ofstream(gemma, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                  static_cast<std::streamsize>(bytes.size()));
  }
  r = test::run_cli("run -m " + test::shell_quote(gemma.string()) + " -n 4 --draft-skip 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("cannot skip layers"), std::string::npos) << r.output;
  // Usage errors: two drafters, a bad layer list, --draft-min above --draft-max.
  for (const std::string args : {"--lookup 2 --draft-skip 1", "--draft-skip 9", "--draft-max 2 --draft-min 3",
                                 "--lookup 0", "--draft-p-min 2"}) {
    r = test::run_cli("run -n 4 " + args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find("okapi: error:"), std::string::npos) << args << ": " << r.output;
  }
}

TEST(Speculative, RunReportsDraftsInItsTimingsAndJson) {
  const std::string args = "run -n 48 --temp 0 -p " + test::shell_quote("Tom had a red ball. Tom had a red") + " --lookup 3";
  const auto out = test::run_command("( " + test::shell_quote(test::cli_path().string()) + " " + args + " --json 2>/dev/null )");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const auto json = nlohmann::json::parse(out.output);
  EXPECT_EQ(json["drafter"], "lookup");
  EXPECT_GT(json["n_drafted"].get<int64_t>(), 0);
  EXPECT_GE(json["n_drafted"].get<int64_t>(), json["n_accepted"].get<int64_t>());
  EXPECT_LT(json["decode_passes"].get<int64_t>(), 48);
  const auto r = test::run_cli(args);
  EXPECT_NE(r.output.find("okapi: speculative (lookup):"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace okapi::runtime
