// One sequence being generated: its sampler, stream decoder, stop strings, drafter and draft
// length, and its limits. The Scheduler (runtime/scheduler.hpp) asks each sequence for the tokens
// to run next (next_inputs), runs the tokens of all sequences in one forward pass, and hands each
// its rows of logits (accept), which turn into events: text, logprobs, the stop. The rules of
// generation live here once: sampling, verification of drafts (runtime/speculative.hpp), end of
// generation, stop strings, token limit, end of context. Wave 3's grammar masks and output
// parsers plug in here too.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "kv/kv_store.hpp"
#include "runtime/generation.hpp"
#include "runtime/output_gate.hpp"
#include "runtime/speculative.hpp"
#include "runtime/stop_strings.hpp"
#include "sample/sampler.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::runtime {

// The cache a sequence runs in: the store and the tokens whose K/V it holds (position i at cell
// i). A scheduler slot owns both and keeps them after the sequence ends, for prefix reuse.
struct SequenceCache {
  kv::KvStore& kv;
  std::vector<TokenId>& tokens;
};

struct DraftSettings {
  Drafter* drafter = nullptr;  // null: plain decoding
  int draft_max = 16;          // most drafts a round (fewer as DraftLength finds pays)
  int draft_min = 0;           // fewer drafts than this are not verified
};

// A prompt's tokens as `okapi run` encodes them: BOS/EOS as the vocabulary says, special texts parsed.
std::vector<TokenId> tokenize_prompt(const tokenizer::Tokenizer& tokenizer, std::string_view prompt);

class Sequence {
 public:
  // `cache.tokens` holds the reused prefix of the prompt (the slot truncated the rest); at least
  // one prompt token is left to run, since its logits give the first generated token.
  // `token_index` is needed (non-null) only when the request has a grammar.
  Sequence(const tokenizer::Tokenizer& tokenizer, int64_t n_vocab, SequenceRequest request, SequenceCache cache,
           DraftSettings drafting, int slot, double submitted, const grammar::TokenIndex* token_index = nullptr);

  const SequenceRequest& request() const { return request_; }
  bool finished() const { return state_ == State::Finished; }
  bool decoding() const { return state_ == State::Decode; }
  int64_t prompt_done() const { return static_cast<int64_t>(prompt_done_); }
  const GenerationStats& stats() const { return stats_; }

  // A decoding sequence with a drafter asks it for this round's drafts (before next_inputs). A
  // drafter that fails only costs its speed-up.
  void draft();

  struct Inputs {
    std::span<const TokenId> tokens;  // the pending token and its drafts, or a chunk of the prompt
    int32_t first_position = 0;       // of tokens[0]; the rest follow
    bool all_rows = false;            // logits of every token (decode: verify drafts)
    bool last_row = false;            // ... of the last one only (the prompt's end)
    bool prompt = false;              // the tokens are prompt tokens
  };
  // What to run next: a decoding sequence its pending token and drafts (whatever `budget`), one
  // reading its prompt at most `budget` of it (none when budget is 0).
  Inputs next_inputs(int64_t budget);
  // After the pass that ran next_inputs(): `rows` holds the rows it asked for (n_vocab floats
  // each). Appends this round's events; the last one carries the stop.
  void accept(const float* rows, double pass_seconds, std::vector<SequenceEvent>& events);
  // Ends the sequence now (Interrupted, or Error with `error`): the final event.
  void stop(StopReason reason, std::vector<SequenceEvent>& events, const std::string& error = {},
            Setting error_setting = Setting::None);

 private:
  // Replay: after a context shift, the kept tokens behind the dropped ones run again (at their new
  // positions) before decoding goes on.
  enum class State { Prompt, Decode, Replay, Finished };
  // The context is full: drops tokens as the request's context_shift says and starts the replay.
  // False when nothing can be dropped.
  bool shift_context();
  // After the prompt's last row: the drafter reads the prompt, the first token is sampled.
  void finish_prompt(const float* row, std::vector<SequenceEvent>& events);
  // A chosen token (sampled, or a verified draft): records it, emits its text, stops the sequence
  // when it ends generation. Returns false when it did.
  bool emit(TokenId id, const float* logits, std::vector<SequenceEvent>& events);
  void verify(const float* rows, double pass_seconds, std::vector<SequenceEvent>& events);
  TokenLogprob logprobs_of(const float* logits, TokenId chosen) const;
  // The next token from a row of logits: forced by the reasoning budget, sampled under the
  // grammar's filter, or plainly sampled.
  TokenId choose(const float* row);
  bool is_end_of_generation(TokenId id) const;

  const tokenizer::Tokenizer& tokenizer_;
  size_t n_vocab_;
  SequenceRequest request_;
  SequenceCache cache_;
  DraftSettings drafting_;
  State state_ = State::Prompt;
  sample::Sampler sampler_;
  tokenizer::StreamDecoder decoder_;
  StopStrings stops_;
  size_t prompt_done_ = 0;  // prompt tokens whose K/V is in the cache
  TokenId pending_ = 0;     // Decode: the chosen token to run next
  std::vector<TokenId> inputs_;
  std::vector<TokenId> replay_;  // Replay: the tokens to run again, from replay_done_ on
  size_t replay_done_ = 0;
  std::optional<DraftLength> draft_length_;
  std::vector<DraftToken> drafts_;  // this round's, verified in its pass
  DraftRound draft_round_;          // ... and what asking for them cost
  std::vector<TokenId> context_;    // scratch: the prompt and generated tokens, for the drafter
  std::unique_ptr<OutputGate> gate_;  // grammar and reasoning budget; null for a plain request
  std::vector<TokenId> preserved_;    // sorted
  GenerationStats stats_;
  double started_ = 0;
  double prompt_end_ = 0;
};

}  // namespace okapi::runtime
