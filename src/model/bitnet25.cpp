// Microsoft's BitNet b1.58 2B4T: `bitnet-25` (ik_llama.cpp) / `bitnet-b1.58` (Microsoft's fork).
// The BitNet block of bitnet.hpp with a ReLU²-gated FFN; tied embeddings, GQA.
#include "model/architectures.hpp"
#include "model/bitnet.hpp"

namespace okapi::model {

std::unique_ptr<Model> make_bitnet25(gguf::File file, HParams hparams) {
  return std::make_unique<BitnetModel>(std::move(file), std::move(hparams), Activation::ReLU2);
}

}  // namespace okapi::model
