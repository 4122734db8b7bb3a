#include "model/hparams.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "core/error.hpp"
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

void require_positive(const gguf::File& file, std::string_view key, int64_t value) {
  if (value <= 0) throw_error("{}: metadata key '{}' must be positive, got {}", file.name(), key, value);
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
  const std::string a = hp.arch + ".";
  hp.n_embd = require_int(file, a + "embedding_length");
  hp.n_layer = require_int(file, a + "block_count");
  hp.n_head = require_int(file, a + "attention.head_count");
  require_positive(file, a + "embedding_length", hp.n_embd);
  require_positive(file, a + "block_count", hp.n_layer);
  require_positive(file, a + "attention.head_count", hp.n_head);
  hp.n_head_kv = optional_int(file, a + "attention.head_count_kv", hp.n_head);
  require_positive(file, a + "attention.head_count_kv", hp.n_head_kv);
  if (hp.n_head % hp.n_head_kv != 0)
    throw_error("{}: attention.head_count {} is not a multiple of attention.head_count_kv {}", file.name(), hp.n_head,
                hp.n_head_kv);
  hp.head_dim_k = optional_int(file, a + "attention.key_length", hp.n_embd / hp.n_head);
  hp.head_dim_v = optional_int(file, a + "attention.value_length", hp.n_embd / hp.n_head);
  require_positive(file, a + "attention.key_length", hp.head_dim_k);
  require_positive(file, a + "attention.value_length", hp.head_dim_v);
  hp.n_ff = optional_int(file, a + "feed_forward_length", 0);
  hp.n_rot = optional_int(file, a + "rope.dimension_count", hp.head_dim_k);
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim_k || hp.n_rot % 2 != 0)
    throw_error("{}: {}rope.dimension_count {} must be even and in (0, head_dim {}]", file.name(), a, hp.n_rot,
                hp.head_dim_k);
  hp.n_ctx_train = optional_int(file, a + "context_length", 0);
  hp.norm_eps = require_float(file, a + "attention.layer_norm_rms_epsilon");
  if (!(hp.norm_eps >= 0.0f)) throw_error("{}: {}attention.layer_norm_rms_epsilon is {}", file.name(), a, hp.norm_eps);
  hp.rope_freq_base = optional_float(file, a + "rope.freq_base", 10000.0f);
  if (!(hp.rope_freq_base > 0.0f)) throw_error("{}: {}rope.freq_base is {}", file.name(), a, hp.rope_freq_base);

  if (const gguf::Value* type = file.find(a + "rope.scaling.type")) hp.rope_scaling_type = type->as_string();
  hp.rope_scaling_factor = optional_float(file, a + "rope.scaling.factor", 0.0f);
  // As llama.cpp: freq_scale = 1 / factor when a factor is given (linear and yarn), else 1.
  if (hp.rope_scaling_type != "none" && hp.rope_scaling_factor > 0.0f) hp.rope_freq_scale = 1.0f / hp.rope_scaling_factor;
  if (!std::isfinite(hp.rope_freq_scale)) throw_error("{}: {}rope.scaling.factor is {}", file.name(), a, hp.rope_scaling_factor);
  hp.rope_n_ctx_orig = optional_int(file, a + "rope.scaling.original_context_length", hp.n_ctx_train);
  hp.rope_attn_factor = optional_float(file, a + "rope.scaling.attn_factor", 1.0f);
  hp.sliding_window = optional_int(file, a + "attention.sliding_window", 0);
  hp.attn_logit_softcap = optional_float(file, a + "attn_logit_softcapping", 0.0f);
  hp.final_logit_softcap = optional_float(file, a + "final_logit_softcapping", 0.0f);

  // The vocabulary size is the row count of the embedding table.
  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (!embd) throw_error("{}: missing tensor 'token_embd.weight' (needed for the vocabulary size)", file.name());
  if (embd->shape.size() != 2 || embd->shape[0] != hp.n_embd)
    throw_error("{}: token_embd.weight has shape [{}], expected [{}, n_vocab]", file.name(),
                fmt::join(embd->shape, ", "), hp.n_embd);
  hp.n_vocab = embd->shape[1];
  return hp;
}

}  // namespace okapi::model
