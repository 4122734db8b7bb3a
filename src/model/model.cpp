#include "model/model.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>

#include "core/error.hpp"
#include "core/dtype.hpp"
#include "kv/kv_store.hpp"

namespace okapi::model {

Model::Model(gguf::File file, HParams hparams)
    : file_(std::move(file)), hparams_(std::move(hparams)), stage_end_(hparams_.n_layer) {}

namespace {

// The layer of a weight named "blk.<N>.*"; -1 for the others (LM head, classifier, embeddings).
int64_t layer_of(std::string_view name) {
  constexpr std::string_view prefix = "blk.";
  if (!name.starts_with(prefix)) return -1;
  int64_t layer = 0;
  size_t i = prefix.size();
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) layer = layer * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? layer : -1;
}

uint64_t weight_bytes(const Weight& w) {
  const auto bytes = tensor_bytes(w.type, std::array<int64_t, 2>{w.n_in, w.n_out});
  return bytes ? static_cast<uint64_t>(*bytes) : 0;
}

}  // namespace

WeightSet Model::weights() const {
  WeightSet set{file_.bytes(), file_.is_mapped(), matmul_weights_};
  // Another stage's weights keep their place (matmul_index) but no data: the backend leaves them.
  for (Weight& w : set.matmul) {
    const int64_t layer = layer_of(w.name);
    const bool ours = layer >= 0 ? layer >= stage_first_ && layer < stage_end_ : is_last_stage();
    if (!ours) w.data = nullptr;
  }
  return set;
}

void Model::set_stage(int64_t first, int64_t end) {
  if (!supports_stages())
    throw_error("pipeline stages: the {} architecture cannot run a part of its layers (llama, qwen2, qwen3, granite, "
                "smollm3, phi3 and bitnet can)",
                hparams_.arch);
  if (first < 0 || end <= first || end > hparams_.n_layer)
    throw_error("pipeline stages: layers [{}, {}) are not a non-empty range of the model's {} layers", first, end,
                hparams_.n_layer);
  stage_first_ = first;
  stage_end_ = end;
}

uint64_t Model::layer_weight_bytes(int64_t layer) const {
  uint64_t total = 0;
  for (const Weight& w : matmul_weights_)
    if (layer_of(w.name) == layer) total += weight_bytes(w);
  return total;
}

uint64_t Model::head_weight_bytes() const {
  uint64_t total = 0;
  for (const Weight& w : matmul_weights_)
    if (layer_of(w.name) < 0) total += weight_bytes(w);
  return total;
}

void Model::forward_stage(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                          std::span<const int32_t> positions, const LogitSelection& rows, const float* hidden_in,
                          float* out, bool hidden_output) const {
  if (stage_first_ > 0 && hidden_in == nullptr) throw_error("forward_stage: a stage after layer 0 needs its input");
  struct Restore {
    const Model& model;
    bool hidden_output;
    ~Restore() {
      model.stage_hidden_in_ = nullptr;
      model.hidden_output_ = hidden_output;
    }
  } restore{*this, hidden_output_};
  stage_hidden_in_ = hidden_in;
  hidden_output_ = hidden_output;
  forward_batch(ops, kv, tokens, positions, rows, out);
}

bool Model::stage_input(std::span<float> x) const {
  if (stage_first_ == 0) return false;
  std::copy(stage_hidden_in_, stage_hidden_in_ + x.size(), x.begin());
  return true;
}

bool Model::stage_output(std::span<const float> x, float* out) const {
  if (is_last_stage()) return false;
  std::copy(x.begin(), x.end(), out);
  return true;
}

void Model::run_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                      std::span<const int32_t> positions, const LogitSelection& rows, float* out) const {
  if (route_) return route_->forward_batch(ops, kv, tokens, positions, rows, out, hidden_output_);
  if (stage_first_ != 0 || !is_last_stage())
    throw_error("forward: this model is pipeline stage [{}, {}) of {} layers; it runs through its pipeline",
                stage_first_, stage_end_, hparams_.n_layer);
  forward_batch(ops, kv, tokens, positions, rows, out);
}

void Model::uses_in_matmul(Weight& w) {
  if (!w) return;
  for (const Weight& seen : matmul_weights_) {
    if (seen.data == w.data) {
      w.matmul_index = seen.matmul_index;
      return;
    }
  }
  w.matmul_index = static_cast<int32_t>(matmul_weights_.size());
  matmul_weights_.push_back(w);
}

std::unique_ptr<Model> Model::load(gguf::File file) {
  const std::string arch = file.architecture();
  std::vector<std::string_view> names;
  for (const ArchitectureEntry& entry : architectures()) {
    if (entry.name == arch) {
      HParams hp = HParams::from_gguf(file);
      return entry.make(std::move(file), std::move(hp));
    }
    names.push_back(entry.name);
  }
  throw_error("{}: unsupported architecture '{}' (general.architecture); supported: {}", file.name(),
              arch.empty() ? "<missing>" : arch, fmt::join(names, ", "));
}

Weight Model::optional_tensor(const std::string& name, std::vector<int64_t> shape) {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  if (!info) return {};
  if (!shape.empty() && info->shape != shape) {
    problems_.add("'{}' has shape [{}], expected [{}]", name, fmt::join(info->shape, ", "), fmt::join(shape, ", "));
    return {};
  }
  Weight w;
  w.name = info->name;
  w.type = info->type;
  w.data = info->data;
  w.n_in = info->shape.empty() ? 1 : info->shape[0];
  w.n_out = info->n_rows();
  // Norms and biases are read as float arrays by the ops.
  if (info->shape.size() == 1 && info->type != DType::F32)
    problems_.add("'{}' is {}, 1-D tensors must be f32", name, dtype_name(info->type));
  return w;
}

Weight Model::tensor(const std::string& name, std::vector<int64_t> shape) {
  if (!file_.find_tensor(name)) {
    problems_.add("'{}' is missing", name);
    return {};
  }
  return optional_tensor(name, std::move(shape));
}

void Model::check_tensors() const {
  if (problems_.empty()) return;
  throw_error("{}: {} model has {} tensor problem(s): {}", file_.name(), hparams_.arch, problems_.size(),
              problems_.summary());
}

void Model::set_layer_windows(std::vector<int64_t> windows) {
  if (static_cast<int64_t>(windows.size()) != hparams_.n_layer)
    throw_error("{}: {} sliding windows for {} layers", file_.name(), windows.size(), hparams_.n_layer);
  layer_windows_ = std::move(windows);
}

kv::KvShape Model::kv_shape(int64_t n_ctx, int64_t batch) const {
  const HParams& hp = hparams_;
  kv::KvShape shape{hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, n_ctx};
  shape.window = layer_windows_;
  shape.batch = batch;
  return shape;
}

void Model::check_store_shape(const kv::KvStore& kv, std::string_view where, int64_t token_index) const {
  const kv::KvShape& s = kv.shape();
  // A ring keeps only the cells of its window: the layer must not read further back.
  for (int64_t il = 0; il < s.n_layer && il < hparams_.n_layer; ++il) {
    if (s.cells(il) >= s.n_ctx) continue;
    const int64_t w = layer_window(il);
    if (w <= 0 || w > s.window_of(il))
      throw_error("{}: layer {} of the KV store keeps a ring for a window of {} positions, but the model's layer {} "
                  "{}",
                  where, il, s.window_of(il), il, w <= 0 ? std::string("is global") : fmt::format("has a window of {}", w));
  }
  if (s.n_layer != hparams_.n_layer || s.n_head_kv != hparams_.n_head_kv || s.head_dim_k != hparams_.head_dim_k ||
      s.head_dim_v != hparams_.head_dim_v)
    throw_error("{}: {}KV store shape (layers {}, kv heads {}, head dims {}/{}) does not match the model ({}, {}, {}/{})",
                where, token_index >= 0 ? fmt::format("token index {}: ", token_index) : std::string(), s.n_layer,
                s.n_head_kv, s.head_dim_k, s.head_dim_v, hparams_.n_layer, hparams_.n_head_kv, hparams_.head_dim_k,
                hparams_.head_dim_v);
}

void Model::forward(Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                    LogitRows rows, float* logits) const {
  if (!generates_text()) throw_error("{} is an embedding model: it has no LM head", hparams_.arch);
  if (tokens.empty()) throw_error("forward: no tokens");
  if (tokens.size() != positions.size())
    throw_error("forward: {} tokens but {} positions", tokens.size(), positions.size());
  check_store_shape(kv, "forward");
  const int64_t n_ctx = kv.n_ctx();
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0 || tokens[t] >= hparams_.n_vocab)
      throw_error("forward: token id {} at index {} is out of range (n_vocab {})", tokens[t], t, hparams_.n_vocab);
    if (positions[t] < 0 || positions[t] >= n_ctx)
      throw_error_for(Setting::ContextLength,
                      "forward: position {} (token index {}) does not fit the context of {} tokens; use a larger context",
                      positions[t], t, n_ctx);
  }
  // A store with ring layers holds at most max_batch() new positions besides the windows: a longer
  // batch runs in chunks (each token's logits are the same bits in any batch).
  const auto T = static_cast<int64_t>(tokens.size());
  const int64_t chunk = kv.max_batch();
  if (T <= chunk) return run_batch(ops, kv, tokens, positions, rows, logits);
  const std::vector<uint8_t> none(static_cast<size_t>(chunk), 0);
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0);
    const auto part = [&](auto span) { return span.subspan(static_cast<size_t>(t0), static_cast<size_t>(n)); };
    const bool last = t0 + n == T;
    if (rows == LogitRows::All) {
      run_batch(ops, kv, part(tokens), part(positions), LogitRows::All, logits + t0 * hparams_.n_vocab);
    } else if (last) {
      run_batch(ops, kv, part(tokens), part(positions), LogitRows::Last, logits);
    } else {
      run_batch(ops, kv, part(tokens), part(positions),
                    LogitSelection(std::span<const uint8_t>(none.data(), static_cast<size_t>(n))), nullptr);
    }
  }
}

void Model::forward_sequences(Ops& ops, std::span<kv::KvStore* const> stores, std::span<const int32_t> tokens,
                              std::span<const int32_t> positions, std::span<const uint8_t> want_logits,
                              float* logits) const {
  if (!generates_text()) throw_error("{} is an embedding model: it has no LM head", hparams_.arch);
  check_sequences("forward_sequences", stores, tokens, positions, want_logits, logits);
  run_batch(ops, KvBinding(stores), tokens, positions, LogitSelection(want_logits), logits);
}

void Model::forward_sequences_hidden(Ops& ops, std::span<kv::KvStore* const> stores, std::span<const int32_t> tokens,
                                     std::span<const int32_t> positions, std::span<const uint8_t> want_hidden,
                                     float* hidden) const {
  constexpr std::string_view where = "forward_sequences_hidden";
  if (!has_hidden_states())
    throw_error("{}: the {} architecture gives no hidden states (embeddings)", where, hparams_.arch);
  check_sequences(where, stores, tokens, positions, want_hidden, hidden);
  if (!causal_attention()) {
    // Each input sees all of itself: it must be whole in this pass, positions 0..n-1 adjacent.
    for (size_t t = 0; t < tokens.size(); ++t) {
      const bool first = t == 0 || stores[t - 1] != stores[t];
      const int32_t expected = first ? 0 : positions[t - 1] + 1;
      if (positions[t] != expected)
        throw_error("{}: {} attention is non-causal, so an input runs whole in one pass at positions 0..n-1 with "
                    "its tokens adjacent; token index {} is at position {}, expected {}",
                    where, hparams_.arch, t, positions[t], expected);
      if (first)
        for (size_t u = 0; u < t; ++u)
          if (stores[u] == stores[t])
            throw_error("{}: token index {} returns to the KV store of token index {}; a non-causal input's tokens "
                        "must be adjacent",
                        where, t, u);
    }
  }
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{hidden_output_};
  hidden_output_ = true;
  run_batch(ops, KvBinding(stores), tokens, positions, LogitSelection(want_hidden), hidden);
}

void Model::check_sequences(std::string_view where, std::span<kv::KvStore* const> stores,
                            std::span<const int32_t> tokens, std::span<const int32_t> positions,
                            std::span<const uint8_t> want_logits, const float* logits) const {
  const bool logits_wanted = where == "forward_sequences";
  if (tokens.empty()) throw_error("{}: no tokens", where);
  if (positions.size() != tokens.size() || stores.size() != tokens.size() || want_logits.size() != tokens.size())
    throw_error("{}: {} tokens but {} positions, {} stores and {} {} flags (one each per token)", where, tokens.size(),
                positions.size(), stores.size(), want_logits.size(), logits_wanted ? "logit" : "output");
  bool any_wanted = false;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const kv::KvStore* store = stores[t];
    if (!store) throw_error("{}: the KV store of token index {} is null", where, t);
    if (tokens[t] < 0 || tokens[t] >= hparams_.n_vocab)
      throw_error("{}: token id {} at index {} is out of range (n_vocab {})", where, tokens[t], t,
                  hparams_.n_vocab);
    if (t == 0 || stores[t - 1] != store) check_store_shape(*store, where, static_cast<int64_t>(t));
    if (positions[t] < 0 || positions[t] >= store->n_ctx())
      throw_error("{}: position {} (token index {}) does not fit its KV store's context of {} tokens", where,
                  positions[t], t, store->n_ctx());
    // The same store's previous token (usually t - 1; else searched back from t).
    for (size_t u = t; u-- > 0;) {
      if (stores[u] != store) continue;
      if (positions[u] >= positions[t])
        throw_error("{}: token index {} at position {} comes after token index {} at position {} in "
                    "the same KV store; a sequence's tokens must be in increasing position order",
                    where, t, positions[t], u, positions[u]);
      break;
    }
    any_wanted = any_wanted || want_logits[t] != 0;
  }
  if (any_wanted && !logits) throw_error("{}: outputs are wanted but the output buffer is null", where);
  // Ring stores: a store's tokens in this pass must fit what its rings hold besides the windows.
  for (size_t t = 0; t < tokens.size(); ++t) {
    if ((t > 0 && stores[t - 1] == stores[t]) || stores[t]->max_batch() >= static_cast<int64_t>(tokens.size())) continue;
    size_t n = 0;
    for (size_t u = t; u < tokens.size(); ++u) n += stores[u] == stores[t] ? 1 : 0;
    if (static_cast<int64_t>(n) > stores[t]->max_batch())
      throw_error("{}: {} tokens of one sequence in a pass, but its KV store's sliding-window rings "
                  "hold batches of up to {}",
                  where, n, stores[t]->max_batch());
  }
}

void Model::forward_skipping(Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens,
                             std::span<const int32_t> positions, LogitRows rows, float* logits,
                             std::span<const uint8_t> skip) const {
  if (!can_skip_layers())
    throw_error("layer skip: the {} architecture cannot skip layers (llama, qwen2, qwen3 and bitnet can)", hparams_.arch);
  if (routed() || stage_first_ != 0 || !is_last_stage())
    throw_error("layer skip: the model's layers are split into pipeline stages; skipping runs in one process");
  if (static_cast<int64_t>(skip.size()) != hparams_.n_layer)
    throw_error("layer skip: {} flags for a model of {} layers", skip.size(), hparams_.n_layer);
  struct Reset {
    std::span<const uint8_t>& skip;
    ~Reset() { skip = {}; }
  } reset{skip_};
  skip_ = skip;
  forward(ops, kv, tokens, positions, rows, logits);
}

}  // namespace okapi::model
