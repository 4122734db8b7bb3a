// Which KV store each token of a forward pass reads and writes: one store for the whole batch
// (one sequence: forward()), or one per token (several sequences in one pass: forward_sequences()).
// Attention is computed per token, so running store_kv + attention per run of consecutive tokens
// that share a store (model/blocks.cpp: Ops::attention_runs) gives every token the same bits as
// running its sequence alone.
#pragma once
#include <cstddef>
#include <span>

#include "kv/kv_store.hpp"

namespace okapi::model {

class KvBinding {
 public:
  // Every token in `kv` (implicit, so a single store passes where a binding is expected).
  KvBinding(kv::KvStore& kv) : one_(&kv) {}  // NOLINT(google-explicit-constructor)
  // Token t in *per_token[t] (no null entries; the span must outlive the binding).
  explicit KvBinding(std::span<kv::KvStore* const> per_token) : per_token_(per_token) {}

  kv::KvStore& store(size_t t) const { return one_ ? *one_ : *per_token_[t]; }
  bool single() const { return one_ != nullptr; }  // one store for every token

  // fn(store, begin, count) for each maximal run [begin, begin + count) of the first n_tokens
  // tokens that share a store, in token order.
  template <typename Fn>
  void for_each_run(size_t n_tokens, Fn&& fn) const {
    if (one_) {
      if (n_tokens > 0) fn(*one_, size_t{0}, n_tokens);
      return;
    }
    for (size_t begin = 0; begin < n_tokens;) {
      size_t end = begin + 1;
      while (end < n_tokens && per_token_[end] == per_token_[begin]) ++end;
      fn(*per_token_[begin], begin, end - begin);
      begin = end;
    }
  }

 private:
  kv::KvStore* one_ = nullptr;
  std::span<kv::KvStore* const> per_token_;
};

}  // namespace okapi::model
