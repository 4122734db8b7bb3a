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
// Cosine similarity as llama.cpp's common_embd_similarity_cos: 0 when one vector is zero, 1 when
// both are. The spans must have the same length (throws okapi::Error otherwise).
float cosine_similarity(std::span<const float> a, std::span<const float> b);

struct EmbedderOptions {
  // nullopt: the file's {arch}.pooling_type, else default_pooling (llama.cpp itself falls back
  // to none there; a vector per input is what callers of an embedding model want).
  std::optional<model::Pooling> pooling;
  model::Pooling default_pooling = model::Pooling::Mean;  // when neither the option nor the file says
  int64_t batch_tokens = 2048;    // tokens per forward pass (llama.cpp's -b / -ub for embeddings)
  // Longest input accepted; 0: the model's trained context, capped at kDefaultContextCap (as -c
  // not given). A non-causal model's input must also fit one pass (batch_tokens).
  int64_t max_input_tokens = 0;
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
  // Throws okapi::Error for a pooling the model cannot do (rank without a classifier head) with
  // the reason, for batch_tokens, max_inputs_per_pass or max_input_tokens < 1 (0 for the last is
  // the default), and when a pass's KV stores and scratch would not fit in memory.
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
  // llama-embedding's rank input: one line holding a query and a document split by `separator`
  // (its --cls-separator). With the model's rerank template: the template with {query} and
  // {document} replaced; else the parts joined by the EOS and SEP texts the vocabulary adds. Then
  // tokenized as tokenize() does. A line without the separator is tokenize(line).
  std::vector<int32_t> tokenize_rank_line(std::string_view line, std::string_view separator) const;
  // Whether `tokens` end with the vocabulary's SEP or EOS (llama-embedding warns when not: the
  // file's add_eos_token is probably wrong).
  bool ends_with_sep_or_eos(std::span<const int32_t> tokens) const;

  // Embeds every input, packing consecutive inputs into passes of up to batch_tokens tokens and
  // max_inputs_per_pass inputs. Outputs are not normalized. Throws okapi::Error for an empty
  // input, one longer than max_input_tokens() or than batch_tokens for a non-causal model (naming
  // the input's index and both sizes), or a token id out of range; all inputs are checked before
  // any work. The results do not depend on how inputs are grouped into passes (bit for bit).
  // Not thread-safe: one embed() at a time per Embedder (its KV stores are reused).
  std::vector<EmbeddingOutput> embed(std::span<const std::vector<int32_t>> inputs);
  // Throws the error embed() would for input `index` (used to refuse a request before queueing it).
  void check_input(std::span<const int32_t> tokens, size_t index) const;

 private:
  struct Stores;
  struct Piece;
  void run_pass(std::span<const Piece> pieces, std::span<const std::vector<int32_t>> inputs,
                std::vector<EmbeddingOutput>& outputs);
  std::vector<int32_t> tokenize_with(std::string_view text, bool add_special, bool parse_special) const;
  Engine& engine_;
  EmbedderOptions options_;
  model::Pooling pooling_;
  int64_t max_input_tokens_ = 0;
  std::unique_ptr<Stores> stores_;
};

}  // namespace okapi::runtime
