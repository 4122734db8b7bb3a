// The drafters of speculative decoding (runtime/speculative.hpp):
// - LookupDrafter (--lookup N): prompt lookup. The longest suffix of the context, N tokens down to
//   one, that occurred before: the tokens that followed its latest earlier occurrence (prob 1).
// - ModelDrafter: a model run autoregressively on its own KV cache, sampling each draft from its
//   own copy of the target's sampler chain (so q is a real distribution). It serves a separate
//   draft model with the target's vocabulary (--draft-model, including one made by `okapi
//   compress` from the target: seed 003's compressed self-drafter) and layer-skip self-drafting
//   (--draft-skip: the target itself with some layers left out).
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_store.hpp"
#include "runtime/engine.hpp"
#include "runtime/speculative.hpp"

namespace okapi::runtime {

class LookupDrafter final : public Drafter {
 public:
  // max_ngram >= 1: the longest suffix matched.
  explicit LookupDrafter(int max_ngram);
  std::string_view name() const override { return "lookup"; }
  std::vector<DraftToken> draft(std::span<const TokenId> context, int max, const sample::Sampler& target) override;

 private:
  int max_ngram_;
};

struct ModelDrafterOptions {
  float p_min = 0.0f;  // stop drafting when the drafted token's probability (temperature 1) is below
  // Layers left out of the forward pass (layer-skip self-drafting); empty: none.
  std::vector<uint8_t> skip_layers;
  uint32_t seed = 0;  // of the drafter's own RNG
};

class ModelDrafter final : public Drafter {
 public:
  // Drafts with `engine`'s model on `kv` (a cache of its own, as large as the target's context).
  // The model must share the target's vocabulary: check_draft_vocabulary() first.
  ModelDrafter(Engine& engine, std::unique_ptr<kv::KvStore> kv, std::string name, ModelDrafterOptions options);
  // Layer-skip self-drafting on the target's own cache (SWIFT, Draft & Verify): the cells of the
  // context are the target's, so there is no prompt to run twice, and the drafter's own writes
  // (its layers' K/V at the last token's and the drafts' positions) all lie in the cells the
  // target's verification pass writes next. `engine` is the target's, `target_kv` its cache.
  ModelDrafter(Engine& engine, kv::KvStore& target_kv, std::string name, ModelDrafterOptions options);
  std::string_view name() const override { return name_; }
  std::vector<DraftToken> draft(std::span<const TokenId> context, int max, const sample::Sampler& target) override;
  void reset() override;
  void prefill(std::span<const TokenId> prompt) override;
  CatchUp last_catch_up() const override { return last_catch_up_; }

 private:
  // Brings the cache to `context` (keeping the common prefix) and leaves the next token's logits;
  // returns the number of tokens run.
  size_t catch_up(std::span<const TokenId> context);
  void forward(std::span<const TokenId> tokens, int64_t first_position);
  Engine& engine_;
  std::unique_ptr<kv::KvStore> own_kv_;
  kv::KvStore* kv_;
  bool shares_target_cache_;
  std::string name_;
  ModelDrafterOptions options_;
  std::vector<TokenId> cached_;  // the tokens whose K/V the cache holds, in order
  std::vector<float> logits_;
  std::mt19937 rng_;
  CatchUp last_catch_up_;
};

// Which drafter speculative decoding uses (at most one kind), and how many tokens a round.
struct DrafterOptions {
  int lookup = 0;               // > 0: prompt lookup, matching up to this many tokens
  std::string draft_model;      // a draft model's file
  std::string skip_layers;      // layer-skip self-drafting: the layers left out ("1,3,5-7")
  int draft_max = 16;           // most drafts a round
  int draft_min = 0;            // fewer drafts than this are not verified
  float p_min = 0.0f;           // a model drafter stops below this probability of its pick
  bool enabled() const { return lookup > 0 || !draft_model.empty() || !skip_layers.empty(); }
};

// Makes the drafters of `options` for a target engine, one per sequence slot: loads and checks
// what they share once (a draft model on the target's thread pool, with the target's vocabulary;
// the layer list against the target's layers). Throws okapi::Error for a draft model that cannot
// draft for the target, a bad layer list or an architecture that cannot skip layers.
class DrafterFactory {
 public:
  DrafterFactory(const DrafterOptions& options, Engine& target, const EngineOptions& engine_options);
  // A drafter for the slot whose cache is `slot_kv` (a layer-skip drafter reads it; a draft
  // model gets a cache of its own as large), its RNG seeded with `seed`.
  std::unique_ptr<Drafter> make(kv::KvStore& slot_kv, uint32_t seed) const;
  const DrafterOptions& options() const { return options_; }
  std::string_view name() const { return name_; }  // "lookup", "draft model", "layer skip 1,3"

 private:
  DrafterOptions options_;
  Engine& target_;
  std::unique_ptr<Engine> draft_engine_;
  std::vector<uint8_t> skip_layers_;
  std::string name_;
};

// Throws okapi::Error naming both files when a draft model cannot draft for the target: another
// vocabulary size, other token texts or special tokens (the same id must mean the same token).
void check_draft_vocabulary(const Engine& target, const Engine& draft);

// --draft-skip LIST: "1,3,5-7" (0-based layer numbers, ranges inclusive) -> one flag per layer.
// Throws okapi::Error for a malformed list, a layer outside [0, n_layer), or all layers skipped.
std::vector<uint8_t> parse_layer_list(const std::string& list, int64_t n_layer);

}  // namespace okapi::runtime
