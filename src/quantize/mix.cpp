#include "quantize/mix.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

#include "core/error.hpp"

namespace okapi::quantize {
namespace {

using FT = FileType;

constexpr std::array kMixes = {
    MixSpec{"Q4_0", FT::MOSTLY_Q4_0, DType::Q4_0, "4.5 bpw legacy, one scale per 32"},
    MixSpec{"Q4_1", FT::MOSTLY_Q4_1, DType::Q4_1, "5.0 bpw legacy, scale and minimum per 32"},
    MixSpec{"Q5_0", FT::MOSTLY_Q5_0, DType::Q5_0, "5.5 bpw legacy"},
    MixSpec{"Q5_1", FT::MOSTLY_Q5_1, DType::Q5_1, "6.0 bpw legacy"},
    MixSpec{"Q2_K", FT::MOSTLY_Q2_K, DType::Q2_K, "k-quant mix, mostly Q2_K"},
    MixSpec{"Q2_K_S", FT::MOSTLY_Q2_K_S, DType::Q2_K, "k-quant mix, smaller Q2_K"},
    MixSpec{"Q3_K_S", FT::MOSTLY_Q3_K_S, DType::Q3_K, "k-quant mix, all Q3_K"},
    MixSpec{"Q3_K_M", FT::MOSTLY_Q3_K_M, DType::Q3_K, "k-quant mix, Q3_K with Q4_K/Q5_K"},
    MixSpec{"Q3_K_L", FT::MOSTLY_Q3_K_L, DType::Q3_K, "k-quant mix, Q3_K with Q5_K"},
    MixSpec{"Q4_K_S", FT::MOSTLY_Q4_K_S, DType::Q4_K, "k-quant mix, mostly Q4_K"},
    MixSpec{"Q4_K_M", FT::MOSTLY_Q4_K_M, DType::Q4_K, "k-quant mix, Q4_K with Q6_K"},
    MixSpec{"Q5_K_S", FT::MOSTLY_Q5_K_S, DType::Q5_K, "k-quant mix, mostly Q5_K"},
    MixSpec{"Q5_K_M", FT::MOSTLY_Q5_K_M, DType::Q5_K, "k-quant mix, Q5_K with Q6_K"},
    MixSpec{"Q6_K", FT::MOSTLY_Q6_K, DType::Q6_K, "6.56 bpw k-quant"},
    MixSpec{"Q8_0", FT::MOSTLY_Q8_0, DType::Q8_0, "8.5 bpw, near lossless"},
    MixSpec{"TQ1_0", FT::MOSTLY_TQ1_0, DType::TQ1_0, "1.69 bpw ternary (BitNet b1.58 models)"},
    MixSpec{"TQ2_0", FT::MOSTLY_TQ2_0, DType::TQ2_0, "2.06 bpw ternary (BitNet b1.58 models)"},
    MixSpec{"I2_S", FT::MOSTLY_I2_S, DType::I2_S,
            "2 bpw ternary, one scale per tensor (bitnet.cpp; ternary-valued weights only), F16 embeddings"},
    MixSpec{"F16", FT::MOSTLY_F16, DType::F16, "16-bit IEEE half"},
    MixSpec{"BF16", FT::MOSTLY_BF16, DType::BF16, "16-bit bfloat"},
    MixSpec{"F32", FT::ALL_F32, DType::F32, "32-bit float, no quantization"},
};

// llama-quantize's short names for the _M mixes.
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kAliases = {{
    {"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"},
}};

constexpr std::array kIqMixes = {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M",
                                 "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M", "IQ4_NL", "IQ4_XS"};

constexpr std::array kProducible = {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1,
                                    DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                                    DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::TQ1_0, DType::TQ2_0};

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

int64_t block_size(DType type) { return layout(type).block_size; }

// ggml_n_dims: trailing dimensions of 1 do not count.
size_t n_dims(std::span<const int64_t> shape) {
  size_t n = shape.size();
  while (n > 1 && shape[n - 1] == 1) --n;
  return n;
}

// The "blk.N." number llama.cpp reads with sscanf, or nullopt.
std::optional<int64_t> block_number(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size();
  int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || ptr == first) return std::nullopt;
  return value;
}

// llama.cpp's use_more_bits(): the first and last eighth of the layers, and every third between.
bool use_more_bits(int64_t i_layer, int64_t n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// The running state of llama.cpp's quantize_state_impl that the rules consult.
struct RuleState {
  const ModelFacts& model;
  const MixOptions& options;
  bool has_output = false;
  int64_t n_attention_wv = 0;
  int64_t i_attention_wv = 0;
  int64_t i_ffn_down = 0;
  int64_t i_ffn_gate = 0;
  int64_t i_ffn_up = 0;

  // For MoE models the layer comes from the name (experts are not stored in layer order);
  // otherwise it is the running count of such tensors.
  int64_t layer_of(int64_t counter, std::string_view name) const {
    if (model.n_expert <= 1) return counter;
    const auto layer = block_number(name);
    if (!layer) throw_error("tensor '{}': cannot determine its layer (expected a name 'blk.N....')", name);
    if (*layer < 0 || *layer >= model.n_layer) {
      throw_error("tensor '{}': layer {} outside [0, {})", name, *layer, model.n_layer);
    }
    return *layer;
  }
};

DType output_rule(const RuleState& s, std::span<const int64_t> shape, DType type) {
  if (s.options.output_tensor_type) return *s.options.output_tensor_type;
  // Microsoft's published I2_S files keep the (tied) embedding matrix in F16.
  if (s.options.file_type == FT::MOSTLY_I2_S) return DType::F16;
  if (s.model.arch == "falcon" || shape[0] % block_size(type) != 0) return DType::Q8_0;
  return type == DType::Q8_0 ? DType::Q8_0 : DType::Q6_K;
}

DType attn_v_rule(RuleState& s, DType type) {
  const FT ft = s.options.file_type;
  const int64_t n_gqa = s.model.n_gqa();
  if (ft == FT::MOSTLY_Q2_K) {
    type = n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
  } else if (ft == FT::MOSTLY_Q2_K_S && n_gqa >= 4) {
    type = DType::Q4_K;
  } else if (ft == FT::MOSTLY_Q3_K_M) {
    type = s.i_attention_wv < 2 ? DType::Q5_K : DType::Q4_K;
  } else if (ft == FT::MOSTLY_Q3_K_L) {
    type = DType::Q5_K;
  } else if ((ft == FT::MOSTLY_Q4_K_M || ft == FT::MOSTLY_Q5_K_M) &&
             use_more_bits(s.i_attention_wv, s.n_attention_wv)) {
    type = DType::Q6_K;
  } else if (ft == FT::MOSTLY_Q4_K_S && s.i_attention_wv < 4) {
    type = DType::Q5_K;
  }
  // In a 70B llama 8 heads share each attn_v, so it is 8x smaller than attn_q: more bits are cheap.
  if (s.model.is_llama_70b() && (type == DType::Q3_K || type == DType::Q4_K)) type = DType::Q5_K;
  if (s.model.n_expert == 8) type = DType::Q8_0;
  ++s.i_attention_wv;
  return type;
}

DType ffn_down_rule(RuleState& s, std::string_view name, DType type) {
  const FT ft = s.options.file_type;
  const bool falcon = s.model.arch == "falcon";
  const int64_t n_layer = s.model.n_layer;
  const int64_t i_layer = s.layer_of(s.i_ffn_down, name);
  if (ft == FT::MOSTLY_Q2_K) {
    type = DType::Q3_K;
  } else if (ft == FT::MOSTLY_Q2_K_S) {
    if (i_layer < n_layer / 8) type = DType::Q4_K;
  } else if (ft == FT::MOSTLY_Q3_K_M) {
    type = i_layer < n_layer / 16                       ? DType::Q5_K
           : !falcon || use_more_bits(i_layer, n_layer) ? DType::Q4_K
                                                        : DType::Q3_K;
  } else if (ft == FT::MOSTLY_Q3_K_L) {
    type = falcon ? DType::Q4_K : DType::Q5_K;
  } else if (ft == FT::MOSTLY_Q4_K_M) {
    if (falcon) {
      type = i_layer < n_layer / 16 ? DType::Q6_K : use_more_bits(i_layer, n_layer) ? DType::Q5_K : DType::Q4_K;
    } else if (use_more_bits(i_layer, n_layer)) {
      type = DType::Q6_K;
    }
  } else if (ft == FT::MOSTLY_Q5_K_M && use_more_bits(i_layer, n_layer)) {
    type = DType::Q6_K;
  } else if (ft == FT::MOSTLY_Q4_K_S && !falcon && i_layer < n_layer / 8) {
    type = DType::Q5_K;
  }
  // (llama.cpp's Q4_0/Q5_0 first-layers guard applies only with an importance matrix.)
  ++s.i_ffn_down;
  return type;
}

DType attn_output_rule(const RuleState& s, DType type) {
  const FT ft = s.options.file_type;
  if (s.model.arch == "falcon") return ft == FT::MOSTLY_Q3_K_L ? DType::Q4_K : type;
  if (s.model.n_expert == 8) {
    const bool bump = ft == FT::MOSTLY_Q2_K || ft == FT::MOSTLY_Q3_K_S || ft == FT::MOSTLY_Q3_K_M ||
                      ft == FT::MOSTLY_Q4_K_S || ft == FT::MOSTLY_Q4_K_M;
    return bump ? DType::Q5_K : type;
  }
  if (ft == FT::MOSTLY_Q2_K) return DType::Q3_K;
  if (ft == FT::MOSTLY_Q3_K_M) return DType::Q4_K;
  if (ft == FT::MOSTLY_Q3_K_L) return DType::Q5_K;
  return type;
}

DType attn_qkv_rule(const RuleState& s, DType type) {
  const FT ft = s.options.file_type;
  if (ft == FT::MOSTLY_Q3_K_M || ft == FT::MOSTLY_Q3_K_L) return DType::Q4_K;
  if (ft == FT::MOSTLY_Q4_K_M) return DType::Q5_K;
  if (ft == FT::MOSTLY_Q5_K_M) return DType::Q6_K;
  return type;
}

// llama.cpp's fallback when the row length is not a multiple of the chosen type's block.
// Deviations: llama.cpp picks IQ4_NL for Q2_K/Q3_K (okapi's IQ4_NL quantizer is not yet checked
// byte for byte against ggml's and has no SIMD dot; Q4_0 has the same block size and bits), and
// it refuses the 32-block types (Q4_0 ... Q8_0) outright where okapi stores F16.
DType fallback_type(DType type) {
  switch (type) {
    case DType::TQ1_0:
    case DType::TQ2_0:
    case DType::I2_S:
    case DType::Q2_K:
    case DType::Q3_K: return DType::Q4_0;
    case DType::Q4_K: return DType::Q5_0;
    case DType::Q5_K: return DType::Q5_1;
    case DType::Q6_K: return DType::Q8_0;
    default: return DType::F16;
  }
}

// llama_tensor_get_type(): the mix rules, then the fallback.
TensorChoice rule_type(RuleState& s, const TensorDesc& t, DType type) {
  const std::string_view name = t.name;
  const FT ft = s.options.file_type;
  if (name == "output.weight" || (!s.has_output && name == "token_embd.weight")) {
    // Tied embeddings: token_embd doubles as the output matrix and gets its type.
    type = output_rule(s, t.shape, type);
  } else if (name == "token_embd.weight") {
    if (s.options.token_embedding_type) {
      type = *s.options.token_embedding_type;
    } else if (ft == FT::MOSTLY_TQ1_0 || ft == FT::MOSTLY_TQ2_0) {
      type = DType::Q4_K;
    } else if (ft == FT::MOSTLY_I2_S) {
      type = DType::F16;
    }
  } else if (contains(name, "attn_v.weight")) {
    type = attn_v_rule(s, type);
  } else if (contains(name, "attn_k.weight")) {
    if (s.model.n_expert == 8) type = DType::Q8_0;
  } else if (contains(name, "ffn_down")) {
    type = ffn_down_rule(s, name, type);
  } else if (contains(name, "attn_output.weight")) {
    type = attn_output_rule(s, type);
  } else if (contains(name, "attn_qkv.weight")) {
    type = attn_qkv_rule(s, type);
  } else if (contains(name, "ffn_gate")) {
    (void)s.layer_of(s.i_ffn_gate, name);  // only the IQ3_XS mix has a rule here; keep the count
    ++s.i_ffn_gate;
  } else if (contains(name, "ffn_up")) {
    (void)s.layer_of(s.i_ffn_up, name);
    ++s.i_ffn_up;
  }
  TensorChoice choice{type, true, false, type};
  if (t.shape[0] % block_size(type) != 0) {
    choice.type = fallback_type(type);
    if (t.shape[0] % block_size(choice.type) != 0) choice.type = DType::F16;
    choice.fell_back = true;
  }
  return choice;
}

// `why` the type was chosen, and the setting that chose it.
void check_fits(const TensorDesc& t, DType type, std::string_view why, Setting setting) {
  if (t.shape[0] % block_size(type) == 0) return;
  throw_error_for(setting, "tensor '{}': row length {} is not a multiple of {}'s block size {} ({})", t.name,
                  t.shape[0], dtype_name(type), block_size(type), why);
}

std::string joined_mix_names() {
  std::vector<std::string_view> names;
  for (const MixSpec& m : kMixes) names.push_back(m.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

std::span<const MixSpec> all_mixes() { return kMixes; }

const MixSpec& mix_by_name(std::string_view name) {
  for (const auto& [alias, target] : kAliases) {
    if (iequals(name, alias)) name = target;
  }
  for (const MixSpec& m : kMixes) {
    if (iequals(m.name, name)) return m;
  }
  for (const char* iq : kIqMixes) {
    if (iequals(name, iq)) {
      throw_error("quantization type '{}' is not supported: okapi has no IQ (codebook) quantizers; "
                  "valid types: {}", name, joined_mix_names());
    }
  }
  throw_error("unknown quantization type '{}'; valid types: {}", name, joined_mix_names());
}

const MixSpec& mix_spec(FileType file_type) {
  for (const MixSpec& m : kMixes) {
    if (m.file_type == file_type) return m;
  }
  throw_error("file type {} is not a mix okapi can produce", static_cast<uint32_t>(file_type));
}

DType output_type_by_name(std::string_view name) {
  const auto type = dtype_from_name(name);
  if (type && std::find(kProducible.begin(), kProducible.end(), *type) != kProducible.end()) return *type;
  std::vector<std::string_view> names;
  for (DType t : kProducible) names.push_back(dtype_name(t));
  throw_error("tensor type '{}' cannot be produced; valid types: {}", name, fmt::join(names, ", "));
}

bool is_quantizable(std::string_view name, std::span<const int64_t> shape, const MixOptions& options) {
  if (n_dims(shape) < 2) return false;
  if (name.size() < 6 || name.substr(name.size() - 6) != "weight") return false;
  if (contains(name, "_norm.weight")) return false;
  if (!options.quantize_output_tensor && name == "output.weight") return false;
  // Tensors llama.cpp keeps as they are: MoE router, position / token-type embeddings (BERT),
  // Mamba's conv1d, RWKV's small 2-D time-mix weights, T5's relative position bias.
  constexpr std::array kKeepParts = {"ffn_gate_inp.weight", "ssm_conv1d.weight", "time_mix_first.weight",
                                     "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_decay_w1.weight",
                                     "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
                                     "attn_rel_b.weight"};
  for (const char* part : kKeepParts) {
    if (contains(name, part)) return false;
  }
  return name != "position_embd.weight" && name != "token_types.weight";
}

std::vector<size_t> llama_cpp_tensor_order(std::span<const TensorDesc> tensors) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto layer = [&tensors](size_t i) { return block_number(tensors[i].name).value_or(-1); };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int64_t la = layer(a);
    const int64_t lb = layer(b);
    if (la != lb) return la < lb;
    return tensors[a].name < tensors[b].name;
  });
  return order;
}

std::vector<TensorChoice> choose_tensor_types(const ModelFacts& model, std::span<const TensorDesc> tensors,
                                              const MixOptions& options) {
  const MixSpec& mix = mix_spec(options.file_type);
  RuleState state{model, options};
  for (const TensorDesc& t : tensors) {
    if (t.shape.empty()) throw_error("tensor '{}' has no dimensions", t.name);
    if (contains(t.name, "attn_v.weight") || contains(t.name, "attn_qkv.weight") ||
        contains(t.name, "attn_kv_b.weight")) {
      ++state.n_attention_wv;
    } else if (t.name == "output.weight") {
      state.has_output = true;
    }
  }
  // The rules apply to the quantized mixes only; F16/BF16/F32 convert every quantizable tensor.
  const bool use_rules = !options.pure && layout(mix.default_type).quantized;

  std::vector<TensorChoice> choices(tensors.size());
  for (size_t index : llama_cpp_tensor_order(tensors)) {
    const TensorDesc& t = tensors[index];
    if (!is_quantizable(t.name, t.shape, options)) {
      choices[index] = TensorChoice{t.type, false, false, t.type};
      continue;
    }
    TensorChoice choice{mix.default_type, true, false, mix.default_type};
    if (use_rules) choice = rule_type(state, t, mix.default_type);
    // Explicit overrides win over the rules and the fallback, with or without `pure`.
    if (options.token_embedding_type && t.name == "token_embd.weight") {
      choice = TensorChoice{*options.token_embedding_type, true, false, *options.token_embedding_type};
      check_fits(t, choice.type, "the type requested for the token embedding", Setting::TokenEmbeddingType);
    }
    if (options.output_tensor_type && t.name == "output.weight") {
      choice = TensorChoice{*options.output_tensor_type, true, false, *options.output_tensor_type};
      check_fits(t, choice.type, "the type requested for the output tensor", Setting::OutputTensorType);
    }
    if (!use_rules) check_fits(t, choice.type, "every weight gets the mix's type, with no fallback", Setting::Pure);
    // A tensor already in the chosen type is copied as it is (llama.cpp does not requantize it).
    choice.convert = choice.type != t.type;
    choices[index] = choice;
  }
  return choices;
}

}  // namespace okapi::quantize
