// Trained parameters -> a GGUF the engine (and llama.cpp) runs, and the engine-side check of it.
//
// Float models become a `llama` GGUF (F32 or F16 matrices, F32 norms; output.weight only when
// the embeddings are untied; interleaved-pair RoPE as trained, so no weight permutation).
// Ternary models become a `bitnet` GGUF: every projection is stored as its ternary codes q in
// {-1, 0, +1} (train::ternarize, the rule QAT used) with block scales 1, plus a one-element F32
// `<name>.scale` holding the absmean scale, which the engine's project() multiplies into the
// output (y = (Q x) * scale). Codes go into TQ2_0 or TQ1_0 when the row length is a multiple of
// 256, else into F32 (exact, too); embeddings and norms stay F32.
// The tokenizer metadata are those llama.cpp's llama2.c converter writes (a tokenizer.bin), or the
// tokenizer.* keys of the GGUF the tokenizer came from.
// Low-rank projections (a compressed model fine-tuned with --init-from) are written as okapi
// compress writes them: P.lr_in.weight [n_in, rank] and P.lr_out.weight [rank, n_out] in the
// matrices' type, a shared in-factor once under its name with an okapi.lr_in.P key naming it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "train/data.hpp"
#include "train/model.hpp"

namespace okapi::train {

struct ExportOptions {
  // Float models: F32 or F16. Ternary models: TQ2_0, TQ1_0 or F32 (codes as floats).
  DType type = DType::F32;
  std::string name;  // general.name; empty: the config's name
  // Written as they are (an --init-from model's okapi.compress.* keys, so that a fine-tuned
  // compressed model still says how it was compressed).
  std::vector<gguf::KeyValue> metadata = {};
};

struct ExportSummary {
  std::string architecture;
  size_t n_tensors = 0;
  int64_t ternary_packed = 0;    // projections stored as TQ2_0 / TQ1_0
  int64_t ternary_fallback = 0;  // projections whose rows did not fit 256-blocks (stored F32)
  uint64_t file_bytes = 0;
};

// The default --export-type for a model: F32, or TQ2_0 for a ternary one.
DType default_export_type(const ModelConfig& config);

// Writes `path` atomically. Throws okapi::Error for a type the model kind cannot take.
ExportSummary export_gguf(const ModelConfig& config, std::span<const float> params, const TrainingTokenizer& tok,
                          const std::filesystem::path& path, const ExportOptions& options);

// The engine's mean cross-entropy on evaluation windows: each window runs through
// model::Model::forward from position 0 (F32 KV cache), every position scored, in double.
struct EngineEval {
  double mean_loss = 0;
  int64_t scored = 0;
};
EngineEval evaluate_gguf(const std::filesystem::path& model, const EvalWindows& windows, int threads);

}  // namespace okapi::train
