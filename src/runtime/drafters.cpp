#include "runtime/drafters.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.hpp"

namespace okapi::runtime {

LookupDrafter::LookupDrafter(int max_ngram) : max_ngram_(max_ngram) {
  if (max_ngram < 1) throw_error("prompt lookup matches at least 1 token, got {}", max_ngram);
}

std::vector<DraftToken> LookupDrafter::draft(std::span<const TokenId> context, int max, const sample::Sampler&) {
  std::vector<DraftToken> out;
  const auto n = static_cast<int64_t>(context.size());
  if (max <= 0 || n < 2) return out;
  // Longest suffix first; the latest earlier occurrence of it wins (the freshest continuation).
  for (int64_t len = std::min<int64_t>(max_ngram_, n - 1); len >= 1; --len) {
    const auto suffix = context.subspan(static_cast<size_t>(n - len));
    for (int64_t start = n - len - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + start)) continue;
      const int64_t follow = start + len;  // < n: the occurrence ends before the suffix does
      const int64_t count = std::min<int64_t>(max, n - follow);
      for (int64_t i = 0; i < count; ++i) out.push_back({context[static_cast<size_t>(follow + i)], {}});
      return out;
    }
  }
  return out;
}

namespace {
// The probability of `id` at temperature 1 (greedy q is one-hot whatever the logits): a full pass
// over the vocabulary, so only made when --draft-p-min asks for it.
double confidence(std::span<const float> logits, TokenId id) {
  const float top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float l : logits) sum += std::exp(static_cast<double>(l - top));
  return std::exp(static_cast<double>(logits[static_cast<size_t>(id)] - top)) / sum;
}
}  // namespace

ModelDrafter::ModelDrafter(Engine& engine, kv::KvStore& target_kv, std::string name, ModelDrafterOptions options)
    : ModelDrafter(engine, nullptr, std::move(name), std::move(options)) {
  kv_ = &target_kv;
  shares_target_cache_ = true;
}

ModelDrafter::ModelDrafter(Engine& engine, std::unique_ptr<kv::KvStore> kv, std::string name, ModelDrafterOptions options)
    : engine_(engine),
      own_kv_(std::move(kv)),
      kv_(own_kv_.get()),
      shares_target_cache_(false),
      name_(std::move(name)),
      options_(std::move(options)),
      logits_(static_cast<size_t>(engine.model().n_vocab())),
      rng_(options_.seed) {
  if (!options_.skip_layers.empty() &&
      static_cast<int64_t>(options_.skip_layers.size()) != engine.hparams().n_layer)
    throw_error("layer skip: {} flags for a model of {} layers", options_.skip_layers.size(), engine.hparams().n_layer);
}

void ModelDrafter::reset() {
  cached_.clear();
  if (!shares_target_cache_) kv_->truncate(0);
}

void ModelDrafter::prefill(std::span<const TokenId> prompt) {
  // A layer-skip drafter reads the target's cells; it has nothing of its own to fill.
  if (!shares_target_cache_ && !prompt.empty()) catch_up(prompt);
}

void ModelDrafter::forward(std::span<const TokenId> tokens, int64_t first_position) {
  std::vector<int32_t> positions(tokens.size());
  std::iota(positions.begin(), positions.end(), static_cast<int32_t>(first_position));
  const model::Model& model = engine_.model();
  if (options_.skip_layers.empty()) {
    model.forward(engine_.ops(), *kv_, tokens, positions, model::LogitRows::Last, logits_.data());
  } else {
    model.forward_skipping(engine_.ops(), *kv_, tokens, positions, model::LogitRows::Last, logits_.data(),
                           options_.skip_layers);
  }
  cached_.insert(cached_.end(), tokens.begin(), tokens.end());
}

size_t ModelDrafter::catch_up(std::span<const TokenId> context) {
  if (shares_target_cache_) {
    // The target's cells hold everything but the newest token, which it has not run yet.
    cached_.assign(context.begin(), context.end() - 1);
    forward(context.last(1), static_cast<int64_t>(context.size()) - 1);
    return 1;
  }
  size_t common = 0;
  while (common < cached_.size() && common < context.size() && cached_[common] == context[common]) ++common;
  // The last token is run again when it is cached already: its logits are the ones needed.
  if (common == context.size()) --common;
  // A cache with sliding-window rings may have overwritten what an older prefix needs.
  common = static_cast<size_t>(kv_->kept_prefix(static_cast<int64_t>(common)));
  cached_.resize(common);
  kv_->truncate(static_cast<int64_t>(common));
  // In batches of the size the cache was checked for (prompts can be long).
  constexpr size_t kBatch = 512;
  for (size_t begin = common; begin < context.size(); begin += kBatch) {
    const size_t count = std::min(kBatch, context.size() - begin);
    forward(context.subspan(begin, count), static_cast<int64_t>(begin));
  }
  return context.size() - common;
}

std::vector<DraftToken> ModelDrafter::draft(std::span<const TokenId> context, int max, const sample::Sampler& target) {
  std::vector<DraftToken> out;
  if (max <= 0 || context.empty()) return out;
  const double start = now_seconds();
  const size_t ran = catch_up(context);
  last_catch_up_ = {static_cast<int>(ran), now_seconds() - start};
  // The target's chain and penalty window, with the drafter's own RNG stream.
  sample::Sampler chain = target;
  chain.reseed(static_cast<uint32_t>(rng_()));
  const int64_t n_ctx = kv_->n_ctx();
  for (int i = 0; i < max; ++i) {
    sample::Candidates q = chain.distribution(logits_);
    const TokenId id = chain.draw_from(q);
    if (options_.p_min > 0.0f && confidence(logits_, id) < options_.p_min) break;
    chain.accept(id);
    out.push_back({id, std::move(q)});
    const auto position = static_cast<int64_t>(cached_.size());
    if (i + 1 == max || position >= n_ctx) break;
    forward(std::span<const TokenId>(&out.back().id, 1), position);
  }
  return out;
}

DrafterFactory::DrafterFactory(const DrafterOptions& options, Engine& target, const EngineOptions& engine_options)
    : options_(options), target_(target) {
  if (options_.draft_min > options_.draft_max)
    throw_error_for(Setting::DraftLength, "at least {} drafts a round were asked for, but at most {}", options_.draft_min, options_.draft_max);
  if (options_.lookup > 0) {
    name_ = "lookup";
  } else if (!options_.draft_model.empty()) {
    draft_engine_ = Engine::load_sharing_threads(options_.draft_model, engine_options, target);
    check_draft_vocabulary(target, *draft_engine_);
    name_ = "draft model";
  } else if (!options_.skip_layers.empty()) {
    skip_layers_ = parse_layer_list(options_.skip_layers, target.hparams().n_layer);
    if (!target.model().can_skip_layers())
      throw_error_for(Setting::DraftSkip, "the {} architecture cannot skip layers (llama, qwen2, qwen3 and bitnet can)", target.hparams().arch);
    name_ = "layer skip " + options_.skip_layers;
  }
}

std::unique_ptr<Drafter> DrafterFactory::make(kv::KvStore& slot_kv, uint32_t seed) const {
  ModelDrafterOptions model_options;
  model_options.p_min = options_.p_min;
  model_options.seed = seed;
  if (options_.lookup > 0) return std::make_unique<LookupDrafter>(options_.lookup);
  if (draft_engine_) {
    auto kv = draft_engine_->make_kv(slot_kv.n_ctx(), {.batch = 512});
    return std::make_unique<ModelDrafter>(*draft_engine_, std::move(kv), name_, model_options);
  }
  if (!skip_layers_.empty()) {
    model_options.skip_layers = skip_layers_;
    return std::make_unique<ModelDrafter>(target_, slot_kv, name_, model_options);
  }
  return nullptr;
}

void check_draft_vocabulary(const Engine& target, const Engine& draft) {
  const auto& a = target.tokenizer().vocab();
  const auto& b = draft.tokenizer().vocab();
  const std::string names = fmt::format("draft model {} and target {}", draft.path().string(), target.path().string());
  if (target.model().n_vocab() != draft.model().n_vocab() || a.size() != b.size())
    throw_error("{}: vocabularies differ in size ({} and {} tokens); a draft model must share the target's vocabulary",
                names, draft.model().n_vocab(), target.model().n_vocab());
  if (a.kind != b.kind) throw_error("{}: tokenizers differ (another tokenizer model)", names);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a.tokens[i] != b.tokens[i])
      throw_error("{}: vocabularies differ at token {} ('{}' and '{}')", names, i, b.tokens[i], a.tokens[i]);
  }
  if (a.bos != b.bos || a.eos != b.eos || a.eot != b.eot)
    throw_error("{}: special tokens differ (BOS {} / {}, EOS {} / {})", names, b.bos, a.bos, b.eos, a.eos);
}

std::vector<uint8_t> parse_layer_list(const std::string& list, int64_t n_layer) {
  std::vector<uint8_t> skip(static_cast<size_t>(n_layer), 0);
  const auto number = [&](const std::string& text) {
    if (text.empty() || text.size() > 9 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw_error_for(Setting::DraftSkip, "the layer list '{}': '{}' is not a layer number (a list like 1,3,5-7)", list, text);
    const int64_t v = std::stoll(text);
    if (v >= n_layer) throw_error_for(Setting::DraftSkip, "the layer list '{}': layer {} does not exist (the model has layers 0-{})", list, v, n_layer - 1);
    return v;
  };
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    const size_t dash = item.find('-');
    const int64_t lo = number(dash == std::string::npos ? item : item.substr(0, dash));
    const int64_t hi = dash == std::string::npos ? lo : number(item.substr(dash + 1));
    if (hi < lo) throw_error_for(Setting::DraftSkip, "the layer list '{}': the range {} runs backwards", list, item);
    for (int64_t l = lo; l <= hi; ++l) skip[static_cast<size_t>(l)] = 1;
    start = comma + 1;
  }
  if (std::all_of(skip.begin(), skip.end(), [](uint8_t s) { return s != 0; }))
    throw_error_for(Setting::DraftSkip, "the layer list '{}': every layer would be skipped", list);
  return skip;
}

}  // namespace okapi::runtime
