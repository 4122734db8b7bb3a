// smollm3 (SmolLM3): the llama graph (normal rope) in which every fourth layer has no rope:
// layer il skips it when (il + 1) % 4 == 0. llama.cpp hard-codes the step
// (n_no_rope_layer_step = 4; the GGUF has no key for it), and so does this file.
#include "model/architectures.hpp"
#include "model/llama.hpp"

namespace okapi::model {

namespace {

constexpr int64_t kNoRopeLayerStep = 4;  // llama.cpp: hparams.n_no_rope_layer_step for smollm3

class SmolLM3Model final : public LlamaModel {
 public:
  SmolLM3Model(gguf::File file, HParams hparams) : LlamaModel(std::move(file), std::move(hparams), LlamaOptions{}) {}

 protected:
  void forward_batch(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     const LogitSelection& rows, float* logits) const override {
    forward_pre_norm(ops, kv, tokens, positions, rows, logits, layers_, rope_, Activation::SiLU,
                     {.no_rope_layer_step = kNoRopeLayerStep});
  }
};

}  // namespace

std::unique_ptr<Model> make_smollm3(gguf::File file, HParams hparams) {
  return std::make_unique<SmolLM3Model>(std::move(file), std::move(hparams));
}

}  // namespace okapi::model
