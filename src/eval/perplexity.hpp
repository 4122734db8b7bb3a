// Perplexity exactly as llama.cpp's llama-perplexity computes it: the whole text tokenized with
// BOS (add_special, no special parsing), cut into chunks of n_ctx tokens, the first token of each
// chunk replaced by BOS when the vocab adds one, and only the second half of each chunk scored
// (positions n_ctx/2 .. n_ctx-2 predict the next token). NLL is accumulated in double; the
// standard error is sqrt((E[nll²] - E[nll]²) / (count - 1)) * PPL, as llama.cpp prints it.
//
// Logits file (--save-logits / --kl-divergence), okapi's own format, little-endian:
//   "OKAPIPPL" | u32 version = 1 | u32 n_ctx | u32 n_vocab | u32 n_chunk | u32 first |
//   i32 tokens[n_chunk * n_ctx] (the scored text, before the BOS substitution) |
//   per chunk, per scored row (n_ctx - 1 - first rows): f32 log_softmax[n_vocab]
// Log-probabilities rather than raw logits, so KL divergence needs no renormalization. (llama.cpp
// stores the same rows as 16-bit quantized log-probs; float32 keeps the comparison exact.)
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/input_file.hpp"  // read_text_file, which the evaluations' callers use
#include "runtime/engine.hpp"

namespace okapi::eval {

struct PerplexityOptions {
  int64_t n_ctx = runtime::kContextNotGiven;  // -c, as runtime::Engine::resolve_ctx reads it
  int64_t n_chunks = -1;     // < 0: all chunks the text holds
  int64_t batch_size = 512;  // min(batch, n_ctx) tokens per forward pass
  std::filesystem::path save_logits;    // write this run's log-probs here (empty: no)
  std::filesystem::path kl_divergence;  // compare against a file saved by an earlier run (empty: no)
};

struct ChunkReport {
  int64_t chunk = 0;  // 0-based
  int64_t n_chunks = 0;
  double running_ppl = 0;
  double seconds = 0;  // elapsed since the first chunk started
};

// Statistics llama-perplexity --kl-divergence prints; Δp in probability units (not percent).
struct KlStats {
  double ppl_base = 0, ppl_base_err = 0;
  double mean_ln_ppl_ratio = 0, mean_ln_ppl_ratio_err = 0;
  double cor_ln_ppl = 0;
  double kld_mean = 0, kld_err = 0;
  double kld_max = 0, kld_p999 = 0, kld_p99 = 0, kld_median = 0, kld_p10 = 0, kld_p5 = 0, kld_p1 = 0, kld_min = 0;
  double dp_mean = 0, dp_err = 0, dp_rms = 0;
  // Δp percentiles: max, 99.9, 99, 95, 90, 75, 50, 25, 10, 5, 1, 0.1, min
  std::vector<std::pair<std::string, double>> dp_percentiles;
  double same_top_fraction = 0, same_top_err = 0;
};

struct PerplexityResult {
  int64_t n_ctx = 0;
  int64_t n_chunks = 0;
  int64_t n_tokens_text = 0;
  int64_t scored = 0;  // tokens scored
  double ppl = 0;
  double ppl_stderr = 0;  // as printed by llama.cpp: stderr of the mean NLL times PPL
  double mean_nll = 0;
  std::vector<double> running_ppl;  // after each chunk
  std::vector<double> chunk_mean_nll;
  bool interrupted = false;
  double seconds = 0;
  std::optional<KlStats> kl;
};

// Throws okapi::Error when the text is shorter than 2 * n_ctx tokens (as llama.cpp), or when a
// --kl-divergence file does not match (context, vocabulary, tokens).
PerplexityResult compute_perplexity(runtime::Engine& engine, const std::string& text, const PerplexityOptions& options,
                                    const std::function<void(const ChunkReport&)>& on_chunk = {});

}  // namespace okapi::eval
