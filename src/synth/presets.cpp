#include "synth/presets.hpp"

#include <algorithm>
#include <cctype>

#include "core/error.hpp"

namespace okapi::synth {
namespace {

std::vector<Preset> make_presets() {
  std::vector<Preset> p;
  // llama2.c TinyStories models (karpathy/llama2.c); convert-llama2c writes output.weight.
  p.push_back({.name = "stories15M", .archs = {"llama"}, .n_embd = 288, .n_layer = 6, .n_head = 6, .n_head_kv = 6,
               .n_ff = 768, .n_vocab = 32000, .context_length = 256});
  p.push_back({.name = "stories110M", .archs = {"llama"}, .n_embd = 768, .n_layer = 12, .n_head = 12,
               .n_head_kv = 12, .n_ff = 2048, .n_vocab = 32000, .context_length = 1024});
  // HuggingFaceTB/SmolLM2-135M
  p.push_back({.name = "smollm2-135m", .archs = {"llama"}, .n_embd = 576, .n_layer = 30, .n_head = 9,
               .n_head_kv = 3, .n_ff = 1536, .n_vocab = 49152, .context_length = 8192, .rope_base = 100000.0f,
               .tied = true});
  // Qwen/Qwen2.5-0.5B
  p.push_back({.name = "qwen2.5-0.5b", .archs = {"qwen2"}, .n_embd = 896, .n_layer = 24, .n_head = 14,
               .n_head_kv = 2, .n_ff = 4864, .n_vocab = 151936, .context_length = 32768, .rope_base = 1000000.0f,
               .rms_eps = 1e-6f, .tied = true, .qkv_bias = true});
  // Qwen/Qwen3-0.6B
  p.push_back({.name = "qwen3-0.6b", .archs = {"qwen3"}, .n_embd = 1024, .n_layer = 28, .n_head = 16,
               .n_head_kv = 8, .head_dim = 128, .n_ff = 3072, .n_vocab = 151936, .context_length = 40960,
               .rope_base = 1000000.0f, .rms_eps = 1e-6f, .tied = true, .qk_norm = true});
  // google/gemma-3-270m: 5 sliding-window layers per global one (llama.cpp hard-codes the pattern).
  p.push_back({.name = "gemma3-270m", .archs = {"gemma3"}, .n_embd = 640, .n_layer = 18, .n_head = 4,
               .n_head_kv = 1, .head_dim = 256, .n_ff = 2048, .n_vocab = 262144, .context_length = 32768,
               .rope_base = 1000000.0f, .rms_eps = 1e-6f, .tied = true, .qk_norm = true, .post_norms = true,
               .sliding_window = 512});
  // TinyLlama/TinyLlama-1.1B-Chat-v1.0
  p.push_back({.name = "tinyllama-1.1b", .archs = {"llama"}, .n_embd = 2048, .n_layer = 22, .n_head = 32,
               .n_head_kv = 4, .n_ff = 5632, .n_vocab = 32000, .context_length = 2048});
  // microsoft/bitnet-b1.58-2B-4T: ik_llama calls the architecture bitnet-25, Microsoft's BitNet
  // fork bitnet-b1.58; same tensors. Also writable as llama.cpp's `bitnet` (the same tensors and
  // matrix shapes, a SiLU-gated FFN), the one mainline llama.cpp runs, to time it on the same weights.
  p.push_back({.name = "bitnet-2b-shape", .archs = {"bitnet-25", "bitnet-b1.58", "bitnet"}, .n_embd = 2560, .n_layer = 30,
               .n_head = 20, .n_head_kv = 5, .n_ff = 6912, .n_vocab = 128256, .context_length = 4096,
               .rope_base = 500000.0f, .tied = true, .sub_norms = true, .ternary = true});
  // Mixture of experts. Qwen/Qwen3-30B-A3B
  p.push_back({.name = "qwen3-30b-a3b", .archs = {"qwen3moe"}, .n_embd = 2048, .n_layer = 48, .n_head = 32,
               .n_head_kv = 4, .head_dim = 128, .n_ff = 6144, .n_vocab = 151936, .context_length = 40960,
               .rope_base = 1000000.0f, .rms_eps = 1e-6f, .qk_norm = true, .n_expert = 128, .n_expert_used = 8,
               .n_ff_exp = 768});
  // Qwen/Qwen2-57B-A14B
  p.push_back({.name = "qwen2-57b-a14b", .archs = {"qwen2moe"}, .n_embd = 3584, .n_layer = 28, .n_head = 28,
               .n_head_kv = 4, .n_ff = 18944, .n_vocab = 151936, .context_length = 32768, .rope_base = 1000000.0f,
               .rms_eps = 1e-6f, .qkv_bias = true, .n_expert = 64, .n_expert_used = 8, .n_ff_exp = 2560,
               .n_ff_shexp = 20480});
  // mistralai/Mixtral-8x7B-v0.1 (llama.cpp: a llama with experts)
  p.push_back({.name = "mixtral-8x7b", .archs = {"llama"}, .n_embd = 4096, .n_layer = 32, .n_head = 32,
               .n_head_kv = 8, .n_ff = 14336, .n_vocab = 32000, .context_length = 32768, .rope_base = 1000000.0f,
               .n_expert = 8, .n_expert_used = 2});
  // openai/gpt-oss-20b: 32 experts of width 2880, 4 used; even layers slide over 128 tokens, odd
  // ones attend to everything (llama.cpp's pattern 2); YaRN factor 32 over 4096 original positions.
  p.push_back({.name = "gpt-oss-20b", .archs = {"gpt-oss"}, .n_embd = 2880, .n_layer = 24, .n_head = 64,
               .n_head_kv = 8, .head_dim = 64, .n_ff = 2880, .n_vocab = 201088, .context_length = 131072,
               .rope_base = 150000.0f, .qkv_bias = true, .sliding_window = 128, .n_expert = 32, .n_expert_used = 4,
               .n_ff_exp = 2880, .gpt_oss = true, .yarn_factor = 32.0f, .yarn_orig_ctx = 4096});
  // phi3, granite, smollm3
  // microsoft/Phi-4-mini-instruct: partial_rotary_factor 0.75 (96 of 128 dims), LongRoPE
  // (original context 4096 of 131072), no sliding window.
  p.push_back({.name = "phi-4-mini", .archs = {"phi3"}, .n_embd = 3072, .n_layer = 32, .n_head = 24, .n_head_kv = 8,
               .n_ff = 8192, .n_vocab = 200064, .context_length = 131072, .tied = true, .fused_qkv_up = true,
               .rope_dims = 96, .rope_orig_context = 4096});
  // ibm-granite/granite-3.0-2b-instruct: embedding_multiplier 12, residual_multiplier 0.22,
  // attention_multiplier 0.015625, logits_scaling 8.
  p.push_back({.name = "granite-3-2b", .archs = {"granite"}, .n_embd = 2048, .n_layer = 40, .n_head = 32,
               .n_head_kv = 8, .n_ff = 8192, .n_vocab = 49155, .context_length = 4096, .rms_eps = 1e-6f, .tied = true,
               .embedding_scale = 12.0f, .residual_scale = 0.22f, .attention_scale = 0.015625f, .logit_scale = 8.0f});
  // HuggingFaceTB/SmolLM3-3B: every fourth layer without rope (no_rope_layer_interval 4).
  p.push_back({.name = "smollm3-3b", .archs = {"smollm3"}, .n_embd = 2048, .n_layer = 36, .n_head = 16,
               .n_head_kv = 4, .n_ff = 11008, .n_vocab = 128256, .context_length = 65536, .rope_base = 5000000.0f,
               .rms_eps = 1e-6f, .tied = true});
  // google/gemma-2-2b: even layers slide over 4096 positions, odd ones are global (llama.cpp's
  // default pattern 2); attention scores capped at 50, logits at 30.
  p.push_back({.name = "gemma2-2b", .archs = {"gemma2"}, .n_embd = 2304, .n_layer = 26, .n_head = 8,
               .n_head_kv = 4, .head_dim = 256, .n_ff = 9216, .n_vocab = 256000, .context_length = 8192,
               .rms_eps = 1e-6f, .tied = true, .post_norms = true, .sliding_window = 4096, .attn_softcap = 50.0f,
               .final_softcap = 30.0f});
  // Embedding models and rerankers.
  // BAAI/bge-base-en-v1.5 (bert-base: google-bert/bert-base-uncased's shape)
  p.push_back({.name = "bge-base-en-v1.5", .archs = {"bert"}, .n_embd = 768, .n_layer = 12, .n_head = 12,
               .n_head_kv = 12, .n_ff = 3072, .n_vocab = 30522, .context_length = 512, .bert = true,
               .layer_norm_eps = 1e-12f, .pooling = 2, .non_causal = true, .wordpiece = true});
  // sentence-transformers/all-MiniLM-L6-v2
  p.push_back({.name = "all-minilm-l6-v2", .archs = {"bert"}, .n_embd = 384, .n_layer = 6, .n_head = 12,
               .n_head_kv = 12, .n_ff = 1536, .n_vocab = 30522, .context_length = 512, .bert = true,
               .layer_norm_eps = 1e-12f, .pooling = 1, .non_causal = true, .wordpiece = true});
  // BAAI/bge-reranker-base (XLM-RoBERTa-base; llama.cpp runs it as bert with a classifier head)
  p.push_back({.name = "bge-reranker-base", .archs = {"bert"}, .n_embd = 768, .n_layer = 12, .n_head = 12,
               .n_head_kv = 12, .n_ff = 3072, .n_vocab = 30522, .context_length = 512, .bert = true,
               .layer_norm_eps = 1e-5f, .pooling = 4, .non_causal = true, .cls_outputs = 1, .wordpiece = true});
  // nomic-ai/nomic-embed-text-v1.5
  p.push_back({.name = "nomic-embed-text-v1.5", .archs = {"nomic-bert"}, .n_embd = 768, .n_layer = 12, .n_head = 12,
               .n_head_kv = 12, .n_ff = 3072, .n_vocab = 30522, .context_length = 2048, .rope_base = 1000.0f,
               .bert = true, .nomic = true, .layer_norm_eps = 1e-12f, .pooling = 1, .non_causal = true,
               .wordpiece = true});
  // Qwen/Qwen3-Embedding-0.6B: Qwen3-0.6B's shape, last-token pooling, causal
  p.push_back({.name = "qwen3-embedding-0.6b", .archs = {"qwen3"}, .n_embd = 1024, .n_layer = 28, .n_head = 16,
               .n_head_kv = 8, .head_dim = 128, .n_ff = 3072, .n_vocab = 151669, .context_length = 32768,
               .rope_base = 1000000.0f, .rms_eps = 1e-6f, .tied = true, .qk_norm = true, .pooling = 3});
  // google/embeddinggemma-300m: gemma3's blocks, non-causal, mean pooling, dense 768 -> 3072 -> 768
  p.push_back({.name = "embeddinggemma-300m", .archs = {"gemma-embedding"}, .n_embd = 768, .n_layer = 24,
               .n_head = 3, .n_head_kv = 1, .head_dim = 256, .n_ff = 1152, .n_vocab = 262144,
               .context_length = 2048, .rope_base = 1000000.0f, .rms_eps = 1e-6f, .tied = true, .qk_norm = true,
               .post_norms = true, .sliding_window = 512, .pooling = 1, .non_causal = true, .dense_width = 3072});
  return p;
}

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::span<const Preset> all_presets() {
  static const std::vector<Preset> presets = make_presets();
  return presets;
}

std::string preset_names() {
  std::string s;
  for (const auto& p : all_presets()) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

const Preset& preset_by_name(std::string_view name) {
  for (const auto& p : all_presets()) {
    if (same_name(p.name, name)) return p;
  }
  throw_error("unknown preset '{}'; valid presets: {}", name, preset_names());
}

}  // namespace okapi::synth
