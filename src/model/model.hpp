// A model: hyper-parameters plus typed weight views into a mapped GGUF file, and a forward pass
// written against Ops. The backend (Ops) prepares the weights once at load (Ops::prepare of
// weights()) and owns what it made of them. Each architecture (llama.cpp, qwen2.cpp, ...) derives from Model, looks
// its tensors up in its constructor and implements forward_batch().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/problem_list.hpp"
#include "format/gguf.hpp"
#include "model/embedding.hpp"
#include "model/hparams.hpp"
#include "model/kv_binding.hpp"
#include "model/ops.hpp"

namespace okapi::model {

enum class LogitRows { All, Last };

// The rows of a batch whose logits are computed, packed in token order: every token (All), the
// last one (Last), or the tokens whose flag is nonzero (a mask of one flag per token, which must
// outlive the selection). Only the selected rows go through the final norm and the LM head.
class LogitSelection {
 public:
  LogitSelection(LogitRows rows) : rows_(rows) {}  // NOLINT(google-explicit-constructor)
  explicit LogitSelection(std::span<const uint8_t> wanted) : wanted_(wanted), masked_(true) {}

  // fn(begin, count) for each maximal run of selected rows among n_tokens, in token order.
  template <typename Fn>
  void for_each_run(int64_t n_tokens, Fn&& fn) const {
    if (!masked_) {
      if (n_tokens == 0) return;
      if (rows_ == LogitRows::All)
        fn(int64_t{0}, n_tokens);
      else
        fn(n_tokens - 1, int64_t{1});
      return;
    }
    for (int64_t t = 0; t < n_tokens;) {
      if (!wanted_[static_cast<size_t>(t)]) {
        ++t;
        continue;
      }
      int64_t end = t + 1;
      while (end < n_tokens && wanted_[static_cast<size_t>(end)]) ++end;
      fn(t, end - t);
      t = end;
    }
  }

 private:
  LogitRows rows_ = LogitRows::All;
  std::span<const uint8_t> wanted_;
  bool masked_ = false;
};

// Where a forward pass's batches go instead of the model's own forward_batch: a pipeline's first
// rank (runtime/pipeline.hpp) runs its stage and hands the rest to the other ranks. Given what
// forward_batch is given (inputs validated); `hidden_output` asks for the hidden states of
// forward_sequences_hidden (n_embd wide) instead of logits.
class ForwardRoute {
 public:
  virtual ~ForwardRoute() = default;
  virtual void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                             std::span<const int32_t> positions, const LogitSelection& rows, float* out,
                             bool hidden_output) = 0;
};

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

  // ---- pipeline stages: one process runs only the layers [first, end) ----
  // Whether this architecture's forward pass can run a stage (the shared pre-norm decoder loop:
  // llama, qwen2, qwen3, granite, smollm3, phi3, bitnet).
  virtual bool supports_stages() const { return false; }
  // Makes this model one stage, before Ops::prepare: weights() then names only the stage's weights
  // (the layers' own; the LM head and classifier when end == n_layer), so the backend repacks
  // those alone and the mapped pages of the other layers are never read. A stage that starts after
  // layer 0 reads its input hidden states from forward_stage instead of the token embedding; one
  // that ends before the last layer writes its output hidden states there instead of logits.
  // Throws okapi::Error for an architecture that cannot, or a range that is empty or outside
  // [0, n_layer].
  void set_stage(int64_t first, int64_t end);
  int64_t stage_first() const { return stage_first_; }
  int64_t stage_end() const { return stage_end_; }
  bool is_last_stage() const { return stage_end_ == hparams_.n_layer; }
  // The matmul weight bytes of layer `layer` (its blk.N. tensors the forward pass multiplies by),
  // and of everything else the forward pass multiplies by (the LM head, a classifier).
  uint64_t layer_weight_bytes(int64_t layer) const;
  uint64_t head_weight_bytes() const;
  // Runs this stage's layers on a batch (the inputs as forward_batch takes them, already
  // validated): the first stage embeds `tokens`, a later one starts from `hidden_in`
  // [T x n_embd]; a stage before the last writes every token's hidden state [T x n_embd] to
  // `out`, the last one the rows `rows` selects: logits, or with `hidden_output` the final-normed
  // hidden states (forward_sequences_hidden).
  void forward_stage(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                     std::span<const int32_t> positions, const LogitSelection& rows, const float* hidden_in,
                     float* out, bool hidden_output) const;
  // Sends forward(), forward_sequences() and forward_sequences_hidden() batches to `route`
  // (null: this model's own forward_batch again). The route must outlive its use.
  void set_route(ForwardRoute* route) { route_ = route; }
  bool routed() const { return route_ != nullptr; }

  // Sliding-window attention, per layer: > 0 for a layer whose queries see only the last that many
  // positions, 0 for a global layer; empty when every layer is global. Architectures set it in
  // their constructor (set_layer_windows) and read it in their forward pass (layer_window).
  std::span<const int64_t> layer_windows() const { return layer_windows_; }
  int64_t layer_window(int64_t layer) const {
    return static_cast<size_t>(layer) < layer_windows_.size() ? layer_windows_[static_cast<size_t>(layer)] : 0;
  }
  // The KV store shape for a context of n_ctx cells and forward passes of up to `batch` tokens:
  // the windowed layers keep rings (kv/kv_store.hpp).
  kv::KvShape kv_shape(int64_t n_ctx, int64_t batch) const;

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

  // ---- embeddings: encoders (bert, nomic-bert, gemma-embedding) and decoders used as embedding
  // models (Qwen3-Embedding), as llama.cpp computes them with embeddings on ----
  // Whether the model has an LM head and can generate text (encoders cannot: forward() throws).
  virtual bool generates_text() const { return true; }
  // Whether a token sees only the tokens before it in its input ({arch}.attention.causal; bert,
  // nomic-bert and gemma-embedding are non-causal). A non-causal input must run whole in one pass.
  bool causal_attention() const { return hparams_.causal_attention; }
  // The file's {arch}.pooling_type; nullopt when the key is absent.
  std::optional<Pooling> file_pooling() const { return pooling_from_gguf(hparams_.pooling_type); }
  // Values rank pooling gives per input, as llama.cpp's n_cls_out: the classifier labels
  // ({arch}.classifier.output_labels), 1 without labels; 0 when the model has no classifier head
  // (neither cls nor cls.output: rank unsupported).
  virtual int64_t rank_outputs() const;
  // forward_sequences() that writes each wanted token's hidden state [n_wanted x n_embd] (after the
  // final norm, before any LM head: llama.cpp's result_norm / result_embd) instead of logits. For
  // a non-causal model each store's tokens must be its whole input, positions 0..n-1 in one run
  // (adjacent in the batch), and its store must be made for that input alone: an F32 store of
  // kv_shape(n, batch) (llama.cpp keeps an encoder's K/V in F32, without a cache).
  // Throws okapi::Error as forward_sequences() does, and for an architecture without embeddings.
  void forward_sequences_hidden(Ops& ops, std::span<kv::KvStore* const> stores, std::span<const int32_t> tokens,
                                std::span<const int32_t> positions, std::span<const uint8_t> want_hidden,
                                float* hidden) const;
  // Whether forward_sequences_hidden() can run: encoders, and decoders whose forward pass ends in
  // DecoderModel::output_rows (every decoder here).
  virtual bool has_hidden_states() const { return false; }
  // Values per input that pool() writes: n_embd, or rank_outputs() for Rank.
  int64_t pooled_width(Pooling pooling) const;
  // Pools one input's hidden states [n_tokens x n_embd] (every token, in order) into out
  // (pooled_width values): Mean, Cls (first row), Last (last row), or Rank: the first row (qwen3:
  // the last) through the classifier head (cls + tanh, cls.output, then a softmax for qwen3
  // rerankers), as llama.cpp's build_pooling; then, but for Rank, gemma-embedding's dense_2 /
  // dense_3 when the file has them (build_dense_out). Throws okapi::Error for None, no rows, or
  // Rank without a classifier head.
  void pool(Ops& ops, Pooling pooling, const float* hidden, int64_t n_tokens, float* out) const;

  // Several sequences in one pass: token t runs at positions[t] in the cache stores[t] (a
  // sequence's tokens in the batch are in increasing position order; distinct sequences have
  // distinct stores; a store's tokens need not be adjacent, though adjacent ones share the
  // attention call). Weights are read once for the whole batch. Logits [n_wanted x n_vocab] are
  // written, packed in token order, for the tokens whose want_logits[t] is nonzero (none wanted:
  // `logits` is not touched and may be null). Each token's logits are bit-identical to running
  // its sequence alone through forward(). Throws okapi::Error for spans of different lengths, an
  // empty batch, a null store, a store whose shape does not match the model, a position outside
  // its store's context or not after the previous position of the same store, a token id out of
  // range, or wanted logits with a null `logits`.
  void forward_sequences(Ops& ops, std::span<kv::KvStore* const> stores, std::span<const int32_t> tokens,
                         std::span<const int32_t> positions, std::span<const uint8_t> want_logits,
                         float* logits) const;

 protected:
  Model(gguf::File file, HParams hparams);

  // Implemented per architecture: inputs already validated. Token t reads and writes kv.store(t);
  // logits are written for the rows `rows` selects.
  virtual void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                             std::span<const int32_t> positions, const LogitSelection& rows, float* logits) const = 0;

  // Per layer (n_layer values): the sliding window of a local layer, 0 for a global one.
  void set_layer_windows(std::vector<int64_t> windows);

  // Tensor lookup for constructors: a missing required tensor (or one of the wrong shape) is
  // recorded and reported together by check_tensors(). `shape` is ggml ne[] (empty: any).
  Weight tensor(const std::string& name, std::vector<int64_t> shape);
  Weight optional_tensor(const std::string& name, std::vector<int64_t> shape);
  void check_tensors() const;  // throws counting every problem, listing the first few
  // Records `w` (if present) as one the forward pass passes to Ops::matmul (see weights()) and
  // sets its matmul_index.
  void uses_in_matmul(Weight& w);
  // The stage's first input (forward_stage: hidden_in when the stage starts after layer 0) into
  // s.x; and whether the stage ends before the last layer, having then copied s.x to `out`.
  // The shared layer loops call these instead of embedding the tokens and computing logits.
  bool stage_input(std::span<float> x) const;
  bool stage_output(std::span<const float> x, float* out) const;
  // The layers forward_skipping() leaves out for the call under way (empty: none).
  bool skips_layer(int64_t layer) const {
    return !skip_.empty() && skip_[static_cast<size_t>(layer)] != 0;
  }
  // Throws okapi::Error (prefixed by `where`, and the token index when >= 0) when `kv`'s shape
  // does not match the model.
  void check_store_shape(const kv::KvStore& kv, std::string_view where, int64_t token_index = -1) const;

  gguf::File file_;
  HParams hparams_;
  // The classifier head of rank pooling (llama.cpp's cls, cls_b, cls_out, cls_out_b); each may be
  // empty. load_classifier() looks them up (optional) and registers the matrices for matmul.
  struct ClassifierHead {
    Weight cls, cls_bias, out, out_bias;
  };
  void load_classifier();
  ClassifierHead classifier_;
  // Projections of a pooled vector (llama.cpp's build_dense_out: gemma-embedding's dense_2 with its
  // bias, then dense_3), each may be empty; pool() applies them to every pooling but rank.
  struct DenseOut {
    Weight first, first_bias, second;
  };
  DenseOut dense_;
  // n_cls_out: the labels' count, 1 without labels.
  int64_t rank_outputs_if_head() const;
  // Set only during forward_sequences_hidden(): forward_batch writes the selected rows' hidden
  // states [rows x n_embd] where it would write logits.
  mutable bool hidden_output_ = false;

 private:
  // pool() before the dense projections.
  void pool_rows(Ops& ops, Pooling pooling, const float* hidden, int64_t n_tokens, float* out) const;
  // forward_sequences()'s checks (`where` prefixes the errors).
  void check_sequences(std::string_view where, std::span<kv::KvStore* const> stores, std::span<const int32_t> tokens,
                       std::span<const int32_t> positions, std::span<const uint8_t> wanted, const float* out) const;

  // forward_batch, or the route's when one is set.
  void run_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                 const LogitSelection& rows, float* out) const;

  ProblemList problems_;
  std::vector<Weight> matmul_weights_;
  int64_t stage_first_ = 0, stage_end_ = 0;  // set to [0, n_layer) by the constructor
  ForwardRoute* route_ = nullptr;
  mutable const float* stage_hidden_in_ = nullptr;  // set only during forward_stage()
  std::vector<int64_t> layer_windows_;
  mutable std::span<const uint8_t> skip_;  // set only during forward_skipping()
};

// The architecture registry: general.architecture -> factory.
using ModelFactory = std::function<std::unique_ptr<Model>(gguf::File file, HParams hparams)>;
struct ArchitectureEntry {
  std::string_view name;
  ModelFactory make;
};
std::span<const ArchitectureEntry> architectures();

}  // namespace okapi::model
