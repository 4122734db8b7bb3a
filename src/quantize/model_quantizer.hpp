// Whole-model quantization, like llama-quantize: read a GGUF, choose each tensor's type with a
// mix (quantize/mix.hpp), convert tensor by tensor with the format table's quantizers, and write a
// GGUF atomically. The input is memory-mapped and the output streamed, so memory stays at about
// one tensor in float32 plus its quantized copy. The output does not depend on the thread count.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.hpp"
#include "quantize/mix.hpp"

namespace okapi::quantize {

enum class TensorOrder {
  Input,     // tensors keep the input file's order
  LlamaCpp,  // llama-quantize's order (llama_cpp_tensor_order): byte-identical files to llama-quantize
};

// llama-quantize's importance-matrix flags.
struct ImatrixOptions {
  std::string file;  // --imatrix (GGUF or legacy .dat); empty: none. Recorded as given.
  // --include-weights / --exclude-weights: keep only / drop the entries whose name contains one
  // of these (not both at once).
  std::vector<std::string> include_weights;
  std::vector<std::string> exclude_weights;
};

struct QuantizeOptions {
  MixOptions mix;  // mix.has_imatrix is set from `imatrix`
  ImatrixOptions imatrix;
  bool allow_requantize = false;  // --allow-requantize: convert already quantized tensors
  int n_threads = 1;
  TensorOrder order = TensorOrder::Input;
};

struct QuantizeObserver {
  // After each tensor: tensors done, total, the tensor just written.
  std::function<void(size_t done, size_t total, const std::string& name)> on_tensor;
  // Requantizing already quantized weights, fallbacks: said once each, before the work starts.
  std::function<void(const std::string& message)> on_warning;
};

struct TensorReport {
  std::string name;
  DType input_type = DType::F32;
  DType output_type = DType::F32;
  int64_t n_elements = 0;
  uint64_t input_bytes = 0;
  uint64_t output_bytes = 0;
  bool converted = false;
  bool fell_back = false;
};

struct QuantizeReport {
  std::vector<TensorReport> tensors;  // in output order
  uint64_t input_file_bytes = 0;
  uint64_t output_file_bytes = 0;
  double seconds = 0;
};

// The hyper-parameters the mix rules need, from general.architecture and {arch}.* keys.
ModelFacts model_facts(const gguf::File& file);

// Throws okapi::Error: unreadable or malformed input (the reader's message), output == input,
// output directory not writable, a tensor okapi cannot convert, a malformed importance matrix or
// one whose entry does not fit its tensor, a mix that needs an importance matrix without one
// (llama-quantize's refusal), quantized input without allow_requantize. All of these are found
// before any tensor is converted. On failure nothing is left at `output` (an existing file there
// is untouched). With an importance matrix the output records quantize.imatrix.* as
// llama-quantize does.
QuantizeReport quantize_model(const std::filesystem::path& input, const std::filesystem::path& output,
                              const QuantizeOptions& options, const QuantizeObserver& observer = {});

}  // namespace okapi::quantize
