// Model::forward_sequences_hidden's pooling: one vector per input from its hidden states, as
// llama.cpp's build_pooling (src/llama-graph.cpp) computes it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "kernels/kernels.hpp"
#include "model/model.hpp"

namespace okapi::model {

void Model::load_classifier() {
  const int64_t n_embd = hparams_.n_embd;
  const int64_t n_out = rank_outputs_if_head();
  classifier_.cls = optional_tensor("cls.weight", {n_embd, n_embd});
  classifier_.cls_bias = optional_tensor("cls.bias", {n_embd});
  classifier_.out = optional_tensor("cls.output.weight", {n_embd, n_out});
  classifier_.out_bias = optional_tensor("cls.output.bias", {n_out});
  uses_in_matmul(classifier_.cls);
  uses_in_matmul(classifier_.out);
}

int64_t Model::rank_outputs_if_head() const {
  return hparams_.classifier_labels.empty() ? 1 : static_cast<int64_t>(hparams_.classifier_labels.size());
}

int64_t Model::rank_outputs() const {
  return classifier_.cls || classifier_.out ? rank_outputs_if_head() : 0;
}

int64_t Model::pooled_width(Pooling pooling) const {
  return pooling == Pooling::Rank ? rank_outputs() : hparams_.n_embd;
}

void Model::pool(Ops& ops, Pooling pooling, const float* hidden, int64_t n_tokens, float* out) const {
  const int64_t n = hparams_.n_embd;
  if (n_tokens <= 0) throw_error("pool: an input of {} tokens has nothing to pool", n_tokens);
  if (pooling != Pooling::Rank && pooling != Pooling::None && (dense_.first || dense_.first_bias || dense_.second)) {
    pool_rows(ops, pooling, hidden, n_tokens, out);
    std::vector<float> x(out, out + n);
    if (dense_.first) {
      std::vector<float> y(static_cast<size_t>(dense_.first.n_out));
      ops.matmul(dense_.first, x.data(), 1, y.data());
      x = std::move(y);
    }
    if (dense_.first_bias) ops.add_bias(dense_.first_bias, x.data(), 1);
    if (dense_.second) {
      std::vector<float> y(static_cast<size_t>(dense_.second.n_out));
      ops.matmul(dense_.second, x.data(), 1, y.data());
      x = std::move(y);
    }
    std::copy_n(x.begin(), n, out);
    return;
  }
  pool_rows(ops, pooling, hidden, n_tokens, out);
}

void Model::pool_rows(Ops& ops, Pooling pooling, const float* hidden, int64_t n_tokens, float* out) const {
  const int64_t n = hparams_.n_embd;
  // qwen3 rerankers score the last token (llama.cpp's build_inp_cls).
  const bool rank_last = hparams_.arch == "qwen3";
  switch (pooling) {
    case Pooling::None:
      throw_error("pool: pooling 'none' keeps every token's vector; there is nothing to pool");
    case Pooling::Mean: {
      // llama.cpp: the hidden states' transpose times a column of 1/n.
      const float inv = 1.0f / static_cast<float>(n_tokens);
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0.0;
        for (int64_t t = 0; t < n_tokens; ++t) sum += static_cast<double>(hidden[t * n + i] * inv);
        out[i] = static_cast<float>(sum);
      }
      return;
    }
    case Pooling::Cls:
      std::copy(hidden, hidden + n, out);
      return;
    case Pooling::Last:
      std::copy(hidden + (n_tokens - 1) * n, hidden + n_tokens * n, out);
      return;
    case Pooling::Rank:
      break;
  }
  const int64_t n_out = rank_outputs();
  if (n_out == 0)
    throw_error("pool: rank pooling needs a classifier head (cls.weight or cls.output.weight), which this {} model "
                "lacks",
                hparams_.arch);
  const ClassifierHead& head = classifier_;
  std::vector<float> row(hidden + (rank_last ? n_tokens - 1 : 0) * n, hidden + (rank_last ? n_tokens : 1) * n);
  if (head.cls) {
    std::vector<float> y(static_cast<size_t>(head.cls.n_out));
    ops.matmul(head.cls, row.data(), 1, y.data());
    if (head.cls_bias) ops.add_bias(head.cls_bias, y.data(), 1);
    for (float& v : y) v = std::tanh(v);
    row = std::move(y);
  }
  if (head.out) {
    std::vector<float> y(static_cast<size_t>(head.out.n_out));
    ops.matmul(head.out, row.data(), 1, y.data());
    if (head.out_bias) ops.add_bias(head.out_bias, y.data(), 1);
    row = std::move(y);
  }
  if (rank_last) kernels::ref::softmax(row.data(), static_cast<int64_t>(row.size()));
  std::copy_n(row.begin(), std::min<int64_t>(n_out, static_cast<int64_t>(row.size())), out);
}

}  // namespace okapi::model
