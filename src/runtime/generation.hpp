// The vocabulary of generation shared by every caller of the one loop (runtime/scheduler.hpp):
// what a sequence is asked to generate, what it reports back as it goes, why it stopped and what
// it cost. `okapi run`, `okapi chat` and `okapi serve` all speak it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "grammar/grammar.hpp"
#include "sample/sampler.hpp"
#include "tokenizer/vocab.hpp"

namespace okapi::runtime {

using tokenizer::TokenId;

// Why a sequence stopped. OpenAI's finish_reason is "stop" for the first two, "length" for the
// next two.
enum class StopReason {
  EndOfGeneration,  // the model chose an end-of-generation token
  StopString,       // the text reached one of the request's stop strings
  TokenLimit,       // max_tokens (-n) tokens were generated
  ContextFull,      // the next token would run past the end of the sequence's context
  Interrupted,      // the caller cancelled it (Ctrl-C, a client that went away, shutdown)
  Error,            // a forward pass failed (the event's `error` says why)
};
std::string_view to_string(StopReason reason);

// A grammar the output must follow (runtime/output_gate.hpp applies it).
struct OutputConstraint {
  std::shared_ptr<const grammar::Grammar> grammar;  // null: unconstrained
  // Non-empty: lazy. The output is free until it contains one of these texts; the grammar then
  // matches the output from the trigger's first byte on (a tool call's opening marker).
  std::vector<std::string> triggers;
  // Lazy too: texts that start the grammar only where the answer starts (after the reasoning block
  // and blank space), as a call that is the whole answer (Llama 3's bare JSON, Functionary's first call).
  std::vector<std::string> start_triggers;
  // The grammar starts after the reasoning block (ReasoningRules), never constraining the reasoning.
  bool after_reasoning = false;
};

// The output's reasoning block ("<think>" ... "</think>"): where it is, and its token budget.
struct ReasoningRules {
  std::string start, end;    // markers; empty end: the output has no reasoning block
  bool forced_open = false;  // the prompt ended inside the block: the output starts in it
  int64_t budget = -1;       // reasoning tokens before `budget_message` + end are forced; < 0: no limit
  std::string budget_message;
};

struct SequenceRequest {
  std::vector<TokenId> prompt;
  sample::SamplerConfig sampling;
  int64_t max_tokens = -1;  // < 0: until end of generation or a full context
  std::vector<std::string> stop;
  int top_logprobs = -1;  // < 0: no logprobs; else the chosen token's and this many alternatives
  bool ignore_eos = false;  // keep generating past end-of-generation tokens
  bool report_progress = false;  // events after each prompt chunk (a progress bar, return_progress)
  OutputConstraint constraint;
  ReasoningRules reasoning;
  // Control tokens whose text goes into the output (a tool call's markers, which a parser reads);
  // other control tokens add no text.
  std::vector<TokenId> preserved_tokens;
};

struct TokenLogprob {
  TokenId id = 0;
  std::string token;  // its bytes (may be part of a UTF-8 character)
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // most likely first
};

struct SequenceEvent {
  std::string text;                    // newly complete text (may be empty)
  std::vector<TokenId> tokens;         // the tokens chosen since the previous event
  std::vector<TokenLogprob> logprobs;  // the tokens sampled since the previous event
  std::optional<StopReason> stop;      // set on the last event
  std::string stop_string;             // stop == StopString: the stop string that ended it
  std::string error;                   // stop == Error
  Setting error_setting = Setting::None;  // ... the setting the error blames (core/error.hpp)
  // report_progress: prompt tokens whose K/V the cache holds, of prompt_total (-1: not a progress event).
  int64_t prompt_done = -1;
  int64_t prompt_total = 0;
};

// What one sequence cost, as it ran.
struct GenerationStats {
  int slot = -1;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;     // prompt tokens whose K/V was reused from the slot's previous sequence
  int64_t generated_tokens = 0;  // sampled tokens (including a final end-of-generation token)
  double queued_seconds = 0;     // submitted -> given a slot
  double prompt_seconds = 0;     // given a slot -> the prompt's K/V in the cache (the drafter's prompt pass included)
  double draft_prompt_seconds = 0;  // speculative decoding: the drafter's prompt pass
  double generation_seconds = 0;    // the prompt's end -> the last token
  int64_t decode_passes = 0;     // forward passes that decoded this sequence (one a token without drafts)
  int64_t drafted_tokens = 0;    // speculative decoding: tokens proposed by the drafter
  int64_t accepted_tokens = 0;   // ... and kept
  double draft_seconds = 0;      // ... and the time spent drafting (inside generation_seconds)
  double acceptance_rate() const;  // accepted / drafted (0 without drafts)
  double prompt_tokens_per_second() const;  // over the prompt tokens actually run (not the reused ones)
  double generation_tokens_per_second() const;
};

}  // namespace okapi::runtime
