// Model configs: validation and the llama2.c "stories" shapes by name.
#include <algorithm>
#include <array>
#include <string>

#include "core/error.hpp"
#include "train/model.hpp"

namespace okapi::train {

void ModelConfig::validate() const {
  const auto positive = [&](const char* field, int64_t value) {
    if (value <= 0) throw_error("model config '{}': {} = {} must be positive", name, field, value);
  };
  positive("dim", dim);
  positive("hidden_dim", hidden_dim);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("n_kv_heads", n_kv_heads);
  positive("vocab_size", vocab_size);
  positive("seq_len", seq_len);
  if (dim % n_heads != 0) throw_error("model config '{}': dim {} is not a multiple of n_heads {}", name, dim, n_heads);
  if (n_heads % n_kv_heads != 0) {
    throw_error("model config '{}': n_heads {} is not a multiple of n_kv_heads {}", name, n_heads, n_kv_heads);
  }
  if (head_dim() % 2 != 0) throw_error("model config '{}': head_dim {} must be even (RoPE pairs)", name, head_dim());
  if (!(norm_eps >= 0.0f)) throw_error("model config '{}': norm_eps {} must be >= 0", name, norm_eps);
  if (!(rope_theta > 0.0f)) throw_error("model config '{}': rope_theta {} must be positive", name, rope_theta);
  if (vocab_size > INT32_MAX) throw_error("model config '{}': vocab_size {} does not fit int32 ids", name, vocab_size);
  for (size_t i = 0; i < low_rank.size(); ++i) {
    const LowRankProjection& lr = low_rank[i];
    if (ternary) throw_error("model config '{}': low-rank projections ({}) are for float models, not ternary", name, lr.name);
    // "blk.N.KIND" with N < n_layers and KIND a projection
    const size_t dot = lr.name.find('.', 4);
    int64_t layer = -1;
    std::string_view kind;
    if (lr.name.rfind("blk.", 0) == 0 && dot != std::string::npos && dot > 4 &&
        lr.name.find_first_not_of("0123456789", 4) == dot) {
      layer = std::stoll(lr.name.substr(4, dot - 4));
      kind = std::string_view(lr.name).substr(dot + 1);
    }
    const auto kinds = projection_kinds();
    if (layer < 0 || layer >= n_layers || std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
      throw_error("model config '{}': low-rank entry '{}' names no projection of its {} layers", name, lr.name, n_layers);
    }
    const auto [n_out, n_in] = projection_shape(*this, kind);
    if (lr.rank < 1 || lr.rank > std::min(n_out, n_in)) {
      throw_error("model config '{}': {} has rank {}, outside [1, {}]", name, lr.name, lr.rank, std::min(n_out, n_in));
    }
    if (lr.in_factor.empty()) throw_error("model config '{}': {} has no in-factor tensor name", name, lr.name);
    for (size_t j = 0; j < i; ++j) {
      if (low_rank[j].name == lr.name) throw_error("model config '{}': {} is listed twice as low-rank", name, lr.name);
    }
  }
}

const LowRankProjection* ModelConfig::find_low_rank(std::string_view projection) const {
  for (const LowRankProjection& lr : low_rank) {
    if (lr.name == projection) return &lr;
  }
  return nullptr;
}

namespace {

struct Shape {
  std::string_view name;
  int64_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, seq_len;
};

// llama2.c's published TinyStories models (their ModelArgs; hidden_dim as in the checkpoints).
constexpr std::array<Shape, 4> kShapes = {{
    {"stories260K", 64, 172, 5, 8, 4, 512},
    {"stories15M", 288, 768, 6, 6, 6, 256},
    {"stories42M", 512, 1376, 8, 8, 8, 1024},
    {"stories110M", 768, 2048, 12, 12, 12, 1024},
}};

constexpr std::array<std::string_view, 4> kNames = {kShapes[0].name, kShapes[1].name, kShapes[2].name,
                                                    kShapes[3].name};

}  // namespace

std::span<const std::string_view> config_names() { return kNames; }

ModelConfig config_by_name(std::string_view name, int64_t vocab_size) {
  for (const Shape& s : kShapes) {
    if (s.name != name) continue;
    ModelConfig c;
    c.name = std::string(s.name);
    c.dim = s.dim;
    c.hidden_dim = s.hidden_dim;
    c.n_layers = s.n_layers;
    c.n_heads = s.n_heads;
    c.n_kv_heads = s.n_kv_heads;
    c.seq_len = s.seq_len;
    c.vocab_size = vocab_size;
    c.validate();
    return c;
  }
  std::string known;
  for (const Shape& s : kShapes) known += (known.empty() ? "" : ", ") + std::string(s.name);
  throw_error("unknown model config '{}' (known: {})", name, known);
}

}  // namespace okapi::train
