// llama.cpp's `bitnet` architecture (1bitLLM bitnet_b1_58, and bitllama2.c checkpoints converted
// by `okapi convert`): the BitNet block of bitnet.hpp with a SiLU-gated FFN.
#include "model/bitnet.hpp"

#include <string>

#include "model/architectures.hpp"

namespace okapi::model {

BitnetModel::BitnetModel(gguf::File file, HParams hparams, Activation ffn_activation)
    : DecoderModel(std::move(file), std::move(hparams)), ffn_activation_(ffn_activation) {
  const HParams& hp = hparams_;
  load_embeddings();  // tied unless output.weight exists: the usual BitNet layout
  const int64_t n_ff = ffn_width_from_gate(file_, hp.n_ff);
  // Every projection may carry a bias and a one-element output scale.
  const ProjectionParts parts{Part::Optional, Part::Optional};
  AttentionParts attn;
  attn.qkv = parts;
  attn.output = parts;
  attn.sub_norm = true;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = layer_prefix(il);
    layers_.push_back({attention_weights(p, attn), ffn_weights(p, n_ff, parts, /*sub_norm=*/true)});
  }
  check_tensors();
  rope_ = rope_config(hp, /*neox=*/true, nullptr);
}

void BitnetModel::forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                                std::span<const int32_t> positions, const LogitSelection& rows, float* logits) const {
  forward_pre_norm(ops, kv, tokens, positions, rows, logits, layers_, rope_, ffn_activation_);
}

std::unique_ptr<Model> make_bitnet(gguf::File file, HParams hparams) {
  return std::make_unique<BitnetModel>(std::move(file), std::move(hparams), Activation::SiLU);
}

}  // namespace okapi::model
