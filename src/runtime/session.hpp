// One generation: prompt -> prefill in batches -> decode loop with the sampler, streaming text
// through a StreamDecoder. Stops at an end-of-generation token, after n_predict tokens, when the
// context is full, or when interrupt_requested() (Ctrl-C) turns true; timings cover what ran.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/engine.hpp"
#include "runtime/speculative.hpp"
#include "sample/sampler.hpp"

namespace okapi::runtime {

struct GenerateOptions {
  int64_t n_predict = -1;  // < 0: until end of generation or a full context
  int64_t batch_size = 512;
  bool ignore_eos = false;  // keep generating past end-of-generation tokens (benchmarks, tests)
  // Called when the prompt has been processed (also when interrupted). A prompt longer than one
  // batch shows a progress bar on a terminal meanwhile; `okapi run` echoes the prompt here, so the
  // bar has its line to itself.
  std::function<void()> after_prefill;
  // Speculative decoding (runtime/speculative.hpp): drafts from `drafter`, at most draft_max a
  // round (fewer as DraftLength finds pays), none when it offers fewer than draft_min. Null: plain
  // decoding. Greedy output is byte-identical either way; sampled output has the same distribution.
  Drafter* drafter = nullptr;
  int draft_max = 16;
  int draft_min = 0;
};

enum class StopReason { EndOfGeneration, TokenLimit, ContextFull, Interrupted };
std::string_view to_string(StopReason reason);

struct Timings {
  double load_seconds = 0;
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0;
  double draft_prompt_seconds = 0;  // speculative decoding: the drafter's prompt pass (inside prompt_seconds)
  int64_t generated_tokens = 0;  // sampled tokens (including a final end-of-generation token)
  double generation_seconds = 0;  // sampling + decoding of the generated tokens
  int64_t decode_passes = 0;      // target forward passes while decoding (one per token without drafts)
  int64_t drafted_tokens = 0;     // speculative decoding: tokens proposed by the drafter
  int64_t accepted_tokens = 0;    // ... and kept
  double draft_seconds = 0;       // ... and the time spent drafting (inside generation_seconds)
  double acceptance_rate() const;  // accepted / drafted (0 without drafts)
  double prompt_tokens_per_second() const;
  double generation_tokens_per_second() const;
};

struct GenerationResult {
  std::vector<tokenizer::TokenId> tokens;  // generated ids (without the prompt)
  std::string text;                        // their text (without an end-of-generation token)
  StopReason stop = StopReason::TokenLimit;
  Timings timings;
};

class Session {
 public:
  Session(Engine& engine, kv::KvStore& kv) : engine_(engine), kv_(kv) {}

  // Prompt tokens as `okapi run` encodes them: BOS/EOS as the vocab says, special texts parsed.
  std::vector<tokenizer::TokenId> tokenize_prompt(std::string_view prompt) const;

  // Throws okapi::Error when the prompt is empty or longer than the context. `on_text` gets each
  // complete piece of UTF-8 text as soon as it is decoded.
  GenerationResult generate(std::span<const tokenizer::TokenId> prompt, sample::Sampler& sampler,
                            const GenerateOptions& options,
                            const std::function<void(std::string_view)>& on_text = {});

 private:
  GenerationResult generate_tokens(std::span<const tokenizer::TokenId> prompt, sample::Sampler& sampler,
                                   const GenerateOptions& options,
                                   const std::function<void(std::string_view)>& on_text);
  bool is_end_of_generation(tokenizer::TokenId id) const;
  Engine& engine_;
  kv::KvStore& kv_;
};

}  // namespace okapi::runtime
