// Fidelity against llama.cpp for architectures without committed goldens: a tiny random-weight
// model written by okapi synth (a real preset shrunk, every feature kept), llama.cpp's logits for
// every prompt position (../shared/peers/llama-dump-logits), and okapi's logits for the same token
// ids, in one batch or token by token.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "synth/presets.hpp"

namespace okapi::test {

// The llama.cpp tool that dumps every position's logits (../shared/peers/llama-dump-logits).
std::filesystem::path peer_dump_logits_tool();

// The preset `name` with its widths shrunk for tests (n_embd 64, 4 heads of 16, 2 KV heads when
// the preset groups queries, n_ff 96, 512 tokens); every other field (flags, windows, experts) as
// the preset has it, for the test to adjust.
synth::Preset tiny_preset(std::string_view name);

// Writes `preset` as architecture `arch` (empty: the preset's first) in mix `type` ("F32", "Q8_0",
// "Q4_K_M", ...) with `n_layer` blocks to `path`, seed 1. Returns `path`.
std::filesystem::path write_synth_model(const synth::Preset& preset, const std::string& arch, const std::string& type,
                                        int64_t n_layer, const std::filesystem::path& path);

struct PeerLogits {
  std::vector<int32_t> tokens;  // llama.cpp's token ids of the prompt (BOS included when the vocab adds it)
  int64_t n_vocab = 0;
  std::vector<float> logits;    // [tokens x n_vocab]
};

// Runs llama-dump-logits on `model` with `prompt` and a `kv` ("f32" or "f16") cache. Throws
// std::runtime_error with the tool's output when it fails.
PeerLogits peer_logits(const std::filesystem::path& model, const std::string& prompt, const std::string& kv);

struct PeerCheck {
  std::string kv = "f32";       // both engines' K and V cache type: "f32" or "f16"
  double max_rel = 1e-3;        // per row: max |okapi - llama.cpp| / max |llama.cpp|; <= 0: not checked
  double min_top1 = 1.0;        // fraction of positions whose argmax agrees; near-ties count as agreeing
  float near_tie = 0.0f;        // a pick whose llama.cpp logit is within this of the maximum agrees
                                // (quantized weights: golden_logits.hpp's kNearTie)
  bool token_by_token = false;  // okapi decodes one token at a time instead of one batch
  int threads = 2;
};

struct PeerComparison {
  double max_rel = 0;      // worst row
  double max_abs = 0;
  int64_t top1_agree = 0;  // exact argmax agreement
  int64_t near_agree = 0;  // within near_tie
  int64_t positions = 0;
};

// okapi's logits ([tokens x n_vocab]) for `tokens` with a fresh cache of type `kv`, prefilled in
// batches of `batch_size` (1: token by token).
std::vector<float> okapi_logits(const std::filesystem::path& model, const std::vector<int32_t>& tokens,
                                const std::string& kv, int64_t batch_size, int threads = 2);

PeerComparison compare_logits(const PeerLogits& peer, const std::vector<float>& mine, float near_tie);

// Runs both engines on `prompt`, prints one line with the numbers and EXPECTs the bounds of `check`.
PeerComparison expect_matches_peer(const std::filesystem::path& model, const std::string& prompt,
                                   const PeerCheck& check);

// expect_matches_peer() with F32 weights' defaults for each cache type (f32, f16) in one batch and
// token by token: the four runs every architecture's F32 model is held to.
void expect_matches_peer_every_cache_and_mode(const std::filesystem::path& model, const std::string& prompt);

// A prompt of about `n_words` words of ordinary text (deterministic): long enough to cross windows.
std::string peer_test_prompt(int n_words = 60);

}  // namespace okapi::test
