// Quantization mixes ("Q4_K_M", "Q8_0", ...): which weight format each tensor of a model gets.
// This is llama.cpp's per-tensor type choice (llama_tensor_get_type, tensor_type_fallback,
// tensor_requires_imatrix and the quantize filter of llama_model_quantize_impl, src/llama-quant.cpp
// at the peers' commit) for every mix, the IQ ones included. Pure logic: no file access, no
// arithmetic on weights. Whether okapi can produce a chosen type is the format table's business
// (the quantizer checks it before any work).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"

namespace okapi::quantize {

// llama.cpp's `enum llama_ftype`; the number is stored as general.file_type.
enum class FileType : uint32_t {
  ALL_F32 = 0, MOSTLY_F16 = 1, MOSTLY_Q4_0 = 2, MOSTLY_Q4_1 = 3, MOSTLY_Q8_0 = 7, MOSTLY_Q5_0 = 8,
  MOSTLY_Q5_1 = 9, MOSTLY_Q2_K = 10, MOSTLY_Q3_K_S = 11, MOSTLY_Q3_K_M = 12, MOSTLY_Q3_K_L = 13,
  MOSTLY_Q4_K_S = 14, MOSTLY_Q4_K_M = 15, MOSTLY_Q5_K_S = 16, MOSTLY_Q5_K_M = 17, MOSTLY_Q6_K = 18,
  MOSTLY_IQ2_XXS = 19, MOSTLY_IQ2_XS = 20, MOSTLY_Q2_K_S = 21, MOSTLY_IQ3_XS = 22, MOSTLY_IQ3_XXS = 23,
  MOSTLY_IQ1_S = 24, MOSTLY_IQ4_NL = 25, MOSTLY_IQ3_S = 26, MOSTLY_IQ3_M = 27, MOSTLY_IQ2_S = 28,
  MOSTLY_IQ2_M = 29, MOSTLY_IQ4_XS = 30, MOSTLY_IQ1_M = 31, MOSTLY_BF16 = 32, MOSTLY_TQ1_0 = 36,
  MOSTLY_TQ2_0 = 37, MOSTLY_MXFP4_MOE = 38,
  MOSTLY_I2_S = 40,  // bitnet.cpp's number (its fork of llama.h)
};

struct MixSpec {
  std::string_view name;  // as llama-quantize spells it: "Q4_K_M"
  FileType file_type;
  DType default_type;     // what most 2-D weights get
  std::string_view description;
};

// The mixes, in llama-quantize's listing order.
std::span<const MixSpec> all_mixes();
// Case-insensitive; accepts llama-quantize's aliases Q3_K / Q4_K / Q5_K (= the _M mixes).
// Throws okapi::Error listing the valid names for an unknown one.
const MixSpec& mix_by_name(std::string_view name);
const MixSpec& mix_spec(FileType file_type);
// "q8_0, f16, iq4_xs, ..." for --output-tensor-type / --token-embedding-type / --tensor-type: a
// type the format table can produce (with or without importance weights). Throws okapi::Error
// (listing the valid ones) otherwise.
DType output_type_by_name(std::string_view name);

// --tensor-type PATTERN=TYPE: tensors whose name matches the regular expression (std::regex,
// ECMAScript, searched anywhere in the name, as llama.cpp) get TYPE instead of the mix's rules.
struct TensorTypeOverride {
  std::string pattern;  // lower-cased, as llama-quantize stores it
  DType type = DType::F32;
};
// Parses "PATTERN=TYPE" like llama-quantize's parse_tensor_type (the pattern is lower-cased).
// Throws okapi::Error (Setting::TensorType) for a missing '=', pattern or type, an unknown type or
// an invalid regular expression.
TensorTypeOverride parse_tensor_type_override(std::string_view text);

// The few hyper-parameters the mix rules look at (llama.cpp's hparams / model type).
struct ModelFacts {
  std::string arch;       // general.architecture
  int64_t n_layer = 0;    // {arch}.block_count
  int64_t n_head = 0;     // {arch}.attention.head_count (layer 0 when per-layer)
  int64_t n_head_kv = 0;  // {arch}.attention.head_count_kv (defaults to n_head)
  int64_t n_expert = 0;   // {arch}.expert_count

  int64_t n_gqa() const { return n_head_kv > 0 ? n_head / n_head_kv : 0; }
  // llama.cpp's LLM_TYPE_70B: an 80-layer llama with grouped-query attention.
  bool is_llama_70b() const { return arch == "llama" && n_layer == 80 && n_head != n_head_kv; }
};

struct TensorDesc {
  std::string name;
  DType type = DType::F32;      // the type in the input file
  std::vector<int64_t> shape;   // ggml ne[]
};

struct MixOptions {
  FileType file_type = FileType::MOSTLY_Q4_K_M;
  bool pure = false;                    // --pure: every quantizable tensor gets the default type
  bool quantize_output_tensor = true;   // false: --leave-output-tensor
  std::optional<DType> output_tensor_type;    // --output-tensor-type
  std::optional<DType> token_embedding_type;  // --token-embedding-type
  std::vector<TensorTypeOverride> tensor_types;  // --tensor-type, first match wins
  bool has_imatrix = false;  // an importance matrix is given (some rules depend on it)
};

struct TensorChoice {
  DType type = DType::F32;  // the type in the output file
  bool convert = false;     // data are converted to `type`; false: copied unchanged
  bool fell_back = false;   // the rules' choice did not fit the row length: `type` is the fallback
  DType wanted = DType::F32;  // the rules' choice before any fallback
  // llama-quantize refuses to produce this tensor without importance weights (its
  // tensor_requires_imatrix: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, and Q2_K in Q2_K_S).
  bool requires_importance = false;
};

// llama.cpp's quantize filter: 2-D (and 3-D expert) weights, not norms, not small special tensors.
bool is_quantizable(std::string_view name, std::span<const int64_t> shape, const MixOptions& options);

// One choice per tensor, in the order of `tensors`. The rules' layer counters run in llama.cpp's
// tensor order (llama_cpp_tensor_order), as llama-quantize does. Throws okapi::Error when a type
// asked for explicitly (--output-tensor-type, --token-embedding-type) cannot hold a tensor, or a
// chosen type has no fallback (llama.cpp's "no tensor type fallback is defined").
std::vector<TensorChoice> choose_tensor_types(const ModelFacts& model, std::span<const TensorDesc> tensors,
                                              const MixOptions& options);

// The order llama.cpp loads and writes tensors in: tensors outside blocks first, then by block
// number ("blk.N."), ties by name (byte order). Returns indices into `tensors`.
std::vector<size_t> llama_cpp_tensor_order(std::span<const TensorDesc> tensors);

}  // namespace okapi::quantize
