#include "model/memory_estimate.hpp"

#include <algorithm>
#include <cmath>

#include "exact/int_matmul.hpp"
#include "kv/kv_store.hpp"

namespace okapi::model {

namespace {

constexpr double kFloat = sizeof(float);

double as_double(int64_t n) { return static_cast<double>(n); }

// The widest FFN of the file: the metadata's, or blk.0's gate when the metadata has none (as the
// architectures read it).
int64_t ffn_width(const gguf::File& file, const HParams& hp) {
  const gguf::TensorInfo* gate = file.find_tensor("blk.0.ffn_gate.weight");
  const int64_t stored = gate && gate->shape.size() == 2 ? gate->shape[1] : 0;
  return std::max(hp.n_ff, stored);
}

// Exact mode encodes every weight a matmul reads as int16 rows padded to kInt16RowAlign, plus one
// double scale per row: every 2-D tensor but the embedding table, which is read by row unless the
// output head is tied to it.
double exact_weight_copies(const gguf::File& file) {
  const bool tied = file.find_tensor("output.weight") == nullptr;
  double bytes = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.shape.size() < 2 || (t.name == "token_embd.weight" && !tied)) continue;
    const double align = as_double(exact::kInt16RowAlign);
    const double n_in = std::ceil(as_double(t.shape[0]) / align) * align;
    double n_out = 1;
    for (size_t d = 1; d < t.shape.size(); ++d) n_out *= as_double(t.shape[d]);
    bytes += n_out * (n_in * sizeof(int16_t) + sizeof(double));
  }
  return bytes;
}

}  // namespace

MemoryEstimate estimate_memory(const gguf::File& file, const HParams& hp, const RunShape& run) {
  MemoryEstimate m;
  m.mapped = as_double(static_cast<int64_t>(file.file_size()));
  if (run.exact) m.weights = exact_weight_copies(file);

  kv::KvShape shape{hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, run.n_ctx};
  shape.window = run.layer_windows;  // sliding-window layers keep rings (KvShape::cells)
  shape.batch = run.batch;
  m.kv = run.exact ? kv::exact_store_bytes(shape, run.exact_scores) : run.cache.bytes(shape);

  // One batch of activations (model/blocks.hpp's Scratch): x, h, o, q, k, v, attention output and
  // the two FFN halves, T rows each.
  const double tokens = as_double(std::max<int64_t>(1, std::min(run.batch, run.n_ctx)));
  const int64_t n_ff = ffn_width(file, hp);
  const double heads = as_double(hp.n_head), kv_heads = as_double(hp.n_head_kv);
  const double n_q = heads * as_double(hp.head_dim_k), n_o = heads * as_double(hp.head_dim_v);
  const double n_k = kv_heads * as_double(hp.head_dim_k), n_v = kv_heads * as_double(hp.head_dim_v);
  const double activations = tokens * (3 * as_double(hp.n_embd) + n_q + n_k + n_v + n_o + 2 * as_double(n_ff)) * kFloat;
  // The matmul kernels keep the batch's input rows converted (quantized or rounded) per call:
  // at most two copies of the widest input.
  const double widest_input = std::max({as_double(hp.n_embd), as_double(n_ff), n_o});
  const double matmul = 2 * tokens * widest_input * kFloat;
  // Logits, and the sampler's candidates (id, logit, probability) over the vocabulary.
  const double logits = as_double(std::max<int64_t>(1, run.logit_rows)) * as_double(hp.n_vocab) * kFloat +
                        as_double(hp.n_vocab) * 4 * kFloat;
  // Attention: each thread's probabilities over the context (doubles as well in exact mode).
  const double attention = as_double(std::max(1, run.threads)) * as_double(run.n_ctx) * (run.exact ? 3 : 1) * kFloat;
  // Mixture of experts (moe.hpp): the router's logits and weights, and each (token, expert) pair's
  // input, gate, up and output rows, plus the shared expert's output.
  double experts = 0;
  if (hp.n_expert > 0) {
    const gguf::TensorInfo* gate = file.find_tensor("blk.0.ffn_gate_exps.weight");
    const double n_ff_exp = gate && gate->shape.size() == 3 ? as_double(gate->shape[1]) : as_double(n_ff);
    const double pairs = tokens * as_double(hp.n_expert_used);
    experts = (tokens * as_double(hp.n_expert) + pairs * (1 + 2 * as_double(hp.n_embd) + 2 * n_ff_exp) +
               tokens * (as_double(hp.n_embd) + 1)) * kFloat;
  }
  m.scratch = activations + matmul + logits + attention + experts;
  return m;
}

}  // namespace okapi::model
