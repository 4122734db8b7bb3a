// A model: hyper-parameters plus typed weight views into a mapped GGUF file, and a forward pass
// written against Ops. The backend (Ops) prepares the weights once at load (Ops::prepare of
// weights()) and owns what it made of them. Each architecture (llama.cpp, qwen2.cpp, ...) derives from Model, looks
// its tensors up in its constructor and implements forward_batch().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/problem_list.hpp"
#include "format/gguf.hpp"
#include "model/hparams.hpp"
#include "model/ops.hpp"

namespace okapi::model {

enum class LogitRows { All, Last };

class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Reads general.architecture and builds the matching model. Unknown architecture: an error
  // listing the supported ones; missing tensors: one error naming every missing tensor.
  static std::unique_ptr<Model> load(gguf::File file);

  const HParams& hparams() const { return hparams_; }
  const gguf::File& file() const { return file_; }
  int64_t n_vocab() const { return hparams_.n_vocab; }
  // Every weight the forward pass multiplies by, for Ops::prepare.
  WeightSet weights() const;

  // Runs tokens[t] at positions[t] (prefill when many, decode when one), appending their K/V to
  // `kv`, and writes logits [rows x n_vocab]: every token (All) or the last one (Last).
  // Throws okapi::Error when a position does not fit the store or a token id is out of range.
  void forward(Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
               LogitRows rows, float* logits) const;
  // forward() with the layers whose flag in `skip` (one per layer) is set left out: the residual
  // stream passes them unchanged and their KV cells are not written (layer-skip self-drafting).
  // Throws okapi::Error for an architecture that cannot skip layers or a mask of the wrong length.
  void forward_skipping(Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                        LogitRows rows, float* logits, std::span<const uint8_t> skip) const;
  virtual bool can_skip_layers() const { return false; }

 protected:
  Model(gguf::File file, HParams hparams);

  // Implemented per architecture: inputs already validated.
  virtual void forward_batch(Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens,
                             std::span<const int32_t> positions, LogitRows rows, float* logits) const = 0;

  // Tensor lookup for constructors: a missing required tensor (or one of the wrong shape) is
  // recorded and reported together by check_tensors(). `shape` is ggml ne[] (empty: any).
  Weight tensor(const std::string& name, std::vector<int64_t> shape);
  Weight optional_tensor(const std::string& name, std::vector<int64_t> shape);
  void check_tensors() const;  // throws counting every problem, listing the first few
  // Records `w` (if present) as one the forward pass passes to Ops::matmul (see weights()).
  void uses_in_matmul(const Weight& w);
  // The layers forward_skipping() leaves out for the call under way (empty: none).
  bool skips_layer(int64_t layer) const {
    return !skip_.empty() && skip_[static_cast<size_t>(layer)] != 0;
  }

  gguf::File file_;
  HParams hparams_;

 private:
  ProblemList problems_;
  std::vector<Weight> matmul_weights_;
  mutable std::span<const uint8_t> skip_;  // set only during forward_skipping()
};

// The architecture registry: general.architecture -> factory.
using ModelFactory = std::function<std::unique_ptr<Model>(gguf::File file, HParams hparams)>;
struct ArchitectureEntry {
  std::string_view name;
  ModelFactory make;
};
std::span<const ArchitectureEntry> architectures();

// Shared helpers for architectures.
// The rows of `x` ([n_tokens x n]) whose logits are wanted: all of them, or only the last.
int64_t output_row_count(LogitRows rows, int64_t n_tokens);
const float* output_rows_begin(LogitRows rows, const float* x, int64_t n_tokens, int64_t n);

}  // namespace okapi::model
