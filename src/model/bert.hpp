// BERT-family encoders as llama.cpp builds them (src/models/bert.cpp): post-norm LayerNorm blocks,
// non-causal attention over each input, no LM head; the output is every token's hidden state
// (llama.cpp's result_embd), which Model::pool turns into one vector per input.
//   x = token_embd[tok] + token_types[0] (+ position_embd[pos]); x = LayerNorm(x, token_embd_norm)
//   per layer: a = Wo · attn(Wq·x, Wk·x, Wv·x) (+ biases; fused attn_qkv accepted)
//              x = LayerNorm(a + x, attn_output_norm)
//              f = Wdown · act(Wup·x) (bert: GELU with biases; nomic-bert: SiLU(Wgate·x) * Wup·x)
//              x = LayerNorm(f + x, layer_output_norm)
// nomic-bert differs by NEOX rope on q and k instead of position_embd, and its gated FFN.
#pragma once
#include <vector>

#include "model/blocks.hpp"

namespace okapi::model {

struct BertOptions {
  bool rope = false;        // nomic-bert: NEOX rope on q and k; bert: absolute position_embd
  bool gated_ffn = false;   // nomic-bert: silu(ffn_gate) * ffn_up (no biases); bert: gelu(ffn_up + b)
};

class BertModel : public DecoderModel {
 public:
  BertModel(gguf::File file, HParams hparams, BertOptions options);
  bool generates_text() const override { return false; }

 protected:
  void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     const LogitSelection& rows, float* hidden) const override;

 private:
  struct Layer {
    AttentionWeights attn;  // q, k, v, o (+ biases); attn.norm unused (post-norm)
    Weight attn_out_norm, attn_out_norm_bias;
    Projection gate, up, down;
    Weight out_norm, out_norm_bias;
  };

  BertOptions options_;
  Weight token_types_, position_embd_, embd_norm_, embd_norm_bias_;
  std::vector<Layer> layers_;
  kernels::RopeConfig rope_;
  int64_t n_ff_ = 0;
};

}  // namespace okapi::model
