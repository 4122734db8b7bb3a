#include "synth/synth.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numbers>

#include "core/error.hpp"
#include "core/output_paths.hpp"
#include "core/thread_pool.hpp"
#include "kernels/format_table.hpp"
#include "quantize/mix.hpp"
#include "synth/vocab.hpp"

namespace okapi::synth {
namespace {

constexpr uint32_t kQuantizationVersion = 2;  // llama.cpp's GGML_QNT_VERSION
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// splitmix64's finalizer: a bijective 64-bit mixer, the core of the counter-based generator.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t tensor_key(uint64_t seed, const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a of the name
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
  return mix64(mix64(seed + kGolden) ^ h);
}

// Two standard normals from counter j (Box-Muller on two 24-bit uniforms).
void normal_pair(uint64_t key, int64_t j, float& a, float& b) {
  const uint64_t h = mix64(key + static_cast<uint64_t>(j) * kGolden);
  constexpr float kUnit = 1.0f / 16777216.0f;
  const float u1 = (static_cast<float>(h >> 40) + 0.5f) * kUnit;  // (0, 1): log is finite
  const float u2 = static_cast<float>(h & 0xFFFFFF) * kUnit;
  const float r = std::sqrt(-2.0f * std::log(u1));
  const float angle = 2.0f * std::numbers::pi_v<float> * u2;
  a = r * std::cos(angle);
  b = r * std::sin(angle);
}

int64_t count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Bitnet's ternary step: about 1/sqrt(2/3 fan_in) (unit output variance), in 1/256 steps.
float ternary_step(int64_t fan_in) {
  const double s = std::round(256.0 / std::sqrt(2.0 / 3.0 * static_cast<double>(fan_in)));
  return static_cast<float>(std::max(1.0, s) / 256.0);
}

std::string resolve_arch(const Preset& preset, const std::string& arch) {
  if (arch.empty()) return std::string(preset.archs.front());
  for (auto a : preset.archs) {
    if (a == arch) return arch;
  }
  std::string valid;
  for (auto a : preset.archs) valid += (valid.empty() ? "" : ", ") + std::string(a);
  throw_error("preset '{}' cannot be written as architecture '{}'; valid: {}", preset.name, arch, valid);
}

// gpt-oss's layer: attention with biases and sinks, then a mixture of experts whose router and
// experts all have biases, its input normed by post_attention_norm.
void plan_gpt_oss_layer(const Preset& p, const std::string& b, std::vector<TensorPlan>& t) {
  const int64_t q_dim = p.n_head * p.key_length(), kv_dim = p.n_head_kv * p.key_length();
  const auto std_of = [&](int64_t fan_in, float gain) {
    return gain * static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
  };
  const auto weight = [&](const std::string& name, std::vector<int64_t> shape, float gain = 1.0f) {
    t.push_back({b + name + ".weight", shape, Init::Weight, std_of(shape[0], gain)});
    shape.erase(shape.begin());
    t.push_back({b + name + ".bias", std::move(shape), Init::Bias, 0.2f});
  };
  t.push_back({b + "attn_norm.weight", {p.n_embd}, Init::Norm, 0.1f});
  weight("attn_q", {p.n_embd, q_dim});
  weight("attn_k", {p.n_embd, kv_dim});
  weight("attn_v", {p.n_embd, kv_dim});
  weight("attn_output", {q_dim, p.n_embd});
  t.push_back({b + "attn_sinks.weight", {p.n_head}, Init::Bias, p.sink_spread});
  t.push_back({b + "post_attention_norm.weight", {p.n_embd}, Init::Norm, 0.1f});
  weight("ffn_gate_inp", {p.n_embd, p.n_expert});
  weight("ffn_gate_exps", {p.n_embd, p.expert_width(), p.n_expert}, p.expert_gain);
  weight("ffn_up_exps", {p.n_embd, p.expert_width(), p.n_expert}, p.expert_gain);
  weight("ffn_down_exps", {p.expert_width(), p.n_embd, p.n_expert});
}

// A bert-family encoder (bert, nomic-bert), as llama.cpp's converter names its tensors.
std::vector<TensorPlan> plan_bert(const Preset& p, int64_t n_layer) {
  const int64_t hd = p.key_length();
  const int64_t q_dim = p.n_head * hd, kv_dim = p.n_head_kv * hd;
  const auto inv_sqrt = [](int64_t n) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))); };
  std::vector<TensorPlan> t;
  const auto weight = [&](const std::string& name, int64_t in, int64_t out, bool bias) {
    t.push_back({name + ".weight", {in, out}, Init::Weight, inv_sqrt(in)});
    if (bias) t.push_back({name + ".bias", {out}, Init::Bias, 0.1f});
  };
  const auto layer_norm = [&](const std::string& name) {
    t.push_back({name + ".weight", {p.n_embd}, Init::Norm, 0.1f});
    t.push_back({name + ".bias", {p.n_embd}, Init::Bias, 0.1f});
  };
  const bool biases = !p.nomic;
  t.push_back({"token_embd.weight", {p.n_embd, p.n_vocab}, Init::Embedding, 1.0f});
  t.push_back({"token_types.weight", {p.n_embd, 2}, Init::Embedding, 0.5f});
  if (!p.nomic) t.push_back({"position_embd.weight", {p.n_embd, p.context_length}, Init::Embedding, 0.5f});
  layer_norm("token_embd_norm");
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    if (p.nomic) {
      weight(b + "attn_qkv", p.n_embd, q_dim + 2 * kv_dim, false);
    } else {
      weight(b + "attn_q", p.n_embd, q_dim, true);
      weight(b + "attn_k", p.n_embd, kv_dim, true);
      weight(b + "attn_v", p.n_embd, kv_dim, true);
    }
    weight(b + "attn_output", q_dim, p.n_embd, biases);
    layer_norm(b + "attn_output_norm");
    if (p.nomic) weight(b + "ffn_gate", p.n_embd, p.n_ff, false);
    weight(b + "ffn_up", p.n_embd, p.n_ff, biases);
    weight(b + "ffn_down", p.n_ff, p.n_embd, biases);
    layer_norm(b + "layer_output_norm");
  }
  if (p.cls_outputs > 0) {  // the classifier head of a cross-encoder reranker
    weight("cls", p.n_embd, p.n_embd, true);
    weight("cls.output", p.n_embd, p.cls_outputs, true);
  }
  return t;
}

}  // namespace

std::vector<TensorPlan> plan_tensors(const Preset& p, int64_t n_layer) {
  if (p.bert) return plan_bert(p, n_layer);
  const int64_t hd = p.key_length();
  const int64_t q_dim = p.n_head * hd, kv_dim = p.n_head_kv * hd;
  const auto inv_sqrt = [](int64_t n) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))); };
  auto weight = [&](std::string name, int64_t in, int64_t out) {
    if (p.ternary) return TensorPlan{std::move(name), {in, out}, Init::Ternary, ternary_step(in)};
    return TensorPlan{std::move(name), {in, out}, Init::Weight, inv_sqrt(in)};
  };
  auto norm = [](std::string name, int64_t n) { return TensorPlan{std::move(name), {n}, Init::Norm, 0.1f}; };

  std::vector<TensorPlan> t;
  t.push_back({"token_embd.weight", {p.n_embd, p.n_vocab}, Init::Embedding, inv_sqrt(p.n_embd)});
  t.push_back(norm("output_norm.weight", p.n_embd));
  if (!p.tied) t.push_back({"output.weight", {p.n_embd, p.n_vocab}, Init::Embedding, inv_sqrt(p.n_embd)});
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    if (p.gpt_oss) {
      plan_gpt_oss_layer(p, b, t);
      continue;
    }
    t.push_back(norm(b + "attn_norm.weight", p.n_embd));
    if (p.fused_qkv_up) {  // phi3
      t.push_back(weight(b + "attn_qkv.weight", p.n_embd, q_dim + 2 * kv_dim));
    } else {
      t.push_back(weight(b + "attn_q.weight", p.n_embd, q_dim));
      t.push_back(weight(b + "attn_k.weight", p.n_embd, kv_dim));
      t.push_back(weight(b + "attn_v.weight", p.n_embd, kv_dim));
    }
    if (p.qkv_bias) {
      t.push_back({b + "attn_q.bias", {q_dim}, Init::Bias, 0.2f});
      t.push_back({b + "attn_k.bias", {kv_dim}, Init::Bias, 0.2f});
      t.push_back({b + "attn_v.bias", {kv_dim}, Init::Bias, 0.2f});
    }
    if (p.qk_norm) {
      t.push_back(norm(b + "attn_q_norm.weight", hd));
      t.push_back(norm(b + "attn_k_norm.weight", hd));
    }
    if (p.sub_norms) t.push_back(norm(b + "attn_sub_norm.weight", p.n_embd));
    t.push_back(weight(b + "attn_output.weight", q_dim, p.n_embd));
    if (p.post_norms) t.push_back(norm(b + "post_attention_norm.weight", p.n_embd));
    t.push_back(norm(b + "ffn_norm.weight", p.n_embd));
    if (p.n_expert > 0) {  // mixture of experts: router, 3-D expert tensors (ggml ne), shared expert
      const int64_t n_ff = p.expert_width(), n_e = p.n_expert;
      t.push_back(weight(b + "ffn_gate_inp.weight", p.n_embd, n_e));
      t.push_back({b + "ffn_gate_exps.weight", {p.n_embd, n_ff, n_e}, Init::Weight, inv_sqrt(p.n_embd)});
      t.push_back({b + "ffn_up_exps.weight", {p.n_embd, n_ff, n_e}, Init::Weight, inv_sqrt(p.n_embd)});
      t.push_back({b + "ffn_down_exps.weight", {n_ff, p.n_embd, n_e}, Init::Weight, inv_sqrt(n_ff)});
      if (p.n_ff_shexp > 0) {
        t.push_back({b + "ffn_gate_inp_shexp.weight", {p.n_embd}, Init::Weight, inv_sqrt(p.n_embd)});
        t.push_back(weight(b + "ffn_gate_shexp.weight", p.n_embd, p.n_ff_shexp));
        t.push_back(weight(b + "ffn_up_shexp.weight", p.n_embd, p.n_ff_shexp));
        t.push_back(weight(b + "ffn_down_shexp.weight", p.n_ff_shexp, p.n_embd));
      }
    } else {
      if (p.fused_qkv_up) {  // phi3: the gate rows, then the up rows
        t.push_back(weight(b + "ffn_up.weight", p.n_embd, 2 * p.n_ff));
      } else {
        t.push_back(weight(b + "ffn_gate.weight", p.n_embd, p.n_ff));
        t.push_back(weight(b + "ffn_up.weight", p.n_embd, p.n_ff));
      }
      if (p.sub_norms) t.push_back(norm(b + "ffn_sub_norm.weight", p.n_ff));
      t.push_back(weight(b + "ffn_down.weight", p.n_ff, p.n_embd));
    }
    if (p.post_norms) t.push_back(norm(b + "post_ffw_norm.weight", p.n_embd));
  }
  if (p.cls_outputs > 0)  // a decoder reranker's head (qwen3): cls.output alone, no bias
    t.push_back(weight("cls.output.weight", p.n_embd, p.cls_outputs));
  if (p.dense_width > 0) {  // gemma-embedding's projections after pooling
    t.push_back(weight("dense_2.weight", p.n_embd, p.dense_width));
    t.push_back(weight("dense_3.weight", p.dense_width, p.n_embd));
  }
  if (p.rope_orig_context > 0) {  // phi3's LongRoPE factors: short ones near 1, long ones spread wider
    t.push_back({"rope_factors_long.weight", {p.rope_dimensions() / 2}, Init::Norm, 0.25f});
    t.push_back({"rope_factors_short.weight", {p.rope_dimensions() / 2}, Init::Norm, 0.05f});
  }
  return t;
}

void fill_values(const TensorPlan& t, uint64_t seed, float* out, int64_t begin, int64_t end) {
  const uint64_t key = tensor_key(seed, t.name);
  if (t.init == Init::Ternary) {
    for (int64_t i = begin; i < end; ++i) {
      const auto digit = static_cast<int>(mix64(key + static_cast<uint64_t>(i) * kGolden) % 3);
      out[i] = t.scale * static_cast<float>(digit - 1);
    }
    return;
  }
  const float mean = t.init == Init::Norm ? 1.0f : 0.0f;
  // Element i is half of pair i/2, so any split of [begin, end) gives the same values.
  float a = 0, b = 0;
  int64_t i = begin;
  if (i < end && (i & 1) != 0) {
    normal_pair(key, i / 2, a, b);
    out[i++] = mean + t.scale * b;
  }
  for (; i + 1 < end; i += 2) {
    normal_pair(key, i / 2, a, b);
    out[i] = mean + t.scale * a;
    out[i + 1] = mean + t.scale * b;
  }
  if (i < end) {
    normal_pair(key, i / 2, a, b);
    out[i] = mean + t.scale * a;
  }
}

void set_metadata(gguf::Writer& w, const Preset& p, const std::string& arch, int64_t n_layer, uint32_t file_type,
                  uint64_t seed) {
  const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w.set("general.architecture", arch);
  w.set("general.name", std::string("synth-") + std::string(p.name));
  w.set("general.description", "okapi synth: random weights of " + std::string(p.name) + "'s shape, seed " +
                                   std::to_string(seed));
  w.set("general.file_type", file_type);
  w.set("general.quantization_version", kQuantizationVersion);
  const std::string k = arch + ".";
  w.set(k + "vocab_size", u32(p.n_vocab));
  w.set(k + "context_length", u32(p.context_length));
  w.set(k + "embedding_length", u32(p.n_embd));
  w.set(k + "block_count", u32(n_layer));
  w.set(k + "feed_forward_length", u32(p.n_ff));
  w.set(k + "attention.head_count", u32(p.n_head));
  w.set(k + "attention.head_count_kv", u32(p.n_head_kv));
  if (!p.bert || p.nomic) {  // bert has absolute positions
    w.set(k + "rope.freq_base", p.rope_base);
    w.set(k + "rope.dimension_count", u32(p.rope_dimensions()));
  }
  if (p.layer_norm_eps > 0.0f) {
    w.set(k + "attention.layer_norm_epsilon", p.layer_norm_eps);
  } else {
    w.set(k + "attention.layer_norm_rms_epsilon", p.rms_eps);
  }
  // embedding models
  if (p.non_causal) w.set(k + "attention.causal", false);
  if (p.pooling >= 0) w.set(k + "pooling_type", u32(p.pooling));
  if (p.cls_outputs > 1) {  // llama.cpp sizes cls.output by the labels (one without them)
    gguf::Array labels{gguf::ValueType::STRING, {}};
    for (int64_t i = 0; i < p.cls_outputs; ++i) labels.items.emplace_back("label" + std::to_string(i));
    w.set(k + "classifier.output_labels", std::move(labels));
  }
  if (p.dense_width > 0) {
    w.set(k + "dense_2_feat_in", u32(p.n_embd));
    w.set(k + "dense_2_feat_out", u32(p.dense_width));
    w.set(k + "dense_3_feat_in", u32(p.dense_width));
    w.set(k + "dense_3_feat_out", u32(p.n_embd));
  }
  if (p.head_dim > 0) {
    w.set(k + "attention.key_length", u32(p.head_dim));
    w.set(k + "attention.value_length", u32(p.head_dim));
  }
  if (p.sliding_window > 0) w.set(k + "attention.sliding_window", u32(p.sliding_window));
  if (p.n_expert > 0) {  // mixture of experts
    w.set(k + "expert_count", u32(p.n_expert));
    w.set(k + "expert_used_count", u32(p.n_expert_used));
    if (p.n_ff_exp > 0) w.set(k + "expert_feed_forward_length", u32(p.n_ff_exp));
    if (p.n_ff_shexp > 0) w.set(k + "expert_shared_feed_forward_length", u32(p.n_ff_shexp));
  }
  if (p.gpt_oss && p.yarn_factor > 0.0f) {  // gpt-oss: YaRN, as convert_hf_to_gguf writes it
    w.set(k + "rope.scaling.type", std::string("yarn"));
    w.set(k + "rope.scaling.factor", p.yarn_factor);
    w.set(k + "rope.scaling.original_context_length", u32(p.yarn_orig_ctx));
  }
  // phi3, granite
  if (p.rope_orig_context > 0) {
    // LongRoPE: the converter's attention factor sqrt(1 + ln(scale) / ln(original context)).
    w.set(k + "rope.scaling.original_context_length", u32(p.rope_orig_context));
    const double scale = static_cast<double>(p.context_length) / static_cast<double>(p.rope_orig_context);
    const double factor =
        scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(p.rope_orig_context))) : 1.0;
    w.set(k + "rope.scaling.attn_factor", static_cast<float>(factor));
  }
  if (p.embedding_scale != 0.0f) w.set(k + "embedding_scale", p.embedding_scale);
  if (p.residual_scale != 0.0f) w.set(k + "residual_scale", p.residual_scale);
  if (p.attention_scale != 0.0f) w.set(k + "attention.scale", p.attention_scale);
  if (p.logit_scale != 0.0f) w.set(k + "logit_scale", p.logit_scale);
  // gemma2
  if (p.attn_softcap > 0) w.set(k + "attn_logit_softcapping", p.attn_softcap);
  if (p.final_softcap > 0) w.set(k + "final_logit_softcapping", p.final_softcap);
  if (p.sliding_window_pattern > 0) w.set(k + "attention.sliding_window_pattern", u32(p.sliding_window_pattern));
  if (p.wordpiece) {
    set_wordpiece_vocab(w, p.n_vocab);
  } else {
    set_spm_vocab(w, p.n_vocab);
  }
}

namespace {

// Generates and converts one tensor, rows in parallel; the bytes do not depend on the pool size.
std::vector<uint8_t> produce(const TensorPlan& t, DType type, uint64_t seed, ThreadPool& pool) {
  const int64_t row = t.shape[0];
  const int64_t n_rows = count(t.shape) / row;
  std::vector<float> values(static_cast<size_t>(count(t.shape)));
  const bool whole_tensor = type == DType::I2_S;  // one scale for the whole tensor
  const quant::Format* f = type == DType::F32 || whole_tensor ? nullptr : &quant::format(type);
  // Types whose quantizer needs an importance matrix (IQ2_XXS, IQ1_S, ...) get uniform importance:
  // random weights have no activations to weigh.
  const bool uniform_importance = f != nullptr && f->quantize == nullptr && f->quantize_weighted != nullptr;
  if (f != nullptr && f->quantize == nullptr && !uniform_importance) {
    throw_error("synth: okapi cannot produce {} weights", dtype_name(type));
  }
  const std::vector<float> ones(uniform_importance ? static_cast<size_t>(row) : 0, 1.0f);
  const size_t out_row = f != nullptr ? *row_bytes(type, row) : 0;
  std::vector<uint8_t> out(f != nullptr ? out_row * static_cast<size_t>(n_rows) : 0);
  pool.parallel_for(n_rows, [&](int64_t first, int64_t last, int) {
    fill_values(t, seed, values.data(), first * row, last * row);
    if (f == nullptr) return;
    for (int64_t r = first; r < last; ++r) {
      uint8_t* dst = out.data() + static_cast<size_t>(r) * out_row;
      if (uniform_importance) {
        f->quantize_weighted(values.data() + r * row, dst, row, ones.data());
      } else {
        f->quantize(values.data() + r * row, dst, row);
      }
    }
  });
  if (whole_tensor) return quant::quantize_tensor(type, values.data(), t.shape);
  if (f != nullptr) return out;
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

}  // namespace

SynthReport write_synth(const SynthOptions& options, const std::filesystem::path& output,
                        const std::function<void(size_t, size_t, const std::string&)>& on_tensor) {
  return write_synth(preset_by_name(options.preset), options, output, on_tensor);
}

SynthReport write_synth(const Preset& given, const SynthOptions& options, const std::filesystem::path& output,
                        const std::function<void(size_t, size_t, const std::string&)>& on_tensor) {
  const auto start = std::chrono::steady_clock::now();
  check_output_path({output, "the output"});  // no inputs, but an existing directory is refused before the work
  Preset preset = given;
  const int64_t min_vocab = preset.wordpiece ? kMinWordPieceVocab : kMinVocab;
  if (options.vocab != 0 && options.vocab < min_vocab) {
    throw_error_for(Setting::Vocab, "the vocabulary must hold at least {} tokens, got {}", min_vocab, options.vocab);
  }
  if (options.vocab != 0) preset.n_vocab = options.vocab;
  std::optional<gguf::File> vocab_file;
  if (!options.vocab_from.empty()) {
    if (options.vocab != 0) throw_error_for(Setting::Vocab, "a vocabulary size and a vocabulary file exclude each other");
    vocab_file.emplace(gguf::File::open(options.vocab_from));
    const gguf::Value* tokens = vocab_file->find("tokenizer.ggml.tokens");
    if (tokens == nullptr || !tokens->is_array())
      throw_error("{}: no tokenizer.ggml.tokens array: not a vocabulary", options.vocab_from.string());
    preset.n_vocab = static_cast<int64_t>(tokens->as_array().items.size());
    if (preset.n_vocab < kMinVocab)
      throw_error("{}: the vocabulary holds {} tokens, fewer than {}", options.vocab_from.string(), preset.n_vocab, kMinVocab);
  }
  const std::string arch = resolve_arch(preset, options.arch);
  const quantize::MixSpec& mix = quantize::mix_by_name(options.type);
  if (options.layers < 0) throw_error_for(Setting::Layers, "the layer count must be positive, got {}", options.layers);
  const int64_t n_layer = options.layers > 0 ? options.layers : preset.n_layer;
  const std::vector<TensorPlan> plan = plan_tensors(preset, n_layer);

  std::vector<quantize::TensorDesc> descs;
  for (const auto& t : plan) descs.push_back({t.name, DType::F32, t.shape});
  quantize::MixOptions mix_options;
  mix_options.file_type = mix.file_type;
  const quantize::ModelFacts facts{arch, n_layer, preset.n_head, preset.n_head_kv, preset.n_expert};
  const auto choices = quantize::choose_tensor_types(facts, descs, mix_options);

  gguf::Writer writer;
  set_metadata(writer, preset, arch, n_layer, static_cast<uint32_t>(mix.file_type), options.seed);
  if (vocab_file) {
    // The file's tokenizer replaces the made-up one; its chat template comes along.
    for (const auto& kv : vocab_file->metadata())
      if (kv.key.rfind("tokenizer.", 0) == 0) writer.set(kv.key, kv.value);
  }
  ThreadPool pool(std::max(1, options.n_threads));
  SynthReport report{arch, n_layer, plan.size(), 0, 0, 0};
  for (size_t i = 0; i < plan.size(); ++i) {
    const TensorPlan& t = plan[i];
    const DType type = choices[i].convert ? choices[i].type : DType::F32;
    report.n_params += static_cast<uint64_t>(count(t.shape));
    writer.add_tensor_producer(t.name, type, t.shape, [&, i, type] {
      std::vector<uint8_t> bytes = produce(plan[i], type, options.seed, pool);
      if (on_tensor) on_tensor(i + 1, plan.size(), plan[i].name);
      return bytes;
    });
  }
  report.file_bytes = writer.write(output);  // not file_size: the output may be a device or a FIFO
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace okapi::synth
