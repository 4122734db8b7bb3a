// nomic-bert (nomic-embed-text): bert's graph (bert.hpp) with a fused attn_qkv, NEOX rope on q
// and k instead of absolute positions, and a SiLU-gated FFN (ffn_gate, ffn_up; no biases).
#include "model/architectures.hpp"
#include "model/bert.hpp"

namespace okapi::model {

std::unique_ptr<Model> make_nomic_bert(gguf::File file, HParams hparams) {
  return std::make_unique<BertModel>(std::move(file), std::move(hparams),
                                     BertOptions{.rope = true, .gated_ffn = true});
}

}  // namespace okapi::model
