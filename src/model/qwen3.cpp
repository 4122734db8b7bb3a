// qwen3: the llama graph with NEOX RoPE and a per-head RMSNorm of q and k (attn_q_norm,
// attn_k_norm, head_dim = attention.key_length, which may differ from n_embd / n_head) applied
// before RoPE. Qwen3 rerankers carry cls.output (rank pooling: last token, then a softmax).
#include "model/architectures.hpp"
#include "model/llama.hpp"

namespace okapi::model {

std::unique_ptr<Model> make_qwen3(gguf::File file, HParams hparams) {
  return std::make_unique<LlamaModel>(std::move(file), std::move(hparams),
                                      LlamaOptions{.neox_rope = true, .qk_norm = true, .classifier = true});
}

}  // namespace okapi::model
