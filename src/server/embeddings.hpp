// The request bodies and responses of okapi serve's embeddings and rerank endpoints, as
// llama-server shapes them (tools/server at de3ff81): POST /v1/embeddings (OpenAI's shape),
// /embeddings and /embedding (llama-server's native shape: per-token vectors with pooling none),
// /v1/rerank, /rerank, /reranking, /v1/reranking (Jina / Cohere's shape; TEI's with `texts`).
// Pure functions of the body and the server's limits, so that they are tested without a model;
// the batching of inputs across requests is embedding_queue.hpp's.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/embedder.hpp"

namespace okapi::server {

using Json = nlohmann::ordered_json;

// What one request may ask of an embeddings server (fixed when the model is loaded).
struct EmbeddingLimits {
  int64_t n_vocab = 0;             // token ids are in [0, n_vocab)
  int64_t max_input_tokens = 0;    // tokens per input
  std::string max_input_reason;    // what sets max_input_tokens, for the 400 ("the model's context (512)")
  size_t max_inputs = 2048;        // inputs per request (--embd-max-inputs)
  int64_t width = 0;               // values per vector (per token with per_token)
  bool per_token = false;          // Pooling::None: a vector per token, the native shape only
  // Pooling::None: tokens of all the inputs of a request together times width, at most (the
  // per-token vectors are the response: this bounds its size).
  int64_t max_output_values = int64_t{8} << 20;  // ~32 MB of floats, ~80 MB of JSON
  // Text of N bytes has at least N / max_bytes_per_token tokens: an input that cannot fit is
  // refused before it is tokenized (0: unknown, no precheck).
  size_t max_bytes_per_token = 0;
  int default_normalize = runtime::kNormalizeEuclidean;  // --embd-normalize
  // Tokens that end an input where the tokenizer adds them (EOS, SEP): truncation keeps such a
  // last token last, as a [CLS]/last-token pooling or a classifier expects it there.
  std::vector<int32_t> end_tokens;
};

enum class EmbeddingsShape {
  OpenAI,  // {"object": "list", "data": [{"embedding", "index", "object"}], "model", "usage"}
  Native,  // [{"index", "embedding": [[...], ...]}]
};

struct EmbeddingsRequest {
  std::vector<std::vector<int32_t>> inputs;
  EmbeddingsShape shape = EmbeddingsShape::OpenAI;
  bool base64 = false;   // encoding_format "base64": little-endian float32, as OpenAI's clients decode
  int normalize = runtime::kNormalizeEuclidean;  // embd_normalize (pooled vectors only)
  std::string model;     // the request's `model`, echoed as llama-server does (empty: the server's id)
  int64_t prompt_tokens = 0;
};

// A text input's tokens as the model embeds them (Embedder::tokenize).
using TextTokenizer = std::function<std::vector<int32_t>(std::string_view text)>;
// A query and a document as one rerank input (Embedder::tokenize_rerank).
using PairTokenizer = std::function<std::vector<int32_t>(std::string_view query, std::string_view document)>;

// Reads an embeddings body: `input` (or llama-server's `content`, which always answers in the
// native shape) as a string, an array of strings, an array of token ids or an array of token-id
// arrays; `encoding_format`, `dimensions`, `embd_normalize`, `model` and okapi's `truncate`.
// `openai_route`: /v1/embeddings. Throws ApiError 400 naming the field for: no input, an empty
// one (an empty string or token array, at any index), more than max_inputs inputs, a token id out
// of range, an input over max_input_tokens (unless `truncate`: then cut, keeping a final control
// token such as [SEP] or </s> at the end), pooling none on the OpenAI route, and per-token output
// over max_output_values.
EmbeddingsRequest parse_embeddings_request(const Json& body, bool openai_route, const EmbeddingLimits& limits,
                                           const TextTokenizer& tokenize);

struct RerankRequest {
  std::vector<std::vector<int32_t>> inputs;  // per document: query and document joined
  std::vector<std::string> documents;        // their text, for return_documents
  size_t top_n = 0;                          // results kept (all when not given)
  bool return_documents = false;             // Jina / Cohere: results[i].document = {"text": ...}
  bool tei = false;                          // `texts` instead of `documents`: TEI's bare array
  bool return_text = false;                  // TEI: results[i].text
  std::string model;
  int64_t prompt_tokens = 0;
};

// Reads a rerank body: `query` (a string), `documents` (or TEI's `texts`: a non-empty array of
// strings, or of objects with a string `text`, as Jina and Cohere's v1 take them), `top_n`,
// `return_documents`, `return_text`, `model`, `truncate`. Throws ApiError 400 as
// parse_embeddings_request does.
RerankRequest parse_rerank_request(const Json& body, const EmbeddingLimits& limits, const PairTokenizer& tokenize);

// Standard base64 (with padding) of the values as little-endian float32.
std::string base64_floats(std::span<const float> values);

// The response bodies as JSON text. Vectors are written with the fewest digits that read back as
// the same float32. `model_id`: the server's id, used when the request named no model.
// `outputs` are normalized already (pooled ones; per-token ones never are, as llama-server).
std::string embeddings_response(const EmbeddingsRequest& request, std::span<const runtime::EmbeddingOutput> outputs,
                                bool per_token, const std::string& model_id);
// Rank scores (output 0 of each input's classifier) sorted high to low (ties by index), top_n kept.
Json rerank_response(const RerankRequest& request, std::span<const runtime::EmbeddingOutput> outputs,
                     const std::string& model_id);

}  // namespace okapi::server
