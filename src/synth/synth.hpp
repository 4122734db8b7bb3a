// Random-weight GGUF models of real shapes (okapi synth): the benchmark models. Every value is
// a pure function of (seed, tensor name, element index) - a counter-based hash fed to
// Box-Muller - so the file is the same whatever the thread count, and tensors are generated
// and quantized one at a time while the writer streams them to disk.
//
// Initialization (as shared/golden's gen_models.py): 2-D W[out, in] ~ N(0, 1/sqrt(in)),
// token_embd and an untied output ~ N(0, 1/sqrt(n_embd)), norms 1 + N(0, 0.1), q/k/v biases
// N(0, 0.2), bitnet projections s * {-1, 0, +1} uniform with s ~ 1/sqrt(2/3 in) (a multiple of
// 1/256, exact in fp16). The tokenizer is a synthetic SPM vocabulary of the preset's size.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "format/gguf.hpp"
#include "synth/presets.hpp"

namespace okapi::synth {

enum class Init { Embedding, Weight, Ternary, Norm, Bias };

struct TensorPlan {
  std::string name;
  std::vector<int64_t> shape;  // ggml ne[]
  Init init = Init::Weight;
  float scale = 1.0f;  // the standard deviation, the ternary step, or the norm's spread
};

struct SynthOptions {
  std::string preset;
  std::string arch;          // empty: the preset's default
  std::string type = "F32";  // a llama-quantize mix name
  uint64_t seed = 1;
  int64_t layers = 0;        // 0: the preset's default depth
  int64_t vocab = 0;         // 0: the preset's vocabulary size (smaller: quick tests)
  // A GGUF whose tokenizer (every tokenizer.* key) the model takes instead of the made-up one; the
  // vocabulary size is then its token count. Empty: the made-up SentencePiece vocabulary.
  std::filesystem::path vocab_from = {};
  int n_threads = 1;
};

struct SynthReport {
  std::string arch;
  int64_t n_layer = 0;
  size_t n_tensors = 0;
  uint64_t n_params = 0;
  uint64_t file_bytes = 0;
  double seconds = 0;
};

// The tensors of `preset` with `n_layer` blocks, in the order they are written.
std::vector<TensorPlan> plan_tensors(const Preset& preset, int64_t n_layer);
// Fills out[0, n_elements) of tensor `t` for `seed`; elements [begin, end) only when given.
void fill_values(const TensorPlan& t, uint64_t seed, float* out, int64_t begin, int64_t end);
// The metadata (general.*, {arch}.*, tokenizer.ggml.*) of the file.
void set_metadata(gguf::Writer& writer, const Preset& preset, const std::string& arch, int64_t n_layer,
                  uint32_t file_type, uint64_t seed);

// Checks the options (throws okapi::Error listing valid presets / archs / types), then writes
// the model atomically. on_tensor(done, total, name) after each tensor.
SynthReport write_synth(const SynthOptions& options, const std::filesystem::path& output,
                        const std::function<void(size_t, size_t, const std::string&)>& on_tensor = {});
// The same for a preset given whole (options.preset is ignored): tests shrink a real preset's
// widths while keeping its features.
SynthReport write_synth(const Preset& preset, const SynthOptions& options, const std::filesystem::path& output,
                        const std::function<void(size_t, size_t, const std::string&)>& on_tensor = {});

}  // namespace okapi::synth
