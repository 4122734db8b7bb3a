#include "quantize/mix.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <initializer_list>
#include <regex>

#include "core/error.hpp"
#include "kernels/format_table.hpp"

namespace okapi::quantize {
namespace {

using FT = FileType;

constexpr std::array kMixes = {
    MixSpec{"Q4_0", FT::MOSTLY_Q4_0, DType::Q4_0, "4.5 bpw legacy, one scale per 32"},
    MixSpec{"Q4_1", FT::MOSTLY_Q4_1, DType::Q4_1, "5.0 bpw legacy, scale and minimum per 32"},
    MixSpec{"MXFP4_MOE", FT::MOSTLY_MXFP4_MOE, DType::MXFP4, "MXFP4 experts, Q8_0 elsewhere"},
    MixSpec{"Q5_0", FT::MOSTLY_Q5_0, DType::Q5_0, "5.5 bpw legacy"},
    MixSpec{"Q5_1", FT::MOSTLY_Q5_1, DType::Q5_1, "6.0 bpw legacy"},
    MixSpec{"IQ2_XXS", FT::MOSTLY_IQ2_XXS, DType::IQ2_XXS, "2.06 bpw i-quant (needs --imatrix)"},
    MixSpec{"IQ2_XS", FT::MOSTLY_IQ2_XS, DType::IQ2_XS, "2.31 bpw i-quant (needs --imatrix)"},
    MixSpec{"IQ2_S", FT::MOSTLY_IQ2_S, DType::IQ2_XS, "2.5 bpw i-quant mix (needs --imatrix)"},
    MixSpec{"IQ2_M", FT::MOSTLY_IQ2_M, DType::IQ2_S, "2.7 bpw i-quant mix (needs --imatrix)"},
    MixSpec{"IQ1_S", FT::MOSTLY_IQ1_S, DType::IQ1_S, "1.56 bpw i-quant (needs --imatrix)"},
    MixSpec{"IQ1_M", FT::MOSTLY_IQ1_M, DType::IQ1_M, "1.75 bpw i-quant (needs --imatrix)"},
    MixSpec{"TQ1_0", FT::MOSTLY_TQ1_0, DType::TQ1_0, "1.69 bpw ternary (BitNet b1.58 models)"},
    MixSpec{"TQ2_0", FT::MOSTLY_TQ2_0, DType::TQ2_0, "2.06 bpw ternary (BitNet b1.58 models)"},
    MixSpec{"Q2_K", FT::MOSTLY_Q2_K, DType::Q2_K, "k-quant mix, mostly Q2_K"},
    MixSpec{"Q2_K_S", FT::MOSTLY_Q2_K_S, DType::Q2_K, "k-quant mix, smaller Q2_K (needs --imatrix)"},
    MixSpec{"IQ3_XXS", FT::MOSTLY_IQ3_XXS, DType::IQ3_XXS, "3.06 bpw i-quant (needs --imatrix)"},
    MixSpec{"IQ3_S", FT::MOSTLY_IQ3_S, DType::IQ3_S, "3.44 bpw i-quant"},
    MixSpec{"IQ3_M", FT::MOSTLY_IQ3_M, DType::IQ3_S, "3.66 bpw i-quant mix"},
    MixSpec{"IQ3_XS", FT::MOSTLY_IQ3_XS, DType::IQ3_S, "3.3 bpw i-quant mix"},
    MixSpec{"Q3_K_S", FT::MOSTLY_Q3_K_S, DType::Q3_K, "k-quant mix, all Q3_K"},
    MixSpec{"Q3_K_M", FT::MOSTLY_Q3_K_M, DType::Q3_K, "k-quant mix, Q3_K with Q4_K/Q5_K"},
    MixSpec{"Q3_K_L", FT::MOSTLY_Q3_K_L, DType::Q3_K, "k-quant mix, Q3_K with Q5_K"},
    MixSpec{"IQ4_NL", FT::MOSTLY_IQ4_NL, DType::IQ4_NL, "4.50 bpw non-linear quantization"},
    MixSpec{"IQ4_XS", FT::MOSTLY_IQ4_XS, DType::IQ4_XS, "4.25 bpw non-linear quantization"},
    MixSpec{"Q4_K_S", FT::MOSTLY_Q4_K_S, DType::Q4_K, "k-quant mix, mostly Q4_K"},
    MixSpec{"Q4_K_M", FT::MOSTLY_Q4_K_M, DType::Q4_K, "k-quant mix, Q4_K with Q6_K"},
    MixSpec{"Q5_K_S", FT::MOSTLY_Q5_K_S, DType::Q5_K, "k-quant mix, mostly Q5_K"},
    MixSpec{"Q5_K_M", FT::MOSTLY_Q5_K_M, DType::Q5_K, "k-quant mix, Q5_K with Q6_K"},
    MixSpec{"Q6_K", FT::MOSTLY_Q6_K, DType::Q6_K, "6.56 bpw k-quant"},
    MixSpec{"Q8_0", FT::MOSTLY_Q8_0, DType::Q8_0, "8.5 bpw, near lossless"},
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

// A type okapi can write: a float type, or a weight format of the table with a quantizer (not the
// activation formats Q8_K / Q8_1).
bool producible(DType type) {
  if (type == DType::F32 || type == DType::F16 || type == DType::BF16) return true;
  if (type == DType::Q8_K || type == DType::Q8_1) return false;
  const quant::Format* f = quant::find_format(type);
  return f != nullptr && (f->quantize_ref != nullptr || f->quantize_weighted != nullptr);
}

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

// `why` the type was chosen, and the setting that chose it.
void check_fits(const TensorDesc& t, DType type, std::string_view why, Setting setting) {
  if (t.shape[0] % block_size(type) == 0) return;
  throw_error_for(setting, "tensor '{}': row length {} is not a multiple of {}'s block size {} ({})", t.name,
                  t.shape[0], dtype_name(type), block_size(type), why);
}

// llama.cpp's use_more_bits(): the first and last eighth of the layers, and every third between.
bool use_more_bits(int64_t i_layer, int64_t n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// llama.cpp's tensor_category: broad roles by name, tested in this order.
enum class Category { TokenEmbd, AttnQ, AttnV, AttnK, AttnQkv, AttnKvB, AttnOutput, FfnUp, FfnGate, FfnDown, Output, Other };

bool is_token_embd(std::string_view name) {
  return name == "token_embd.weight" || name == "per_layer_token_embd.weight";
}

Category category_of(std::string_view name) {
  if (name == "output.weight") return Category::Output;
  if (is_token_embd(name)) return Category::TokenEmbd;
  if (contains(name, "attn_qkv.weight")) return Category::AttnQkv;
  if (contains(name, "attn_kv_b.weight")) return Category::AttnKvB;
  if (contains(name, "attn_v.weight")) return Category::AttnV;
  if (contains(name, "attn_k.weight")) return Category::AttnK;
  if (contains(name, "attn_q.weight")) return Category::AttnQ;
  if (contains(name, "attn_output.weight")) return Category::AttnOutput;
  if (contains(name, "ffn_up")) return Category::FfnUp;
  if (contains(name, "ffn_gate")) return Category::FfnGate;
  if (contains(name, "ffn_down")) return Category::FfnDown;
  return Category::Other;
}

// attn_v and the tensors that hold it (more sensitive to quantization).
bool is_attn_v_like(Category c) { return c == Category::AttnV || c == Category::AttnQkv || c == Category::AttnKvB; }

bool one_of(FT ft, std::initializer_list<FT> set) { return std::find(set.begin(), set.end(), ft) != set.end(); }

// The running state of llama.cpp's quantize_state_impl that the rules consult.
struct RuleState {
  const ModelFacts& model;
  const MixOptions& options;
  bool has_tied_embeddings = true;  // until output.weight is seen
  int64_t n_attention_wv = 0;
  int64_t i_attention_wv = 0;
  int64_t i_ffn_down = 0;
  int64_t i_ffn_gate = 0;
  int64_t i_ffn_up = 0;
  std::vector<std::pair<std::regex, DType>> patterns = {};  // --tensor-type, compiled once

  // llama.cpp's layer_info: for MoE models the layer comes from the name (experts are not stored
  // in layer order); otherwise it is the running count of such tensors.
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

// The IQ1/IQ2 mixes share one set of rules.
bool is_iq2_family(FT ft) {
  return one_of(ft, {FT::MOSTLY_IQ2_XXS, FT::MOSTLY_IQ2_XS, FT::MOSTLY_IQ1_S, FT::MOSTLY_IQ2_S, FT::MOSTLY_IQ2_M,
                     FT::MOSTLY_IQ1_M});
}

DType output_rule(const RuleState& s, std::span<const int64_t> shape, DType type) {
  const FT ft = s.options.file_type;
  if (s.options.output_tensor_type) return *s.options.output_tensor_type;
  // Microsoft's published I2_S files keep the (tied) embedding matrix in F16 (bitnet.cpp's rule).
  if (ft == FT::MOSTLY_I2_S) return DType::F16;
  if (ft == FT::MOSTLY_MXFP4_MOE) return DType::Q8_0;
  if (s.model.arch == "falcon" || shape[0] % block_size(type) != 0) return DType::Q8_0;
  if (one_of(ft, {FT::MOSTLY_IQ2_XXS, FT::MOSTLY_IQ2_XS, FT::MOSTLY_IQ3_XXS, FT::MOSTLY_IQ1_S, FT::MOSTLY_IQ2_S,
                  FT::MOSTLY_IQ2_M, FT::MOSTLY_IQ1_M})) {
    return DType::Q5_K;
  }
  return type == DType::Q8_0 ? DType::Q8_0 : DType::Q6_K;
}

DType token_embd_rule(const RuleState& s, DType type) {
  const FT ft = s.options.file_type;
  if (s.options.token_embedding_type) return *s.options.token_embedding_type;
  if (one_of(ft, {FT::MOSTLY_IQ2_XXS, FT::MOSTLY_IQ2_XS, FT::MOSTLY_IQ1_S, FT::MOSTLY_IQ1_M})) return DType::Q2_K;
  if (one_of(ft, {FT::MOSTLY_IQ2_S, FT::MOSTLY_IQ2_M, FT::MOSTLY_IQ3_XXS})) return DType::IQ3_S;
  if (ft == FT::MOSTLY_TQ1_0 || ft == FT::MOSTLY_TQ2_0) return DType::Q4_K;
  if (ft == FT::MOSTLY_I2_S) return DType::F16;
  return type;
}

// The IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S and IQ2_M mixes.
DType iq2_family_rule(RuleState& s, Category c, DType type) {
  const FT ft = s.options.file_type;
  const bool iq2_s_m = ft == FT::MOSTLY_IQ2_S || ft == FT::MOSTLY_IQ2_M;
  if (is_attn_v_like(c)) {
    if (s.model.n_gqa() >= 4 || s.model.n_expert >= 4) {
      type = DType::Q4_K;
    } else {
      type = iq2_s_m ? DType::IQ3_S : DType::Q2_K;
    }
    ++s.i_attention_wv;
  } else if (s.model.n_expert == 8 && c == Category::AttnK) {
    type = DType::Q4_K;
  } else if (c == Category::FfnDown) {
    // By the running count, also for MoE models (llama.cpp does not read the layer here).
    if (s.i_ffn_down < s.model.n_layer / 8) type = iq2_s_m ? DType::IQ3_S : DType::Q2_K;
    ++s.i_ffn_down;
  } else if (c == Category::AttnOutput) {
    if (s.model.n_expert == 8) {
      type = DType::Q5_K;
    } else if (ft == FT::MOSTLY_IQ1_S || ft == FT::MOSTLY_IQ1_M) {
      type = DType::IQ2_XXS;
    } else if (iq2_s_m) {
      type = DType::IQ3_S;
    }
  }
  return type;
}

DType attn_v_rule(RuleState& s, DType type) {
  const FT ft = s.options.file_type;
  const int64_t n_gqa = s.model.n_gqa();
  const bool imatrix = s.options.has_imatrix;
  if (ft == FT::MOSTLY_Q2_K) {
    type = n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
  } else if (ft == FT::MOSTLY_Q2_K_S && n_gqa >= 4) {
    type = DType::Q4_K;
  } else if (ft == FT::MOSTLY_IQ3_XXS) {
    type = n_gqa >= 4 ? DType::Q4_K : !imatrix ? DType::IQ3_S : DType::IQ3_XXS;
  } else if ((ft == FT::MOSTLY_IQ3_XS || ft == FT::MOSTLY_IQ3_S) && n_gqa >= 4) {
    type = DType::Q4_K;
  } else if (ft == FT::MOSTLY_IQ3_M) {
    type = DType::Q4_K;
  } else if (ft == FT::MOSTLY_Q3_K_M) {
    type = s.i_attention_wv < 2 ? DType::Q5_K : DType::Q4_K;
  } else if (ft == FT::MOSTLY_Q3_K_L) {
    type = DType::Q5_K;
  } else if ((ft == FT::MOSTLY_IQ4_NL || ft == FT::MOSTLY_IQ4_XS) && n_gqa >= 4) {
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
  const bool imatrix = s.options.has_imatrix;
  const int64_t n_layer = s.model.n_layer;
  const int64_t i_layer = s.layer_of(s.i_ffn_down, name);
  if (ft == FT::MOSTLY_Q2_K) {
    type = DType::Q3_K;
  } else if (ft == FT::MOSTLY_Q2_K_S) {
    if (i_layer < n_layer / 8) type = DType::Q4_K;
  } else if (ft == FT::MOSTLY_IQ3_XXS && !imatrix) {
    type = i_layer < n_layer / 8 ? DType::Q4_K : DType::Q3_K;
  } else if (ft == FT::MOSTLY_Q3_K_M) {
    type = i_layer < n_layer / 16                       ? DType::Q5_K
           : !falcon || use_more_bits(i_layer, n_layer) ? DType::Q4_K
                                                        : DType::Q3_K;
  } else if (ft == FT::MOSTLY_IQ3_M &&
             (i_layer < n_layer / 8 || (s.model.n_expert == 8 && use_more_bits(i_layer, n_layer)))) {
    type = DType::Q4_K;
  } else if (ft == FT::MOSTLY_Q3_K_L) {
    type = falcon ? DType::Q4_K : DType::Q5_K;
  } else if (ft == FT::MOSTLY_Q4_K_M) {
    if (falcon) {
      type = i_layer < n_layer / 16 ? DType::Q6_K : use_more_bits(i_layer, n_layer) ? DType::Q5_K : DType::Q4_K;
    } else if (use_more_bits(i_layer, n_layer)) {
      type = DType::Q6_K;
    }
  } else if (i_layer < n_layer / 8 && (ft == FT::MOSTLY_IQ4_NL || ft == FT::MOSTLY_IQ4_XS) && !imatrix) {
    type = DType::Q5_K;
  } else if (ft == FT::MOSTLY_Q5_K_M && use_more_bits(i_layer, n_layer)) {
    type = DType::Q6_K;
  } else if (ft == FT::MOSTLY_Q4_K_S && !falcon && i_layer < n_layer / 8) {
    type = DType::Q5_K;
  } else if ((ft == FT::MOSTLY_Q4_0 || ft == FT::MOSTLY_Q5_0) && imatrix && i_layer < n_layer / 8) {
    // Guards the first ffn_down layers, only with an importance matrix (as llama.cpp).
    type = ft == FT::MOSTLY_Q4_0 ? DType::Q4_1 : DType::Q5_1;
  }
  ++s.i_ffn_down;
  return type;
}

DType attn_output_rule(const RuleState& s, DType type) {
  const FT ft = s.options.file_type;
  if (s.model.arch == "falcon") return ft == FT::MOSTLY_Q3_K_L ? DType::Q4_K : type;
  if (s.model.n_expert == 8) {
    const bool bump = one_of(ft, {FT::MOSTLY_Q2_K, FT::MOSTLY_IQ3_XS, FT::MOSTLY_IQ3_XXS, FT::MOSTLY_Q3_K_S,
                                  FT::MOSTLY_Q3_K_M, FT::MOSTLY_IQ4_NL, FT::MOSTLY_Q4_K_S, FT::MOSTLY_Q4_K_M,
                                  FT::MOSTLY_IQ3_S, FT::MOSTLY_IQ3_M, FT::MOSTLY_IQ4_XS});
    return bump ? DType::Q5_K : type;
  }
  if (ft == FT::MOSTLY_Q2_K) return DType::Q3_K;
  if (ft == FT::MOSTLY_IQ3_XXS) return DType::IQ3_S;
  if (ft == FT::MOSTLY_Q3_K_M) return DType::Q4_K;
  if (ft == FT::MOSTLY_Q3_K_L) return DType::Q5_K;
  if (ft == FT::MOSTLY_IQ3_M) return DType::Q4_K;
  return type;
}

// IQ3_XS gives the middle layers' ffn_gate / ffn_up IQ3_XXS.
DType ffn_gate_up_rule(RuleState& s, int64_t& counter, std::string_view name, DType type) {
  const int64_t i_layer = s.layer_of(counter, name);
  const int64_t n_layer = s.model.n_layer;
  if (s.options.file_type == FT::MOSTLY_IQ3_XS && i_layer >= n_layer / 8 && i_layer < 7 * n_layer / 8) {
    type = DType::IQ3_XXS;
  }
  ++counter;
  return type;
}

// llama_tensor_get_type_impl(): the mix rules.
DType mix_rules(RuleState& s, const TensorDesc& t, Category c, DType type) {
  const FT ft = s.options.file_type;
  if (c == Category::Output || (s.has_tied_embeddings && c == Category::TokenEmbd)) {
    // Tied embeddings: token_embd doubles as the output matrix and gets its type.
    return output_rule(s, t.shape, type);
  }
  if (ft == FT::MOSTLY_MXFP4_MOE) {
    // Expert tensors (3-D) in MXFP4, everything else in Q8_0.
    return t.shape.size() > 2 && t.shape[2] > 1 ? DType::MXFP4 : DType::Q8_0;
  }
  if (c == Category::TokenEmbd) return token_embd_rule(s, type);
  if (is_iq2_family(ft)) return iq2_family_rule(s, c, type);
  switch (c) {
    case Category::AttnV:
    case Category::AttnQkv:
    case Category::AttnKvB: return attn_v_rule(s, type);
    case Category::AttnK:
      if (s.model.n_expert == 8) return DType::Q8_0;
      if (ft == FT::MOSTLY_IQ3_XS) return DType::IQ3_XXS;
      if (ft == FT::MOSTLY_IQ3_XXS) return DType::IQ2_S;
      return type;
    case Category::AttnQ:
      if (ft == FT::MOSTLY_IQ3_XS) return DType::IQ3_XXS;
      if (ft == FT::MOSTLY_IQ3_XXS) return DType::IQ2_S;
      return type;
    case Category::FfnDown: return ffn_down_rule(s, t.name, type);
    case Category::AttnOutput: return attn_output_rule(s, type);
    case Category::FfnGate: return ffn_gate_up_rule(s, s.i_ffn_gate, t.name, type);
    case Category::FfnUp: return ffn_gate_up_rule(s, s.i_ffn_up, t.name, type);
    default: return type;
  }
}

// llama.cpp's tensor_type_fallback: the type used when the row length is not a multiple of the
// chosen type's block.
DType fallback_type(const TensorDesc& t, DType type) {
  switch (type) {
    case DType::IQ1_S:
    case DType::IQ1_M:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ4_XS: return DType::IQ4_NL;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::TQ1_0:
    case DType::TQ2_0:
    case DType::I2_S: return DType::Q4_0;  // I2_S: bitnet.cpp's type, okapi's choice
    case DType::Q4_K: return DType::Q5_0;
    case DType::Q5_K: return DType::Q5_1;
    case DType::Q6_K: return DType::Q8_0;
    default:
      // A 32-block type has no smaller block to demote to: F16 below.
      if (block_size(type) <= 32) return type;
      throw_error("tensor '{}': row length {} does not fit {} (blocks of {}) and no fallback type is defined for it",
                  t.name, t.shape[0], dtype_name(type), block_size(type));
  }
}

TensorChoice with_fallback(const TensorDesc& t, DType type) {
  TensorChoice choice{type, true, false, type};
  if (t.shape[0] % block_size(type) != 0) {
    choice.type = fallback_type(t, type);
    if (t.shape[0] % block_size(choice.type) != 0) choice.type = DType::F16;
    choice.fell_back = true;
  }
  return choice;
}

// llama.cpp's tensor_requires_imatrix.
bool requires_imatrix(std::string_view name, DType type, FT ft) {
  if (is_token_embd(name) || name == "output.weight") return false;
  switch (type) {
    case DType::IQ3_XXS:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ1_M:
    case DType::IQ1_S: return true;
    case DType::Q2_K: return ft == FT::MOSTLY_Q2_K_S;
    default: return false;
  }
}

// llama_tensor_get_type(): explicit types, --tensor-type patterns, the rules, the fallback.
TensorChoice choose_one(RuleState& s, const TensorDesc& t, DType default_type) {
  const Category c = category_of(t.name);
  const MixOptions& o = s.options;
  if (o.token_embedding_type && c == Category::TokenEmbd) {
    // per_layer_token_embd follows --token-embedding-type unless a --tensor-type pattern names it.
    bool named = false;
    if (t.name == "per_layer_token_embd.weight") {
      for (const auto& [pattern, type] : s.patterns) named = named || std::regex_search(t.name, pattern);
    }
    if (!named) {
      check_fits(t, *o.token_embedding_type, "the type requested for the token embedding", Setting::TokenEmbeddingType);
      return TensorChoice{*o.token_embedding_type, true, false, *o.token_embedding_type};
    }
  }
  if (o.output_tensor_type && c == Category::Output) {
    check_fits(t, *o.output_tensor_type, "the type requested for the output tensor", Setting::OutputTensorType);
    return TensorChoice{*o.output_tensor_type, true, false, *o.output_tensor_type};
  }
  if (!layout(default_type).quantized) return TensorChoice{default_type, true, false, default_type};
  DType type = default_type;
  bool manual = false;
  for (const auto& [pattern, pattern_type] : s.patterns) {
    if (std::regex_search(t.name, pattern)) {
      type = pattern_type;
      manual = true;
      break;
    }
  }
  if (!manual && !o.pure) type = mix_rules(s, t, c, type);
  return with_fallback(t, type);
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
  if (type && producible(*type)) return *type;
  std::vector<std::string_view> names;
  for (DType t : quant::supported_types()) {
    if (producible(t)) names.push_back(dtype_name(t));
  }
  throw_error("tensor type '{}' cannot be produced; valid types: {}", name, fmt::join(names, ", "));
}

TensorTypeOverride parse_tensor_type_override(std::string_view text) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    throw_error_for(Setting::TensorType, "malformed tensor type '{}': expected PATTERN=TYPE", text);
  }
  if (eq == 0) throw_error_for(Setting::TensorType, "tensor type '{}': missing tensor name pattern", text);
  if (eq + 1 == text.size()) throw_error_for(Setting::TensorType, "tensor type '{}': missing quantization type", text);
  TensorTypeOverride out;
  out.pattern = std::string(text.substr(0, eq));
  for (char& ch : out.pattern) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  try {
    out.type = output_type_by_name(text.substr(eq + 1));
  } catch (const Error& e) {
    throw_error_for(Setting::TensorType, "tensor type '{}': {}", text, e.what());
  }
  try {
    (void)std::regex(out.pattern);
  } catch (const std::regex_error& e) {
    throw_error_for(Setting::TensorType, "tensor type '{}': '{}' is not a valid regular expression ({})", text,
                    out.pattern, e.what());
  }
  return out;
}

bool is_quantizable(std::string_view name, std::span<const int64_t> shape, const MixOptions& options) {
  if (n_dims(shape) < 2) return false;
  if (name.size() < 6 || name.substr(name.size() - 6) != "weight") return false;
  if (contains(name, "_norm.weight")) return false;
  if (!options.quantize_output_tensor && name == "output.weight") return false;
  // Tensors llama.cpp keeps as they are (tensor_allows_quantization): MoE routers and routing
  // tables, Gemma 3n's small altup / laurel / per-layer projections, conv1d weights, MiniMax's
  // indexer projections, RWKV's small 2-D time-mix weights, T5's relative position bias, and
  // the vision / audio encoders' position, patch and codebook tensors.
  constexpr std::array kKeepParts = {
      "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj", "ssm_conv1d",
      "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight", "time_mix_first.weight",
      "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
      "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
      "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
      "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd",
      ".patch_merger", "a.rvq.codebook", "mm.a.code_embd"};
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
  for (const TensorTypeOverride& o : options.tensor_types) state.patterns.emplace_back(std::regex(o.pattern), o.type);
  for (const TensorDesc& t : tensors) {
    if (t.shape.empty()) throw_error("tensor '{}' has no dimensions", t.name);
    const Category c = category_of(t.name);
    if (is_attn_v_like(c)) ++state.n_attention_wv;
    if (c == Category::Output) state.has_tied_embeddings = false;
  }
  std::vector<TensorChoice> choices(tensors.size());
  for (size_t index : llama_cpp_tensor_order(tensors)) {
    const TensorDesc& t = tensors[index];
    if (!is_quantizable(t.name, t.shape, options)) {
      choices[index] = TensorChoice{t.type, false, false, t.type};
      continue;
    }
    TensorChoice choice = choose_one(state, t, mix.default_type);
    choice.requires_importance = requires_imatrix(t.name, choice.type, options.file_type);
    // A tensor already in the chosen type is copied as it is (llama.cpp does not requantize it).
    choice.convert = choice.type != t.type;
    choices[index] = choice;
  }
  return choices;
}

}  // namespace okapi::quantize
