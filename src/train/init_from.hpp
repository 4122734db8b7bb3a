// `okapi train --init-from MODEL.gguf`: a llama-architecture GGUF (as the trainer exports it, or
// any llama GGUF whose tensors okapi can dequantize) read back as a trainer config and parameter
// buffer, so a run fine-tunes it. A projection stored as low-rank factors (okapi compress:
// P.lr_in.weight [n_in, r] and P.lr_out.weight [r, n_out], or an in-factor shared through the
// okapi.lr_in.P key) becomes two trainable matrices of that rank.
#pragma once
#include <filesystem>
#include <vector>

#include "format/gguf.hpp"
#include "train/model.hpp"

namespace okapi::train {

struct SourceModel {
  ModelConfig config;
  std::vector<float> params;  // in ParameterLayout(config) order
  // Keys the export writes again so the fine-tuned model stays what the source was
  // (okapi.compress.*).
  std::vector<gguf::KeyValue> export_metadata;
};

// Reads `path`. context_length: the trained context to use when the file has none (0: the file's,
// which must then be present). Throws okapi::Error naming the file and the problem: not a file, an
// architecture other than llama, hyper-parameters the trainer's block cannot express (separate
// head sizes, partial or scaled RoPE, RoPE frequency factors), a missing tensor or one of the
// wrong shape, a tensor the trainer has no place for (biases, q/k norms, ...), a type okapi cannot
// dequantize.
SourceModel load_source_model(const std::filesystem::path& path, int64_t context_length);

}  // namespace okapi::train
