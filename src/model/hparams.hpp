// Model hyper-parameters, read only from GGUF metadata ({arch}.* keys) and tensor shapes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace okapi::gguf {
class File;
}

namespace okapi::model {

struct HParams {
  std::string arch;         // general.architecture
  int64_t n_embd = 0;       // {arch}.embedding_length
  int64_t n_layer = 0;      // {arch}.block_count
  int64_t n_head = 0;       // {arch}.attention.head_count
  int64_t n_head_kv = 0;    // {arch}.attention.head_count_kv (default n_head)
  int64_t head_dim_k = 0;   // {arch}.attention.key_length (default n_embd / n_head)
  int64_t head_dim_v = 0;   // {arch}.attention.value_length (default n_embd / n_head)
  int64_t n_ff = 0;         // {arch}.feed_forward_length (first layer's if an array; 0 if absent)
  int64_t n_rot = 0;        // {arch}.rope.dimension_count (default head_dim_k)
  int64_t n_vocab = 0;      // rows of token_embd.weight
  int64_t n_ctx_train = 0;  // {arch}.context_length (0 if absent)
  float norm_eps = 0.0f;    // {arch}.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;  // {arch}.rope.freq_base
  float rope_freq_scale = 1.0f;     // 1 / {arch}.rope.scaling.factor for linear/yarn scaling
  std::string rope_scaling_type = "none";  // {arch}.rope.scaling.type
  float rope_scaling_factor = 0.0f;        // {arch}.rope.scaling.factor (0 if absent)
  int64_t rope_n_ctx_orig = 0;             // {arch}.rope.scaling.original_context_length
  float rope_attn_factor = 1.0f;           // {arch}.rope.scaling.attn_factor
  int64_t sliding_window = 0;              // {arch}.attention.sliding_window (0 if absent)
  float attn_logit_softcap = 0.0f;         // {arch}.attn_logit_softcapping
  float final_logit_softcap = 0.0f;        // {arch}.final_logit_softcapping
  // Mixture of experts (qwen2moe, qwen3moe, Mixtral, ...), read as llama.cpp reads them; which of
  // them an architecture honours is its own choice (llama.cpp reads the weights' norm, scale and
  // gating function only for some).
  int64_t n_expert = 0;                    // {arch}.expert_count (0: a dense FFN)
  int64_t n_expert_used = 0;               // {arch}.expert_used_count (required with experts)
  int64_t n_ff_exp = 0;                    // {arch}.expert_feed_forward_length (0 if absent)
  int64_t n_ff_shexp = 0;                  // {arch}.expert_shared_feed_forward_length (0 if absent)
  bool expert_weights_norm = false;        // {arch}.expert_weights_norm
  float expert_weights_scale = 0.0f;       // {arch}.expert_weights_scale (0: none)
  int64_t expert_gating_func = 0;          // {arch}.expert_gating_func: 0 none, 1 softmax, 2 sigmoid,
                                           // 3 softmax of the selected, 4 sqrt(softplus)
  int64_t n_layer_dense_lead = 0;          // {arch}.leading_dense_block_count
  // Embedding models (encoders, and decoders converted as embedding models)
  bool causal_attention = true;            // {arch}.attention.causal (default: false for bert,
                                           // nomic-bert, gemma-embedding; true otherwise)
  int64_t pooling_type = -1;               // {arch}.pooling_type (-1: absent)
  float layer_norm_eps = 0.0f;             // {arch}.attention.layer_norm_epsilon (LayerNorm models)
  int64_t n_token_types = 0;               // tokenizer.ggml.token_type_count, where llama.cpp reads it
                                           // (bert's token_types rows); 0 if absent
  std::vector<std::string> classifier_labels;  // {arch}.classifier.output_labels

  // Throws okapi::Error naming the key for a missing required key or an invalid value.
  static HParams from_gguf(const gguf::File& file);
};

// Readers for architecture-specific keys (a missing required key throws naming it).
int64_t require_int(const gguf::File& file, std::string_view key);
int64_t optional_int(const gguf::File& file, std::string_view key, int64_t fallback);
float require_float(const gguf::File& file, std::string_view key);
float optional_float(const gguf::File& file, std::string_view key, float fallback);

// The most experts a layer may have (llama.cpp's LLAMA_MAX_EXPERTS).
inline constexpr int64_t kMaxExperts = 1024;

}  // namespace okapi::model
