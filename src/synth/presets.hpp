// Shapes of real models for random-weight GGUFs (okapi synth): the hyper-parameters of each
// model's published config.json, in llama.cpp's GGUF vocabulary.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace okapi::synth {

struct Preset {
  std::string_view name;
  std::vector<std::string_view> archs;  // accepted --arch values; the first is the default
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // 0: n_embd / n_head
  int64_t n_ff = 0;
  int64_t n_vocab = 0;
  int64_t context_length = 2048;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied = false;      // no output.weight: the lm_head is token_embd
  bool qkv_bias = false;  // qwen2
  bool qk_norm = false;   // qwen3, gemma3: per-head attn_q_norm / attn_k_norm
  bool post_norms = false;  // gemma3: post_attention_norm, post_ffw_norm
  bool sub_norms = false;   // bitnet: attn_sub_norm, ffn_sub_norm
  bool ternary = false;     // bitnet: projections are s * {-1, 0, +1}
  int64_t sliding_window = 0;  // gemma3
  // Mixture of experts (qwen3moe, qwen2moe, llama = Mixtral): n_expert > 0 replaces the dense FFN
  // by ffn_gate_inp and the 3-D ffn_{gate,up,down}_exps.
  int64_t n_expert = 0;       // {arch}.expert_count
  int64_t n_expert_used = 0;  // {arch}.expert_used_count
  int64_t n_ff_exp = 0;       // {arch}.expert_feed_forward_length (0: experts are n_ff wide, Mixtral)
  int64_t n_ff_shexp = 0;     // > 0: a shared expert with a sigmoid gate (qwen2moe)

  int64_t expert_width() const { return n_ff_exp > 0 ? n_ff_exp : n_ff; }
  // gpt-oss (experts above): router and expert biases, biases on every attention
  // projection, attention sinks, the FFN norm named post_attention_norm, alternating sliding-window
  // / full layers (sliding_window above) and YaRN rope.
  bool gpt_oss = false;
  float yarn_factor = 0.0f;        // > 0: rope.scaling.type yarn with this factor
  int64_t yarn_orig_ctx = 0;       // rope.scaling.original_context_length
  float expert_gain = 1.0f;        // multiplies the experts' gate / up weights (tests: clamp that bites)
  float sink_spread = 3.0f;        // standard deviation of the attention sinks
  // phi3, granite, smollm3 (smollm3's rope-less layers have no key: llama.cpp hard-codes them)
  bool fused_qkv_up = false;       // phi3: attn_qkv and ffn_up [n_embd, 2 n_ff] (gate rows, then up)
  int64_t rope_dims = 0;           // rope.dimension_count; 0: the head size (phi3: partial rotary)
  int64_t rope_orig_context = 0;   // > 0: LongRoPE rope_factors_long/short, original_context_length
  float embedding_scale = 0.0f;    // granite's scales; 0: the key is not written
  float residual_scale = 0.0f;
  float attention_scale = 0.0f;
  float logit_scale = 0.0f;
  // gemma2: attention and final logit soft-capping (written when > 0); sliding-window pattern
  // (attention.sliding_window_pattern, written when > 0: layer il is local iff il % n < n - 1)
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  int64_t sliding_window_pattern = 0;

  // Embedding models. bert: post-norm LayerNorm blocks with biases, token_types, absolute
  // position_embd (context_length rows), no output norm or LM head; nomic (with bert): a fused
  // attn_qkv, rope instead of position_embd, a SiLU-gated FFN, no biases.
  bool bert = false;
  bool nomic = false;
  float layer_norm_eps = 0.0f;   // > 0: attention.layer_norm_epsilon (and no RMSNorm epsilon)
  int64_t pooling = -1;          // >= 0: {arch}.pooling_type (1 mean, 2 cls, 3 last, 4 rank)
  bool non_causal = false;       // writes {arch}.attention.causal = false
  int64_t cls_outputs = 0;       // > 0: a classifier head (cls + cls.output of that many rows)
  int64_t dense_width = 0;       // > 0: gemma-embedding's dense_2 [n_embd -> w] and dense_3 [w -> n_embd]
  bool wordpiece = false;        // a WordPiece vocabulary (synth/vocab.hpp) instead of SentencePiece

  int64_t key_length() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  int64_t rope_dimensions() const { return rope_dims > 0 ? rope_dims : key_length(); }
};

std::span<const Preset> all_presets();
// Case-insensitive. Throws okapi::Error listing the valid names.
const Preset& preset_by_name(std::string_view name);
std::string preset_names();  // "stories15M, stories110M, ..."

}  // namespace okapi::synth
