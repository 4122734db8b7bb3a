// qwen2: the llama graph with Q/K/V biases and NEOX RoPE (tied or untied output).
#include "model/architectures.hpp"
#include "model/llama.hpp"

namespace okapi::model {

std::unique_ptr<Model> make_qwen2(gguf::File file, HParams hparams) {
  return std::make_unique<LlamaModel>(std::move(file), std::move(hparams), LlamaOptions{.neox_rope = true, .qkv_bias = true});
}

}  // namespace okapi::model
