// Helpers for comparing okapi's logits with the golden dump_logits outputs of ../shared/golden:
// read a golden run (<prompt>.<kind>.json + its .f32 rows), compute okapi's logits for the same
// token ids in one batch or token by token, and measure max |Δ|, top-1 agreement and KL.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "kv/kv_store.hpp"
#include "backend/cpu_ops.hpp"
#include "model/evaluate.hpp"
#include "model/model.hpp"
#include "support/paths.hpp"
#include "tokenizer/tokenizer.hpp"
#include "support/cache_types.hpp"

namespace okapi::test {

// The golden data sets: llama.cpp's (golden/public) and ik_llama.cpp's (golden/ik/public, with
// float64 reference logits).
inline std::filesystem::path public_models() { return okapi::shared_dir() / "golden/public/models"; }
inline std::filesystem::path public_logits() { return okapi::shared_dir() / "golden/public/logits"; }
inline std::filesystem::path ik_models() { return okapi::shared_dir() / "golden/ik/public/models"; }
inline std::filesystem::path ik_logits() { return okapi::shared_dir() / "golden/ik/public/logits"; }
inline std::filesystem::path ik_ref_logits() { return okapi::shared_dir() / "golden/ik/public/ref_logits"; }

inline const std::vector<std::string>& golden_prompts() {
  static const std::vector<std::string> prompts = {"A1_lily", "A2_fox", "A3_wikitext", "A4_digits_punct"};
  return prompts;
}

struct GoldenRun {
  std::string prompt_text;
  std::vector<int32_t> tokens;
  int64_t n_vocab = 0;
  int64_t rows = 0;            // rows stored in `logits`
  int64_t first_position = 0;  // position of the first stored row
  std::vector<float> logits;   // [rows x n_vocab]
  std::vector<int32_t> top1;   // golden argmax at every position (from the JSON's top-k)
  std::vector<float> top_gap;  // golden top-1 minus top-2 logit at every position
  std::vector<std::vector<std::pair<int32_t, float>>> top;  // golden top-k (id, logit) per position
};

inline std::vector<float> read_f32(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  in.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(in.tellg());
  in.seekg(0);
  std::vector<float> v(size / sizeof(float));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

// `json_path` is e.g. .../A1_lily.kvf32.json; the logits file is named inside it.
inline GoldenRun load_golden(const std::filesystem::path& json_path) {
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  GoldenRun g;
  g.prompt_text = j.at("prompt_text").get<std::string>();
  g.tokens = j.at("tokens").get<std::vector<int32_t>>();
  g.n_vocab = j.at("n_vocab").get<int64_t>();
  g.rows = j.at("logits_rows").get<int64_t>();
  g.first_position = j.at("logits_first_position").get<int64_t>();
  g.logits = read_f32(json_path.parent_path() / j.at("logits_file").get<std::string>());
  EXPECT_EQ(static_cast<int64_t>(g.logits.size()), g.rows * g.n_vocab) << json_path;
  for (const auto& pos : j.at("top")) {
    g.top1.push_back(pos.at(0).at(0).get<int32_t>());
    g.top_gap.push_back(pos.at(0).at(1).get<float>() - pos.at(1).at(1).get<float>());
    std::vector<std::pair<int32_t, float>> top;
    for (const auto& item : pos) top.emplace_back(item.at(0).get<int32_t>(), item.at(1).get<float>());
    g.top.push_back(std::move(top));
  }
  return g;
}

struct Comparison {
  double max_abs = 0;       // over the stored golden rows
  int64_t top1_agree = 0;   // over every position
  int64_t positions = 0;
  double kl_max = 0;        // KL(golden || okapi) over the stored rows, nats
  double kl_sum = 0;
  int64_t kl_rows = 0;
  double max_disagree_gap = 0;  // largest golden top-1/top-2 gap where the argmax differs
  int64_t near_tie_agree = 0;   // positions where okapi's argmax is within kNearTie of golden's top-1
};

// Quantized weights: both engines quantize activations at every mat-mul, and a summation-order
// difference that flips one rounding moves logits by up to ~0.06 (llama.cpp's own batch vs
// incremental: 0.02-0.3 with argmax flips, README §5). A pick whose golden logit is within this
// of the golden maximum is a near-tie, not a disagreement.
inline constexpr float kNearTie = 0.12f;

inline int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

inline double kl_divergence(const float* p_logits, const float* q_logits, int64_t n) {
  const double pm = *std::max_element(p_logits, p_logits + n), qm = *std::max_element(q_logits, q_logits + n);
  double ps = 0, qs = 0;
  for (int64_t i = 0; i < n; ++i) {
    ps += std::exp(p_logits[i] - pm);
    qs += std::exp(q_logits[i] - qm);
  }
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double lp = p_logits[i] - pm - std::log(ps), lq = q_logits[i] - qm - std::log(qs);
    kl += std::exp(lp) * (lp - lq);
  }
  return std::max(0.0, kl);
}

inline void accumulate(Comparison& c, const GoldenRun& g, const std::vector<float>& mine, float near_tie = kNearTie) {
  const int64_t n = g.n_vocab;
  for (int64_t r = 0; r < g.rows; ++r) {
    const float* a = mine.data() + (g.first_position + r) * n;
    const float* b = g.logits.data() + r * n;
    for (int64_t i = 0; i < n; ++i) c.max_abs = std::max(c.max_abs, static_cast<double>(std::fabs(a[i] - b[i])));
    const double kl = kl_divergence(b, a, n);
    c.kl_max = std::max(c.kl_max, kl);
    c.kl_sum += kl;
    ++c.kl_rows;
  }
  for (size_t t = 0; t < g.top1.size(); ++t) {
    const bool agree = argmax(mine.data() + static_cast<int64_t>(t) * n, n) == g.top1[t];
    c.top1_agree += agree;
    if (!agree) c.max_disagree_gap = std::max(c.max_disagree_gap, static_cast<double>(g.top_gap[t]));
    const int32_t pick = argmax(mine.data() + static_cast<int64_t>(t) * n, n);
    bool near = false;
    for (const auto& [id, logit] : g.top[t]) near = near || (id == pick && logit >= g.top[t][0].second - near_tie);
    c.near_tie_agree += near;
    ++c.positions;
  }
}

// A model loaded once, evaluated on many token sequences with a fresh KV store each time.
class LoadedModel {
 public:
  explicit LoadedModel(const std::filesystem::path& path, int threads = 2)
      : model_(model::Model::load(gguf::File::open(path))), pool_(threads), ops_(&pool_) {
    ops_.prepare(model_->weights());
  }
  const model::Model& model() const { return *model_; }
  std::vector<float> logits(const std::vector<int32_t>& tokens, int64_t batch_size, const char* k_type = "f32",
                            const char* v_type = "f32") {
    const model::HParams& hp = model_->hparams();
    auto kv = ops_.make_kv({hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v,
                            static_cast<int64_t>(tokens.size())},
                           {test::cache_types(k_type, v_type), kv::ExactScores::Direct});
    return model::evaluate_all(*model_, ops_, *kv, tokens, batch_size);
  }

 private:
  std::unique_ptr<model::Model> model_;
  ThreadPool pool_;
  backend::CpuOps ops_;
};

inline void print_comparison(const std::string& label, const Comparison& c) {
  std::printf("  %-44s max|d| %.3g  top1 %lld/%lld (%lld within near-tie; flips at golden gaps <= %.3g)  KL max %.3g mean %.3g\n",
              label.c_str(), c.max_abs, static_cast<long long>(c.top1_agree), static_cast<long long>(c.positions),
              static_cast<long long>(c.near_tie_agree), c.max_disagree_gap, c.kl_max, c.kl_rows ? c.kl_sum / static_cast<double>(c.kl_rows) : 0.0);
}

struct GoldenCase {
  std::string model_file;      // under models_dir
  std::string logits_dir;      // under logits root
  std::string kind;            // "kvf32", "k32v16", or "" for the primary (F16 KV) golden
  const char* k_type = "f32";  // okapi's cache for the comparison
  const char* v_type = "f32";
  double max_abs = 0;          // bound on max |Δ| over stored rows (<= 0: not checked)
  double min_top1 = 1.0;       // fraction of positions whose argmax agrees (near-ties count, see kNearTie)
  double min_strict_top1 = 0;  // fraction whose argmax agrees exactly
  double max_incr_diff = 0;    // > 0: bound on okapi batch vs token-by-token, every position
  float near_tie = kNearTie;   // see kNearTie
};

// The case for model `name` (name.gguf, logits in name/) against llama.cpp's F32-KV golden
// (<prompt>.kvf32.json) with okapi's F32 cache.
inline GoldenCase kvf32_case(const std::string& name, double max_abs, double min_top1, double min_strict_top1,
                             double max_incr_diff = 0) {
  return {name + ".gguf", name, "kvf32", "f32", "f32", max_abs, min_top1, min_strict_top1, max_incr_diff};
}
// The same against ik_llama's K F32 / V F16 golden (<prompt>.k32v16.json) with the same cache types.
inline GoldenCase k32v16_case(const std::string& name, double max_abs, double min_top1, double min_strict_top1,
                              double max_incr_diff = 0) {
  return {name + ".gguf", name, "k32v16", "f32", "f16", max_abs, min_top1, min_strict_top1, max_incr_diff};
}

// Runs every prompt in one batch and token by token; checks token ids, max |Δ| and top-1.
inline void check_golden_case(const std::filesystem::path& models_dir, const std::filesystem::path& logits_root,
                              const GoldenCase& gc) {
  LoadedModel m(models_dir / gc.model_file);
  const tokenizer::Tokenizer tok(tokenizer::Vocab::from_gguf(m.model().file()));
  Comparison batch, incr;
  double incr_diff = 0;
  for (const std::string& prompt : golden_prompts()) {
    const std::string json_name = gc.kind.empty() ? prompt + ".json" : prompt + "." + gc.kind + ".json";
    const GoldenRun g = load_golden(logits_root / gc.logits_dir / json_name);
    tokenizer::EncodeOptions options;
    options.add_special = true;
    options.parse_special = true;
    const auto ids = tok.encode(g.prompt_text, options);
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.end()), g.tokens) << gc.model_file << " " << prompt;
    const std::vector<float> all = m.logits(g.tokens, 512, gc.k_type, gc.v_type);
    const std::vector<float> one = m.logits(g.tokens, 1, gc.k_type, gc.v_type);
    for (size_t i = 0; i < all.size(); ++i) incr_diff = std::max(incr_diff, static_cast<double>(std::fabs(all[i] - one[i])));
    accumulate(batch, g, all, gc.near_tie);
    accumulate(incr, g, one, gc.near_tie);
  }
  print_comparison(gc.model_file + " batch", batch);
  print_comparison(gc.model_file + " token-by-token", incr);
  std::printf("  %-44s okapi batch vs token-by-token, all positions: max|d| %.3g\n", gc.model_file.c_str(), incr_diff);
  if (gc.max_incr_diff > 0) {
    EXPECT_LE(incr_diff, gc.max_incr_diff) << gc.model_file;
  }
  for (const Comparison* c : {&batch, &incr}) {
    if (gc.max_abs > 0) {
      EXPECT_LE(c->max_abs, gc.max_abs) << gc.model_file;
    }
    EXPECT_GE(static_cast<double>(c->near_tie_agree), gc.min_top1 * static_cast<double>(c->positions)) << gc.model_file;
    EXPECT_GE(static_cast<double>(c->top1_agree), gc.min_strict_top1 * static_cast<double>(c->positions))
        << gc.model_file;
  }
}

// check_golden_case on llama.cpp's golden set (golden/public) or ik_llama.cpp's (golden/ik/public).
inline void check_public_golden(const GoldenCase& gc) { check_golden_case(public_models(), public_logits(), gc); }
inline void check_ik_golden(const GoldenCase& gc) { check_golden_case(ik_models(), ik_logits(), gc); }

}  // namespace okapi::test
