#include "model/hparams.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/problem_list.hpp"
#include "format/gguf.hpp"

namespace okapi::model {

namespace {

const gguf::Value* find_key(const gguf::File& file, std::string_view key) { return file.find(key); }

[[noreturn]] void missing(const gguf::File& file, std::string_view key) {
  throw_error("{}: missing required metadata key '{}'", file.name(), key);
}

// Some keys (feed_forward_length, head_count_kv) may be per-layer arrays; the first entry is used.
int64_t int_value(const gguf::File& file, std::string_view key, const gguf::Value& v) {
  if (v.is_array()) {
    const auto items = v.as_int_array();
    if (items.empty()) throw_error("{}: metadata key '{}' is an empty array", file.name(), key);
    return items.front();
  }
  return v.as_int();
}

// Reads the {arch}.* keys, recording every missing or malformed one instead of stopping at the
// first, so that one error lists all of them.
class KeyReader {
 public:
  KeyReader(const gguf::File& file, std::string arch, ProblemList& problems)
      : file_(file), prefix_(std::move(arch) + "."), problems_(problems) {}

  std::string key(std::string_view name) const { return prefix_ + std::string(name); }
  std::string quoted(std::string_view name) const { return fmt::format("'{}'", key(name)); }

  // The value, `fallback` when absent (nullopt: required), or 0 after recording a problem.
  // noinline: g++ 12 inlined into from_gguf reports the optional as maybe-uninitialized (a false positive).
  [[gnu::noinline]] int64_t integer(std::string_view name, std::optional<int64_t> fallback) {
    return read<int64_t>(name, fallback, [&](const gguf::Value& v) { return int_value(file_, key(name), v); });
  }
  float real(std::string_view name, std::optional<float> fallback) {
    return read<float>(name, fallback, [](const gguf::Value& v) { return static_cast<float>(v.as_double()); });
  }
  std::string text(std::string_view name, std::string fallback) {
    return read<std::string>(name, fallback, [](const gguf::Value& v) { return v.as_string(); });
  }
  bool flag(std::string_view name, bool fallback) {
    return read<bool>(name, fallback, [](const gguf::Value& v) { return v.as_bool(); });
  }
  bool present(std::string_view name) const { return find_key(file_, key(name)) != nullptr; }

 private:
  template <typename T, typename Convert>
  T read(std::string_view name, std::optional<T> fallback, Convert convert) {
    const gguf::Value* v = find_key(file_, key(name));
    if (!v) {
      if (!fallback) problems_.add("missing required metadata key '{}'", key(name));
      return fallback.value_or(T{});
    }
    try {
      return convert(*v);
    } catch (const Error& e) {
      problems_.add("metadata key '{}': {}", key(name), e.what());
      return T{};
    }
  }

  const gguf::File& file_;
  std::string prefix_;
  ProblemList& problems_;
};

// a * b, or nullopt when the product does not fit int64.
std::optional<int64_t> checked_product(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The block index N of a tensor named "blk.N.*", or nullopt for other names. Indices too large
// for any model saturate (they are reported by the block count check).
std::optional<int64_t> block_index(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const std::string_view rest = name.substr(kPrefix.size());
  const size_t dot = rest.find('.');
  const std::string_view digits = rest.substr(0, dot);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  int64_t index = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::numeric_limits<int64_t>::max() / 2;
  return index;
}

// Checks the hyper-parameters against the tensors actually in the file, so that metadata
// claiming a bigger (or different) model than the tensors hold is refused before anything is
// sized from it. Each problem names the metadata key(s) involved.
class TensorCheck {
 public:
  TensorCheck(const gguf::File& file, const HParams& hp, const KeyReader& keys, ProblemList& problems)
      : file_(file), hp_(hp), keys_(keys), problems_(problems) {}

  void block_count() {
    int64_t max_index = -1;
    for (const gguf::TensorInfo& t : file_.tensors())
      if (const auto index = block_index(t.name)) max_index = std::max(max_index, *index);
    const auto n_tensors = static_cast<int64_t>(file_.tensors().size());
    if (max_index < 0) {
      problems_.add("'{}' is {} but the file has no blk.N tensors", keys_.key("block_count"), hp_.n_layer);
    } else if (hp_.n_layer != max_index + 1) {
      problems_.add("'{}' is {} but the file's tensors go up to blk.{} ({} blocks)", keys_.key("block_count"),
                    hp_.n_layer, max_index, max_index + 1);
    } else if (hp_.n_layer > n_tensors) {
      // Every block holds tensors: a block index beyond the tensor count names blocks that cannot all exist.
      problems_.add("'{}' is {} but the file has only {} tensors", keys_.key("block_count"), hp_.n_layer, n_tensors);
    }
  }

  // Layer 0 pins the attention and FFN widths (the model constructors then check every layer).
  void layer_widths(const std::string& head_dim_k_key, const std::string& head_dim_v_key) {
    const std::string embd = keys_.quoted("embedding_length");
    const std::string heads = keys_.quoted("attention.head_count"), kv_heads = keys_.quoted("attention.head_count_kv");
    const auto product = [&](const std::string& a, int64_t x, const std::string& b, int64_t y) {
      const std::optional<int64_t> value = checked_product(x, y);
      const std::string result = value ? fmt::format(" = {}", *value) : std::string(" (overflows)");
      return Expected{fmt::format("{} {} x {} {}{}", a, x, b, y, result), value};
    };
    const auto single = [&](const std::string& key, int64_t value) {
      return Expected{fmt::format("{} {}", key, value), value};
    };
    const Expected n_embd = single(embd, hp_.n_embd);
    const Expected n_q = product(heads, hp_.n_head, head_dim_k_key, hp_.head_dim_k);
    const Expected n_k = product(kv_heads, hp_.n_head_kv, head_dim_k_key, hp_.head_dim_k);
    const Expected n_v = product(kv_heads, hp_.n_head_kv, head_dim_v_key, hp_.head_dim_v);
    const Expected n_o = product(heads, hp_.n_head, head_dim_v_key, hp_.head_dim_v);
    const Expected head_k = single(head_dim_k_key, hp_.head_dim_k);
    expect("blk.0.attn_q.weight", {n_embd, n_q});
    expect("blk.0.attn_k.weight", {n_embd, n_k});
    expect("blk.0.attn_v.weight", {n_embd, n_v});
    expect("blk.0.attn_output.weight", {n_o, n_embd});
    expect("blk.0.attn_q_norm.weight", {head_k});
    expect("blk.0.attn_k_norm.weight", {head_k});
    expect("output_norm.weight", {n_embd});
    expect("blk.0.attn_norm.weight", {n_embd});
    if (hp_.n_ff > 0) {
      const Expected n_ff = single(keys_.quoted("feed_forward_length"), hp_.n_ff);
      expect("blk.0.ffn_gate.weight", {n_embd, n_ff});
      if (hp_.arch == "phi3") {  // phi3: ffn_up holds the gate and up halves
        const std::optional<int64_t> both = checked_product(hp_.n_ff, 2);
        expect("blk.0.ffn_up.weight", {n_embd, {fmt::format("2 x {} {}", keys_.quoted("feed_forward_length"), hp_.n_ff), both}});
      } else {
        expect("blk.0.ffn_up.weight", {n_embd, n_ff});
      }
      expect("blk.0.ffn_down.weight", {n_ff, n_embd});
    }
    if (hp_.n_expert > 0) {  // mixture of experts: the router's width, the experts' and the shared expert's
      const Expected n_expert = single(keys_.quoted("expert_count"), hp_.n_expert);
      expect("blk.0.ffn_gate_inp.weight", {n_embd, n_expert});
      if (hp_.n_ff_exp > 0) {
        const Expected n_ff_exp = single(keys_.quoted("expert_feed_forward_length"), hp_.n_ff_exp);
        expect("blk.0.ffn_gate_exps.weight", {n_embd, n_ff_exp, n_expert});
        expect("blk.0.ffn_up_exps.weight", {n_embd, n_ff_exp, n_expert});
        expect("blk.0.ffn_down_exps.weight", {n_ff_exp, n_embd, n_expert});
      }
      if (hp_.n_ff_shexp > 0) {
        const Expected n_ff_shexp = single(keys_.quoted("expert_shared_feed_forward_length"), hp_.n_ff_shexp);
        expect("blk.0.ffn_gate_shexp.weight", {n_embd, n_ff_shexp});
        expect("blk.0.ffn_up_shexp.weight", {n_embd, n_ff_shexp});
        expect("blk.0.ffn_down_shexp.weight", {n_ff_shexp, n_embd});
      }
    }
    const std::string rot = keys_.key("rope.dimension_count");
    const Expected rot_half{fmt::format("'{}' {} / 2 = {}", rot, hp_.n_rot, hp_.n_rot / 2), hp_.n_rot / 2};
    expect("rope_freqs.weight", {rot_half});
    // phi3: the fused attn_qkv (the q rows, then k, then v) and the LongRoPE factors
    std::optional<int64_t> n_qkv;
    if (int64_t qk = 0, qkv = 0; n_q.value && n_k.value && n_v.value &&
                                 !__builtin_add_overflow(*n_q.value, *n_k.value, &qk) &&
                                 !__builtin_add_overflow(qk, *n_v.value, &qkv))
      n_qkv = qkv;
    expect("blk.0.attn_qkv.weight", {n_embd, {fmt::format("{} + {} + {}", n_q.what, n_k.what, n_v.what), n_qkv}});
    expect("rope_factors_long.weight", {rot_half});
    expect("rope_factors_short.weight", {rot_half});
  }

 private:
  struct Expected {
    std::string what;  // the keys and values this width comes from
    std::optional<int64_t> value;  // nullopt: the product overflows
  };

  // When tensor `name` exists, each dimension must be what the hyper-parameters say.
  void expect(const std::string& name, std::vector<Expected> dims) {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (!t) return;
    if (t->shape.size() != dims.size()) {
      problems_.add("'{}' has {} dimensions [{}], expected {}", name, t->shape.size(), fmt::join(t->shape, ", "),
                    dims.size());
      return;
    }
    for (size_t d = 0; d < dims.size(); ++d) {
      const Expected& e = dims[d];
      if (!e.value || t->shape[d] != *e.value)
        problems_.add("{}, but '{}' has {} in dimension {} (shape [{}])", e.what, name, t->shape[d], d,
                      fmt::join(t->shape, ", "));
    }
  }

  const gguf::File& file_;
  const HParams& hp_;
  const KeyReader& keys_;
  ProblemList& problems_;
};

// Every token of the tokenizer needs a row in the embedding (and in the output matrix, when there
// is one), so a vocabulary larger than either is refused here, before any tokenizer table is
// built from it. A smaller one is fine: some models pad their embedding (Qwen2's has more rows than
// its tokenizer has tokens); ids past the tokenizer's are never produced from text.
void vocabulary_fits(const gguf::File& file, int64_t embedding_rows, ProblemList& problems) {
  const gguf::Value* tokens = file.find("tokenizer.ggml.tokens");
  if (tokens == nullptr || !tokens->is_array()) return;  // the tokenizer reports that itself
  const auto n_tokens = static_cast<int64_t>(tokens->as_array().items.size());
  if (n_tokens > embedding_rows)
    problems.add("'tokenizer.ggml.tokens' has {} tokens, but 'token_embd.weight' has only {} rows (one a token)",
                 n_tokens, embedding_rows);
  const gguf::TensorInfo* output = file.find_tensor("output.weight");
  if (output != nullptr && output->shape.size() == 2 && n_tokens > output->shape[1] &&
      output->shape[1] != embedding_rows)  // (the same count named once)
    problems.add("'tokenizer.ggml.tokens' has {} tokens, but 'output.weight' has only {} rows (one a token)", n_tokens,
                 output->shape[1]);
}

}  // namespace

int64_t require_int(const gguf::File& file, std::string_view key) {
  const gguf::Value* v = find_key(file, key);
  if (!v) missing(file, key);
  return int_value(file, key, *v);
}

int64_t optional_int(const gguf::File& file, std::string_view key, int64_t fallback) {
  const gguf::Value* v = find_key(file, key);
  return v ? int_value(file, key, *v) : fallback;
}

float require_float(const gguf::File& file, std::string_view key) {
  const gguf::Value* v = find_key(file, key);
  if (!v) missing(file, key);
  return static_cast<float>(v->as_double());
}

float optional_float(const gguf::File& file, std::string_view key, float fallback) {
  const gguf::Value* v = find_key(file, key);
  return v ? static_cast<float>(v->as_double()) : fallback;
}

HParams HParams::from_gguf(const gguf::File& file) {
  HParams hp;
  hp.arch = file.architecture();
  if (hp.arch.empty()) throw_error("{}: missing required metadata key 'general.architecture'", file.name());
  ProblemList problems;
  KeyReader keys(file, hp.arch, problems);
  const auto positive = [&](std::string_view name, int64_t value, std::string_view note = {}) {
    if (value <= 0) problems.add("'{}'{} must be positive, got {}", keys.key(name), note, value);
    return value > 0;
  };
  const auto not_negative = [&](std::string_view name, int64_t value) {
    if (value < 0) problems.add("'{}' must not be negative, got {}", keys.key(name), value);
  };
  const auto finite = [&](std::string_view name, float value, bool positive_only) {
    if (!std::isfinite(value) || value < 0.0f || (positive_only && value == 0.0f))
      problems.add("'{}' must be a finite {} number, got {}", keys.key(name),
                   positive_only ? "positive" : "non-negative", value);
  };

  hp.n_embd = keys.integer("embedding_length", std::nullopt);
  hp.n_layer = keys.integer("block_count", std::nullopt);
  hp.n_head = keys.integer("attention.head_count", std::nullopt);
  bool sane = positive("embedding_length", hp.n_embd);
  sane &= positive("block_count", hp.n_layer);
  sane &= positive("attention.head_count", hp.n_head);
  hp.n_head_kv = keys.integer("attention.head_count_kv", hp.n_head);
  sane &= positive("attention.head_count_kv", hp.n_head_kv);
  if (hp.n_head > 0 && hp.n_head_kv > 0 && hp.n_head % hp.n_head_kv != 0) {
    problems.add("'{}' {} is not a multiple of '{}' {}", keys.key("attention.head_count"), hp.n_head,
                 keys.key("attention.head_count_kv"), hp.n_head_kv);
    sane = false;
  }
  // Head sizes default to n_embd / n_head; the messages then say so, since head_count is the cause.
  const int64_t default_head_dim = hp.n_head > 0 ? hp.n_embd / hp.n_head : 0;
  const std::string default_note = fmt::format(" (default: embedding_length / '{}')", keys.key("attention.head_count"));
  const auto head_dim_key = [&](std::string_view name) {
    return keys.quoted(name) + (keys.present(name) ? "" : default_note);
  };
  hp.head_dim_k = keys.integer("attention.key_length", default_head_dim);
  hp.head_dim_v = keys.integer("attention.value_length", default_head_dim);
  sane &= positive("attention.key_length", hp.head_dim_k, keys.present("attention.key_length") ? "" : default_note);
  sane &= positive("attention.value_length", hp.head_dim_v, keys.present("attention.value_length") ? "" : default_note);
  // Heads x head size are the attention widths; the model code multiplies them out.
  for (const auto& [heads, n_heads] : {std::pair{"attention.head_count", hp.n_head},
                                       std::pair{"attention.head_count_kv", hp.n_head_kv}}) {
    for (const auto& [dim, head_dim] : {std::pair{"attention.key_length", hp.head_dim_k},
                                        std::pair{"attention.value_length", hp.head_dim_v}}) {
      if (!checked_product(n_heads, head_dim)) {
        problems.add("'{}' {} x {} {} overflows", keys.key(heads), n_heads, head_dim_key(dim), head_dim);
        sane = false;
      }
    }
  }
  hp.n_ff = keys.integer("feed_forward_length", 0);
  not_negative("feed_forward_length", hp.n_ff);
  hp.n_rot = keys.integer("rope.dimension_count", hp.head_dim_k);
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim_k || hp.n_rot % 2 != 0)
    problems.add("'{}' {} must be even and in (0, {} {}]", keys.key("rope.dimension_count"), hp.n_rot,
                 head_dim_key("attention.key_length"), hp.head_dim_k);
  hp.n_ctx_train = keys.integer("context_length", 0);
  not_negative("context_length", hp.n_ctx_train);
  // LayerNorm models (bert, nomic-bert) carry layer_norm_epsilon instead of the RMSNorm one.
  const bool layer_norm = keys.present("attention.layer_norm_epsilon");
  hp.norm_eps = keys.real("attention.layer_norm_rms_epsilon", layer_norm ? std::optional<float>(0.0f) : std::nullopt);
  finite("attention.layer_norm_rms_epsilon", hp.norm_eps, false);
  hp.layer_norm_eps = keys.real("attention.layer_norm_epsilon", 0.0f);
  finite("attention.layer_norm_epsilon", hp.layer_norm_eps, false);
  // Embedding models. Encoders attend both ways unless the file says otherwise; llama.cpp's
  // gemma-embedding is non-causal whatever the file says.
  const bool encoder = hp.arch == "bert" || hp.arch == "nomic-bert" || hp.arch == "gemma-embedding";
  hp.causal_attention = hp.arch == "gemma-embedding" ? false : keys.flag("attention.causal", !encoder);
  hp.pooling_type = keys.integer("pooling_type", -1);
  if (keys.present("pooling_type") && (hp.pooling_type < 0 || hp.pooling_type > 4))
    problems.add("'{}' is {}, expected 0 to 4 (none, mean, cls, last, rank)", keys.key("pooling_type"), hp.pooling_type);
  // llama.cpp reads the token-type count from the tokenizer's keys.
  if (const gguf::Value* types = file.find("tokenizer.ggml.token_type_count")) {
    try {
      hp.n_token_types = types->as_int();
    } catch (const Error& e) {
      problems.add("metadata key 'tokenizer.ggml.token_type_count': {}", e.what());
    }
    if (hp.n_token_types < 0)
      problems.add("'tokenizer.ggml.token_type_count' must not be negative, got {}", hp.n_token_types);
  }
  if (const gguf::Value* labels = find_key(file, keys.key("classifier.output_labels"))) {
    try {
      hp.classifier_labels = labels->as_string_array();
    } catch (const Error& e) {
      problems.add("metadata key '{}': {}", keys.key("classifier.output_labels"), e.what());
    }
  }
  hp.rope_freq_base = keys.real("rope.freq_base", 10000.0f);
  finite("rope.freq_base", hp.rope_freq_base, true);
  hp.rope_scaling_type = keys.text("rope.scaling.type", "none");
  hp.rope_scaling_factor = keys.real("rope.scaling.factor", 0.0f);
  finite("rope.scaling.factor", hp.rope_scaling_factor, false);
  // As llama.cpp: freq_scale = 1 / factor when a factor is given (linear and yarn), else 1.
  if (hp.rope_scaling_type != "none" && hp.rope_scaling_factor > 0.0f)
    hp.rope_freq_scale = 1.0f / hp.rope_scaling_factor;
  if (!std::isfinite(hp.rope_freq_scale))
    problems.add("'{}' {} gives an infinite frequency scale", keys.key("rope.scaling.factor"), hp.rope_scaling_factor);
  hp.rope_n_ctx_orig = keys.integer("rope.scaling.original_context_length", hp.n_ctx_train);
  if (keys.present("rope.scaling.original_context_length"))
    not_negative("rope.scaling.original_context_length", hp.rope_n_ctx_orig);
  hp.rope_attn_factor = keys.real("rope.scaling.attn_factor", 1.0f);
  finite("rope.scaling.attn_factor", hp.rope_attn_factor, false);
  hp.sliding_window = keys.integer("attention.sliding_window", 0);
  not_negative("attention.sliding_window", hp.sliding_window);
  hp.attn_logit_softcap = keys.real("attn_logit_softcapping", 0.0f);
  finite("attn_logit_softcapping", hp.attn_logit_softcap, false);
  hp.final_logit_softcap = keys.real("final_logit_softcapping", 0.0f);
  finite("final_logit_softcapping", hp.final_logit_softcap, false);
  // Mixture of experts.
  hp.n_expert = keys.integer("expert_count", 0);
  hp.n_expert_used = keys.integer("expert_used_count", hp.n_expert > 0 ? std::nullopt : std::optional<int64_t>(0));
  if (hp.n_expert < 0 || hp.n_expert > kMaxExperts) {
    problems.add("'{}' is {}, expected 0 (no experts) to {}", keys.key("expert_count"), hp.n_expert, kMaxExperts);
    sane = false;
  } else if (hp.n_expert > 0 && (hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert)) {
    problems.add("'{}' is {}, expected 1 to '{}' {}", keys.key("expert_used_count"), hp.n_expert_used,
                 keys.key("expert_count"), hp.n_expert);
  } else if (hp.n_expert == 0 && hp.n_expert_used != 0) {
    problems.add("'{}' is {} but '{}' is 0 (no experts)", keys.key("expert_used_count"), hp.n_expert_used,
                 keys.key("expert_count"));
  }
  hp.n_ff_exp = keys.integer("expert_feed_forward_length", 0);
  not_negative("expert_feed_forward_length", hp.n_ff_exp);
  hp.n_ff_shexp = keys.integer("expert_shared_feed_forward_length", 0);
  not_negative("expert_shared_feed_forward_length", hp.n_ff_shexp);
  hp.expert_weights_norm = keys.flag("expert_weights_norm", false);
  hp.expert_weights_scale = keys.real("expert_weights_scale", 0.0f);
  finite("expert_weights_scale", hp.expert_weights_scale, false);
  hp.expert_gating_func = keys.integer("expert_gating_func", 0);
  if (hp.expert_gating_func < 0 || hp.expert_gating_func > 4)
    problems.add("'{}' is {}, expected 0 to 4 (none, softmax, sigmoid, softmax of the selected, sqrt of softplus)",
                 keys.key("expert_gating_func"), hp.expert_gating_func);
  hp.n_layer_dense_lead = keys.integer("leading_dense_block_count", 0);
  if (hp.n_layer_dense_lead < 0 || (hp.n_layer > 0 && hp.n_layer_dense_lead > hp.n_layer))
    problems.add("'{}' is {}, expected 0 to '{}' {}", keys.key("leading_dense_block_count"), hp.n_layer_dense_lead,
                 keys.key("block_count"), hp.n_layer);

  // The vocabulary size is the row count of the embedding table.
  if (const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight"); !embd) {
    problems.add("missing tensor 'token_embd.weight' (needed for the vocabulary size)");
  } else if (embd->shape.size() != 2 || embd->shape[0] != hp.n_embd) {
    problems.add("'{}' {}, but 'token_embd.weight' has shape [{}] (expected [{}, n_vocab])",
                 keys.key("embedding_length"), hp.n_embd, fmt::join(embd->shape, ", "), hp.n_embd);
  } else {
    hp.n_vocab = embd->shape[1];
    if (hp.n_vocab > std::numeric_limits<int32_t>::max())
      problems.add("'token_embd.weight' has {} rows, more than token ids can number", hp.n_vocab);
    vocabulary_fits(file, hp.n_vocab, problems);
    TensorCheck tensors(file, hp, keys, problems);
    if (sane) tensors.block_count();
    if (sane) tensors.layer_widths(head_dim_key("attention.key_length"), head_dim_key("attention.value_length"));
  }
  if (!problems.empty())
    throw_error("{}: {} problem(s) with the {} hyper-parameters: {}", file.name(), problems.size(), hp.arch,
                problems.summary());
  return hp;
}

}  // namespace okapi::model
