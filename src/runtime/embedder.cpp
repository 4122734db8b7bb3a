// Interface stubs; the embeddings work fills them in.
#include "runtime/embedder.hpp"

#include "core/error.hpp"

namespace okapi::runtime {

struct Embedder::Stores {};

void normalize_embedding(std::span<float>, int) { throw_error("normalize_embedding: not implemented yet"); }
float cosine_similarity(std::span<const float>, std::span<const float>) {
  throw_error("cosine_similarity: not implemented yet");
}

Embedder::Embedder(Engine& engine, const EmbedderOptions& options)
    : engine_(engine), options_(options), pooling_(options.pooling.value_or(options.default_pooling)) {}
Embedder::~Embedder() = default;
int64_t Embedder::width() const { return engine_.model().pooled_width(pooling_); }
std::vector<int32_t> Embedder::tokenize(std::string_view) const { throw_error("Embedder: not implemented yet"); }
std::vector<int32_t> Embedder::tokenize_rerank(std::string_view, std::string_view) const {
  throw_error("Embedder: not implemented yet");
}
std::vector<EmbeddingOutput> Embedder::embed(std::span<const std::vector<int32_t>>) {
  throw_error("Embedder: not implemented yet");
}

}  // namespace okapi::runtime
