// okapi::Error — the one exception type for bad input and failed operations.
// Messages say what went wrong, where (file, field, offset) and the offending value. The library
// states facts in its own words ("the context holds 256 tokens"); an error caused by a setting the
// caller chose carries that setting as a tag, and the edge that took the setting adds its name: the
// CLI its flag (tools/okapi/cli_app.cpp), the server its flag or request field (server/api_error).
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace okapi {

// The caller's settings that library errors can blame. Each edge names them its own way: the CLI
// (tools/okapi/cli_app.cpp) by its flag, the server (server/api_error.cpp) by its own flags, both
// from setting_flag().
enum class Setting {
  None,
  // The engine: context, batches, threads, KV cache and exact mode.
  ContextLength,   // cells of the KV cache (the whole context)
  SlotContext,     // cells of one server slot's KV cache (the context shared among the slots)
  BatchSize,       // tokens per forward pass
  Threads,
  Slots,           // server slots sharing the context
  CacheTypeK,      // KV cache types and rotation (kv::CacheType)
  CacheTypeV,
  CacheTypes,      // K's and V's types together
  KvRotation,
  Exact,           // exact mode itself
  ExactAttention,  // exact mode's options (runtime::ExactOptions)
  ExactRing,
  Frobenius,
  Model,           // the model file to load
  // Evaluation: perplexity, kv-eval, bench.
  Chunks,          // perplexity / kv-eval chunks
  KlDivergence,    // perplexity: the saved log-probs to compare with
  KvEvalTypes,     // kv-eval: the cache types to compare
  BenchPrompt,     // bench: tokens of a prefill test
  BenchGenerate,   // bench: tokens of a decode test
  BenchPromptGenerate,  // bench: a prefill followed by a decode
  BenchDepth,      // bench: cells filled before a test
  Repetitions,     // bench: runs of each test
  // Speculative decoding.
  DraftSkip,
  DraftLength,
  // Training (train::TrainOptions, TrainHyper, ConfigOverrides).
  TrainData,       // the text files to train on
  Tokenizer,       // where the vocabulary comes from
  InitFrom,        // the model a run starts from
  TrainContext,    // the model's context length (config override)
  RunDirectory,    // the run's directory
  Resume,          // the run directory a resumed run continues
  Steps,
  TrainBatch,      // sequences per micro-batch
  Sequence,        // tokens per training sequence
  Accumulation,    // micro-batches per step
  Warmup,
  LearningRate,
  LearningRateMin,
  WeightDecay,
  GradClip,
  TrainThreads,
  BenchSteps,      // training steps timed by a benchmark
  // Compression (compress::LowRankOptions, gauge).
  Ratio,           // fraction of the weight bytes to remove
  Ranks,           // how ranks are allocated (a method name or a file)
  CompressMethod,
  Calibration,     // calibration text
  Gauge,           // the gauge transform
  // Quantization (quantize::Mix).
  Pure,            // every weight gets the mix's type, with no fallback
  OutputTensorType,
  TokenEmbeddingType,
  TensorType,      // --tensor-type PATTERN=TYPE
  Imatrix,         // the importance matrix file
  AllowRequantize, // quantized input is converted only when allowed
  // Synthetic models (synth).
  Vocab,
  Layers,
};

// A change of one setting that would avoid an error, in the library's words, with "{}" where the
// edge puts the setting's name: {Setting::BatchSize, "a smaller {}"} -> "a smaller -b".
struct Remedy {
  Setting setting;
  std::string change;
};

// The okapi command-line flag that sets `setting` ("-c", "--lr"; empty for None): the table the
// edges word errors with (the CLI after the fact, the server for the settings that are its own).
// Library messages never use it.
std::string_view setting_flag(Setting setting);

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, Setting setting = Setting::None, std::vector<Remedy> remedies = {})
      : std::runtime_error(message), setting_(setting), remedies_(std::move(remedies)) {}
  // The setting to change to avoid this error, if one is to blame.
  Setting setting() const noexcept { return setting_; }
  // Changes that would avoid it, when several settings could (a run that does not fit in memory).
  const std::vector<Remedy>& remedies() const noexcept { return remedies_; }

 private:
  Setting setting_;
  std::vector<Remedy> remedies_;
};

// "; try a smaller -c or a smaller -b": the remedies worded with `name_of(setting)` (a function
// returning a string_view; a remedy whose setting it does not name is left out), or "".
template <typename NameOf>
std::string remedy_advice(const std::vector<Remedy>& remedies, NameOf&& name_of) {
  std::string text;
  for (const Remedy& remedy : remedies) {
    const auto name = name_of(remedy.setting);
    if (name.empty()) continue;
    text += text.empty() ? "; try " : " or ";
    text += fmt::format(fmt::runtime(remedy.change), name);
  }
  return text;
}

// A command line that cannot be valid (unknown flag, missing value, value out of range): the CLI
// prints it like any Error but exits with code 2, as usage errors do.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message, Setting setting = Setting::None) : Error(message, setting) {}
};

// throw_error("tensor '{}': offset {} past end of file ({} bytes)", name, off, size);
template <typename... Args>
[[noreturn]] void throw_error(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void throw_usage_error(fmt::format_string<Args...> format, Args&&... args) {
  throw UsageError(fmt::format(format, std::forward<Args>(args)...));
}

// throw_error_for(Setting::ContextLength, "the prompt has {} tokens but the context holds only {}", n, n_ctx);
template <typename... Args>
[[noreturn]] void throw_error_for(Setting setting, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...), setting);
}

template <typename... Args>
[[noreturn]] void throw_usage_error_for(Setting setting, fmt::format_string<Args...> format, Args&&... args) {
  throw UsageError(fmt::format(format, std::forward<Args>(args)...), setting);
}

// A warning from the library: a fact, tagged with its setting like an Error. It goes to the
// handler the edge installed (the CLI appends the flag); by default "okapi: warning: TEXT" on stderr.
using WarningHandler = void (*)(const std::string& message, Setting setting);
// Installs `handler` (nullptr: the default) and returns the previous one.
WarningHandler set_warning_handler(WarningHandler handler);
void warn(const std::string& message, Setting setting = Setting::None);

}  // namespace okapi
