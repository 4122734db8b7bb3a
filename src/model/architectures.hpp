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
// gemma2 (sliding-window attention, soft-capping)
std::unique_ptr<Model> make_gemma2(gguf::File file, HParams hparams);

}  // namespace okapi::model
