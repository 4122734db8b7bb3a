// The rules a sequence's output follows beyond sampling: a grammar (now, lazily from a trigger
// text, or only after the reasoning block) and the reasoning block's token budget. The gate reads
// the output as token texts with control tokens written out (grammar::TokenIndex::piece), decides
// whether the next token is constrained (and by what filter) or forced, and follows each chosen
// token. The reasoning itself is never constrained.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "grammar/grammar.hpp"
#include "runtime/generation.hpp"
#include "sample/sampler.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::runtime {

class OutputGate {
 public:
  // `index` may be null only when the request has no grammar.
  OutputGate(const tokenizer::Tokenizer& tokenizer, const grammar::TokenIndex* index, const OutputConstraint& constraint,
             const ReasoningRules& reasoning);

  // Whether the request has a grammar or a reasoning budget at all (a plain request skips the gate).
  bool enabled() const { return enabled_; }
  // The token the budget forces next, if any.
  std::optional<TokenId> forced() const;
  // Whether the next token is filtered; filter() is valid until the next accept().
  bool constrains() const;
  const sample::TokenFilter& filter() const { return filter_; }
  // Follows a chosen token. Returns false when the grammar refuses it (a lazy grammar whose trigger
  // text does not start a valid match: then the output is left unconstrained, as llama.cpp does).
  bool accept(TokenId id);
  bool in_reasoning() const { return in_reasoning_; }
  // Masks computed and served from the cache (benchmarks, tests).
  size_t mask_misses() const { return masks_ ? masks_->misses() : 0; }
  size_t mask_hits() const { return masks_ ? masks_->hits() : 0; }

 private:
  enum class Grammar { Off, Waiting, Active, Done };
  // The next token may either open the reasoning block or start the grammar's answer.
  bool opening_or_grammar() const { return may_open_reasoning_ && constraint_.after_reasoning; }
  bool prefix_compatible(const std::string& piece) const;  // opening text + piece vs the reasoning start
  void start_grammar(size_t from);  // on output_[from...]
  void after_text_added(size_t old_size);
  const std::vector<uint8_t>& full_mask();

  const tokenizer::Tokenizer& tokenizer_;
  const grammar::TokenIndex* index_;
  OutputConstraint constraint_;
  ReasoningRules reasoning_;
  bool enabled_ = false;
  std::string output_;          // the output so far, control tokens written out
  size_t scan_from_ = 0;        // where the next search for a marker or trigger starts
  Grammar grammar_state_ = Grammar::Off;
  std::optional<grammar::Matcher> matcher_;
  std::optional<grammar::MaskCache> masks_;
  // Before anything is known: the output may still open the reasoning block (its text so far is a
  // prefix of the start marker) while a non-lazy grammar after reasoning must also be able to start.
  bool may_open_reasoning_ = false;
  bool grammar_alive_ = true;   // ... and the grammar still matches the opening text
  bool in_reasoning_ = false;
  int64_t reasoning_tokens_ = 0;
  std::vector<TokenId> forcing_;  // budget spent: these tokens next
  size_t forced_done_ = 0;
  std::vector<uint8_t> union_mask_;
  sample::TokenFilter filter_;
};

}  // namespace okapi::runtime
