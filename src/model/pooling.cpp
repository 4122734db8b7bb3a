// Model::forward_sequences_hidden, pooled_width and pool (interface stubs; the encoder work fills them in).
#include "core/error.hpp"
#include "model/model.hpp"

namespace okapi::model {

void Model::forward_sequences_hidden(Ops&, std::span<kv::KvStore* const>, std::span<const int32_t>,
                                     std::span<const int32_t>, std::span<const uint8_t>, float*) const {
  throw_error("{}: embeddings are not implemented yet", hparams_.arch);
}

int64_t Model::pooled_width(Pooling pooling) const {
  return pooling == Pooling::Rank ? rank_outputs() : hparams_.n_embd;
}

void Model::pool(Ops&, Pooling, const float*, int64_t, float*) const {
  throw_error("{}: pooling is not implemented yet", hparams_.arch);
}

}  // namespace okapi::model
