// The BitNet b1.58 decoder block, in the two GGUF flavours (bitnet.cpp, bitnet25.cpp):
//   h = rms(x, attn_norm); q, k, v (NEOX rope); a = rms(attention, attn_sub_norm); x += Wo · a
//   h = rms(x, ffn_norm); f = rms(act(Wgate·h) * Wup·h, ffn_sub_norm); x += Wdown · f
//   logits = output · rms(x, output_norm), output = token_embd unless output.weight exists.
// act is SiLU for llama.cpp's `bitnet` (1bitLLM) and ReLU² for Microsoft's BitNet b1.58 2B4T
// (`bitnet-25` in ik_llama.cpp, `bitnet-b1.58` in Microsoft's fork). Ternary weights carry their
// scale in the format (TQ*_0 block scales, I2_S tensor scale, IQ*_BN row scales); the optional
// one-element `*.scale` tensors of llama.cpp's bitnet loader multiply the projection's output.
#pragma once
#include <vector>

#include "model/blocks.hpp"

namespace okapi::model {

class BitnetModel final : public DecoderModel {
 public:
  BitnetModel(gguf::File file, HParams hparams, Activation ffn_activation);
  bool can_skip_layers() const override { return true; }  // forward_pre_norm honours it
  bool supports_stages() const override { return true; }    // so does its stage range

 protected:
  void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     const LogitSelection& rows, float* logits) const override;

 private:
  Activation ffn_activation_;
  std::vector<DecoderLayer> layers_;  // with attn_sub_norm and ffn_sub_norm
  kernels::RopeConfig rope_;
};

}  // namespace okapi::model
