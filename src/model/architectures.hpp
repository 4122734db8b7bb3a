// Factories of the supported architectures (one per file); the registry in registry.cpp lists them.
#pragma once
#include <memory>

#include "model/model.hpp"

namespace okapi::model {

std::unique_ptr<Model> make_llama(gguf::File file, HParams hparams);
std::unique_ptr<Model> make_qwen2(gguf::File file, HParams hparams);
std::unique_ptr<Model> make_qwen3(gguf::File file, HParams hparams);
std::unique_ptr<Model> make_gemma3(gguf::File file, HParams hparams);
std::unique_ptr<Model> make_bitnet(gguf::File file, HParams hparams);
std::unique_ptr<Model> make_bitnet25(gguf::File file, HParams hparams);
// Mixture of experts (llama_moe.hpp); make_llama calls make_mixtral when llama.expert_count > 0.
std::unique_ptr<Model> make_qwen3moe(gguf::File file, HParams hparams);
std::unique_ptr<Model> make_qwen2moe(gguf::File file, HParams hparams);
std::unique_ptr<Model> make_mixtral(gguf::File file, HParams hparams);
std::unique_ptr<Model> make_gpt_oss(gguf::File file, HParams hparams);  // gpt-oss (gpt_oss.cpp)
// phi3, granite, smollm3
std::unique_ptr<Model> make_phi3(gguf::File file, HParams hparams);
std::unique_ptr<Model> make_granite(gguf::File file, HParams hparams);
std::unique_ptr<Model> make_smollm3(gguf::File file, HParams hparams);
// gemma2 (sliding-window attention, soft-capping)
std::unique_ptr<Model> make_gemma2(gguf::File file, HParams hparams);
// encoders (embedding models): bert.hpp, gemma_embedding.cpp
std::unique_ptr<Model> make_bert(gguf::File file, HParams hparams);
std::unique_ptr<Model> make_nomic_bert(gguf::File file, HParams hparams);
std::unique_ptr<Model> make_gemma_embedding(gguf::File file, HParams hparams);

}  // namespace okapi::model
