// The residual stream of a model, captured per layer for the tokens of a text (`okapi analyze
// --intrinsic-dim / --gtc`): the CPU forward pass runs through ObservingOps, and the input of
// every blk.N.attn_norm (the residual entering layer N) and of output_norm (the final residual)
// is copied out. Also the output head (final RMSNorm and output matrix) as plain floats, so that
// a predicted final state can be turned into logits.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace okapi::model {
class Model;
}

namespace okapi::eval {

struct HiddenStates {
  int64_t n_tokens = 0;  // rows captured
  int64_t n_layer = 0;   // the model's blocks; there are n_layer + 1 states per token
  int64_t n_embd = 0;
  int64_t n_ctx = 0;     // chunk length the text ran in
  // layers[l] is n_tokens x n_embd, row-major: the residual entering block l, and for
  // l == n_layer the final residual (the input of output_norm).
  std::vector<std::vector<float>> layers;
  std::vector<int32_t> token_ids, positions;  // per captured row
  // The engine's logits for the last captured row: a check of OutputHead against the forward pass.
  std::vector<float> last_row_logits;

  std::span<const float> layer(int64_t l) const { return layers[static_cast<size_t>(l)]; }
  const float* row(int64_t l, int64_t t) const { return layers[static_cast<size_t>(l)].data() + t * n_embd; }
};

struct HiddenStateOptions {
  int64_t max_tokens = 2048;  // rows to capture
  int64_t n_ctx = 256;        // chunk length, capped at the model's trained context (0: that context)
  int threads = 1;
  uint64_t max_bytes = uint64_t{4} << 30;  // refuse a capture needing more memory than this
};

// The bytes capture_hidden_states keeps for `tokens` rows of a model with these sizes.
uint64_t hidden_state_bytes(int64_t tokens, int64_t n_layer, int64_t n_embd);

// Tokenizes `text` (with BOS), runs it in chunks of n_ctx tokens and keeps the states of the first
// max_tokens rows, skipping each chunk's first row (BOS or the chunk start, the same state in
// every chunk, which would be a duplicate point). Throws okapi::Error when the text holds fewer
// than 64 such rows, the model has no layers, the capture would exceed max_bytes, or the forward
// pass does not show a layer's residual (an architecture naming its norms differently).
HiddenStates capture_hidden_states(const model::Model& model, const std::string& text, const HiddenStateOptions& options);

// logits = output · rmsnorm(h, output_norm), as the llama-style forward pass ends (the output
// matrix is token_embd when tied). An architecture that ends differently is caught by comparing
// with HiddenStates::last_row_logits.
class OutputHead {
 public:
  explicit OutputHead(const model::Model& model);  // throws okapi::Error without output_norm
  int64_t n_vocab() const { return n_vocab_; }
  int64_t n_embd() const { return n_embd_; }
  void logits(const float* h, float* out) const;  // h: n_embd, out: n_vocab

 private:
  int64_t n_embd_ = 0, n_vocab_ = 0;
  float eps_ = 0;
  std::vector<float> norm_, matrix_;  // matrix_: n_vocab x n_embd
};

}  // namespace okapi::eval
