// Training data: text files tokenized once into cached binary shards, a 90/10 split by position,
// seeded random training windows and fixed held-out evaluation windows.
//
// Documents: each --data file is one document, tokenized as llama-perplexity tokenizes a text
// (the bytes minus one trailing newline, BOS first when the vocabulary adds one). TinyStories
// files separate stories and paragraphs alike by blank lines, so story boundaries cannot be told
// apart; one BOS per file keeps the held-out tokens identical to what `okapi perplexity` scores.
// Files are concatenated in the order given; the last `held_out_fraction` of the tokens is held
// out (by position, so no training window overlaps evaluation text).
//
// Shard cache: <cache_dir>/<sha256(format tag, tokenizer file sha256, text)>.tok, written
// atomically: "OKTOKSH1" | u64 count | i32 tokens[count] | 64 hex chars sha256 of what precedes.
// A shard that does not verify is treated as absent and rewritten.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "format/gguf.hpp"
#include "format/llama2c.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::train {

// The tokenizer a model is trained with, and what the exporter needs to write it into a GGUF.
struct TrainingTokenizer {
  std::filesystem::path path;
  std::string file_sha256;
  tokenizer::Tokenizer tokenizer;
  std::optional<llama2c::Tokenizer> llama2c;  // set for a tokenizer.bin
  std::vector<gguf::KeyValue> gguf_keys;      // the tokenizer.* keys of a GGUF source
  int64_t vocab_size() const { return static_cast<int64_t>(tokenizer.vocab().size()); }
};

// A GGUF file (its tokenizer.ggml.* metadata) or a llama2.c tokenizer.bin, told apart by the magic.
TrainingTokenizer load_training_tokenizer(const std::filesystem::path& path);

// Tokens of one text file, from the cache when a verified shard exists (`*cache_hit` says which).
std::vector<int32_t> tokenize_cached(const std::filesystem::path& text_file, const TrainingTokenizer& tok,
                                     const std::filesystem::path& cache_dir, bool* cache_hit = nullptr);

struct Dataset {
  std::vector<int32_t> train;
  std::vector<int32_t> held_out;
  std::string sha256;  // of every token (train then held out), to check a resume uses the same data
  int64_t cache_hits = 0;
};

// Throws when either split is too short for one window of seq + 1 tokens.
Dataset build_dataset(std::span<const std::filesystem::path> files, const TrainingTokenizer& tok,
                      const std::filesystem::path& cache_dir, double held_out_fraction, int64_t seq);

// xoshiro256** seeded through splitmix64: the same stream on every machine, state saved in
// checkpoints.
class Rng {
 public:
  using State = std::array<uint64_t, 4>;
  explicit Rng(uint64_t seed);
  uint64_t next();
  uint64_t below(uint64_t n);  // uniform in [0, n), n > 0, without modulo bias
  const State& state() const { return state_; }
  void set_state(const State& state) { state_ = state; }

 private:
  State state_;
};

// Random windows of seq + 1 tokens from the training split: tokens = w[0..seq), targets =
// w[1..seq]. The cursor (windows drawn so far) and the RNG state are the whole sampler state.
class WindowSampler {
 public:
  struct State {
    Rng::State rng{};
    uint64_t windows_drawn = 0;
  };
  WindowSampler(std::span<const int32_t> train, int64_t seq, uint64_t seed);
  // Fills batch rows of seq tokens and targets (row-major [batch][seq]).
  void next_batch(int64_t batch, std::span<int32_t> tokens, std::span<int32_t> targets);
  State state() const { return {rng_.state(), windows_drawn_}; }
  void restore(const State& state);

 private:
  std::span<const int32_t> train_;
  int64_t seq_;
  Rng rng_;
  uint64_t windows_drawn_ = 0;
};

// Consecutive non-overlapping windows of the held-out split (stride seq; window i reads tokens
// i*seq .. i*seq + seq), at most max_windows (<= 0: all), for evaluation.
struct EvalWindows {
  int64_t count = 0;
  int64_t seq = 0;
  std::vector<int32_t> tokens;   // [count][seq]
  std::vector<int32_t> targets;  // [count][seq]
};
EvalWindows make_eval_windows(std::span<const int32_t> held_out, int64_t seq, int64_t max_windows);

}  // namespace okapi::train
