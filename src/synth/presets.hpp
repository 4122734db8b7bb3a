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
  // gemma2: attention and final logit soft-capping (written when > 0); sliding-window pattern
  // (attention.sliding_window_pattern, written when > 0: layer il is local iff il % n < n - 1)
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  int64_t sliding_window_pattern = 0;

  int64_t key_length() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
};

std::span<const Preset> all_presets();
// Case-insensitive. Throws okapi::Error listing the valid names.
const Preset& preset_by_name(std::string_view name);
std::string preset_names();  // "stories15M, stories110M, ..."

}  // namespace okapi::synth
