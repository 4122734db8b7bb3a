// Embeddings through an Engine: tokenizes inputs as llama.cpp does for embeddings, packs many
// inputs into each forward pass (one KV store per input, non-causal attention where the model
// says so), and pools each input's hidden states. Used by `okapi embed` and by the server's
// /v1/embeddings, /embeddings and /v1/rerank.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/embedding.hpp"
#include "runtime/engine.hpp"

namespace okapi::runtime {

// llama.cpp's common_embd_normalize modes (--embd-normalize): -1 none, 0 max absolute value
// scaled to int16 range, 1 taxicab, 2 euclidean (the default), > 2 p-norm.
inline constexpr int kNormalizeNone = -1;
inline constexpr int kNormalizeEuclidean = 2;
void normalize_embedding(std::span<float> values, int mode);
// Cosine similarity as llama.cpp's common_embd_similarity_cos (0 for a zero vector).
float cosine_similarity(std::span<const float> a, std::span<const float> b);

struct EmbedderOptions {
  // nullopt: the file's {arch}.pooling_type, else Pooling::None... as llama.cpp: a model without the key pools with
  // the default below.
  std::optional<model::Pooling> pooling;
  model::Pooling default_pooling = model::Pooling::Mean;  // when neither the option nor the file says
  int64_t batch_tokens = 2048;    // tokens per forward pass (llama.cpp's -b / -ub for embeddings)
  int64_t max_input_tokens = 0;   // longest input accepted; 0: the model's trained context (capped)
  int64_t max_inputs_per_pass = 64;  // inputs (KV stores) per forward pass
};

// One input's result.
struct EmbeddingOutput {
  int64_t n_tokens = 0;
  // Pooled: pooled_width() values (not normalized). Pooling::None: n_tokens rows of n_embd.
  std::vector<float> values;
};

class Embedder {
 public:
  // Throws okapi::Error for a pooling the model cannot do (rank without a classifier head, last
  // or none ... ) with the reason, and for batch_tokens < 1.
  Embedder(Engine& engine, const EmbedderOptions& options);
  ~Embedder();
  Embedder(const Embedder&) = delete;
  Embedder& operator=(const Embedder&) = delete;

  model::Pooling pooling() const { return pooling_; }
  // Values per pooled vector (per token for Pooling::None).
  int64_t width() const;
  int64_t max_input_tokens() const { return max_input_tokens_; }

  // One text's tokens as llama.cpp tokenizes it for embeddings (common_tokenize with
  // add_special: BOS/CLS first and EOS/SEP last where the vocabulary adds them).
  std::vector<int32_t> tokenize(std::string_view text) const;
  // A rerank input, query and document joined as llama-server's format_prompt_rerank does (the
  // model's rerank template when it has one, else BOS query EOS SEP document EOS).
  std::vector<int32_t> tokenize_rerank(std::string_view query, std::string_view document) const;

  // Embeds every input, packing consecutive inputs into passes of up to batch_tokens tokens and
  // max_inputs_per_pass inputs. Outputs are not normalized. Throws okapi::Error for an empty
  // input, one longer than max_input_tokens() or than batch_tokens for a non-causal model (naming
  // the input's index and both sizes), or a token id out of range.
  std::vector<EmbeddingOutput> embed(std::span<const std::vector<int32_t>> inputs);

 private:
  struct Stores;
  Engine& engine_;
  EmbedderOptions options_;
  model::Pooling pooling_;
  int64_t max_input_tokens_ = 0;
  std::unique_ptr<Stores> stores_;
};

}  // namespace okapi::runtime
