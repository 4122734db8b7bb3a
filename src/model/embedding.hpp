// Embedding models: how an input's hidden states become one vector (pooling), llama.cpp's
// llama_pooling_type with the values GGUF's {arch}.pooling_type stores.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace okapi::model {

enum class Pooling : int32_t {
  None = 0,  // every token's hidden state, unpooled
  Mean = 1,  // the mean over the input's tokens
  Cls = 2,   // the first token's
  Last = 3,  // the last token's (decoder embedding models: Qwen3-Embedding)
  Rank = 4,  // the first token's through the classifier head (cross-encoder rerankers)
};

std::string_view pooling_name(Pooling pooling);  // "none", "mean", "cls", "last", "rank"
// "none" | "mean" | "cls" | "last" | "rank"; nullopt for anything else.
std::optional<Pooling> parse_pooling(std::string_view name);
// The GGUF value (0..4) as a Pooling; nullopt for another value.
std::optional<Pooling> pooling_from_gguf(int64_t value);

}  // namespace okapi::model
