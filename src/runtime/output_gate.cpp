#include "runtime/output_gate.hpp"

#include <algorithm>

namespace okapi::runtime {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skip_spaces(const std::string& text, size_t from) {
  while (from < text.size() && is_space(text[from])) ++from;
  return from;
}

}  // namespace

OutputGate::OutputGate(const tokenizer::Tokenizer& tokenizer, const grammar::TokenIndex* index,
                       const OutputConstraint& constraint, const ReasoningRules& reasoning)
    : tokenizer_(tokenizer), index_(index), constraint_(constraint), reasoning_(reasoning) {
  const bool has_reasoning = !reasoning_.end.empty();
  if (!has_reasoning) reasoning_.forced_open = false;
  enabled_ = constraint_.grammar != nullptr || (has_reasoning && reasoning_.budget >= 0);
  if (constraint_.grammar && !index_) throw_error("a grammar needs the vocabulary's token index");
  in_reasoning_ = reasoning_.forced_open;
  // The block opens only at the very start of the output.
  may_open_reasoning_ = has_reasoning && !reasoning_.forced_open && !reasoning_.start.empty();
  if (constraint_.grammar) {
    masks_.emplace(*index_);
    const bool lazy = !constraint_.triggers.empty() || !constraint_.start_triggers.empty();
    const bool wait_for_reasoning = constraint_.after_reasoning && has_reasoning;
    if (lazy || (wait_for_reasoning && in_reasoning_)) {
      grammar_state_ = Grammar::Waiting;
    } else {
      // Active from the first byte; with a reasoning block that may still open, both stay possible
      // until the opening text decides.
      grammar_state_ = Grammar::Active;
      matcher_.emplace(constraint_.grammar);
    }
  }
  if (in_reasoning_ && reasoning_.budget == 0) {
    tokenizer::EncodeOptions options;
    options.parse_special = true;
    options.add_special = false;
    forcing_ = tokenizer_.encode(reasoning_.budget_message + reasoning_.end, options);
  }
  // Valid while constrains(); a gate whose grammar has ended answers "anything".
  filter_.allows = [this](TokenId id) {
    if (!matcher_) return true;
    const bool by_grammar = grammar_alive_ && index_->allows(*matcher_, id);
    if (by_grammar || !opening_or_grammar()) return by_grammar;
    return prefix_compatible(index_->piece(id));
  };
  filter_.mask = [this]() -> const std::vector<uint8_t>& { return full_mask(); };
}

std::optional<TokenId> OutputGate::forced() const {
  if (forced_done_ < forcing_.size()) return forcing_[forced_done_];
  return std::nullopt;
}

bool OutputGate::constrains() const {
  if (forced()) return false;
  return grammar_state_ == Grammar::Active && matcher_.has_value() && (grammar_alive_ || opening_or_grammar());
}

// The block opens at the output's first byte (blank space first would let a constrained output
// stall in blank space forever).
bool OutputGate::prefix_compatible(const std::string& piece) const {
  // output_ + piece and the start marker agree on their common length (no string is built: the
  // whole-vocabulary mask calls this for every token).
  const std::string_view start = reasoning_.start;
  const size_t head = std::min(output_.size(), start.size());
  if (start.compare(0, head, output_, 0, head) != 0) return false;
  if (output_.size() >= start.size()) return true;
  const std::string_view rest = start.substr(output_.size());
  const size_t n = std::min(rest.size(), piece.size());
  return rest.compare(0, n, std::string_view(piece).substr(0, n)) == 0;
}

const std::vector<uint8_t>& OutputGate::full_mask() {
  if (!matcher_) {
    union_mask_.assign(index_ ? index_->n_vocab() : 0, 1);
    return union_mask_;
  }
  if (!opening_or_grammar()) return masks_->mask(*matcher_);
  union_mask_.assign(index_->n_vocab(), 0);
  if (grammar_alive_) union_mask_ = masks_->mask(*matcher_);
  for (size_t id = 0; id < union_mask_.size(); ++id)
    if (!union_mask_[id] && !index_->piece(static_cast<TokenId>(id)).empty() &&
        prefix_compatible(index_->piece(static_cast<TokenId>(id))))
      union_mask_[id] = 1;
  return union_mask_;
}

void OutputGate::start_grammar(size_t from) {
  matcher_.emplace(constraint_.grammar);
  grammar_alive_ = true;
  grammar_state_ = Grammar::Active;
  if (!matcher_->accept(std::string_view(output_).substr(from))) {
    // The trigger text does not begin a valid match: the output stays free.
    grammar_state_ = Grammar::Done;
    matcher_.reset();
  }
}

bool OutputGate::accept(TokenId id) {
  if (forced_done_ < forcing_.size() && forcing_[forced_done_] == id) ++forced_done_;
  const tokenizer::Vocab& vocab = tokenizer_.vocab();
  const bool end_of_generation = id == vocab.eos || id == vocab.eot;
  const std::string piece = end_of_generation ? std::string()
                            : index_                ? index_->piece(id)
                                                    : tokenizer_.token_to_piece(id, true);
  bool ok = true;
  if (grammar_state_ == Grammar::Active && matcher_) {
    if (grammar_alive_) grammar_alive_ = index_->advance(*matcher_, id);
    if (!grammar_alive_ && !opening_or_grammar()) {
      ok = false;  // not allowed by the mask: only a token chosen without it gets here
      grammar_state_ = Grammar::Done;
      matcher_.reset();
    }
  }
  const size_t old_size = output_.size();
  output_ += piece;
  after_text_added(old_size);
  return ok;
}

void OutputGate::after_text_added(size_t old_size) {
  const std::string& start = reasoning_.start;
  const std::string& end = reasoning_.end;
  if (may_open_reasoning_) {
    const std::string_view opening = output_;
    if (opening.size() >= start.size() && opening.substr(0, start.size()) == start) {
      may_open_reasoning_ = false;
      in_reasoning_ = true;
      scan_from_ = start.size();
      old_size = scan_from_;
      // A grammar that was following the opening waits for the block's end.
      if (constraint_.grammar && constraint_.after_reasoning && grammar_state_ == Grammar::Active) {
        grammar_state_ = Grammar::Waiting;
        matcher_.reset();
        grammar_alive_ = true;
      }
    } else if (!opening.empty() && std::string_view(start).substr(0, opening.size()) != opening) {
      may_open_reasoning_ = false;  // no reasoning block: the output is the answer
      if (grammar_state_ == Grammar::Active && !grammar_alive_) {
        grammar_state_ = Grammar::Done;
        matcher_.reset();
      }
    } else {
      return;  // still undecided
    }
  }
  if (in_reasoning_) {
    ++reasoning_tokens_;
    const size_t from = std::max(scan_from_, old_size >= end.size() ? old_size - end.size() + 1 : 0);
    const size_t found = output_.find(end, from);
    if (found == std::string::npos) {
      if (reasoning_.budget >= 0 && reasoning_tokens_ >= reasoning_.budget && forcing_.empty()) {
        tokenizer::EncodeOptions options;
        options.parse_special = true;
    options.add_special = false;
        forcing_ = tokenizer_.encode(reasoning_.budget_message + end, options);
        forced_done_ = 0;
      }
      return;
    }
    in_reasoning_ = false;
    forcing_.clear();
    forced_done_ = 0;
    scan_from_ = found + end.size();
    old_size = scan_from_;
    if (grammar_state_ == Grammar::Waiting && constraint_.triggers.empty() && constraint_.start_triggers.empty()) {
      start_grammar(skip_spaces(output_, scan_from_));
      return;
    }
  }
  if (grammar_state_ == Grammar::Waiting && !constraint_.triggers.empty()) {
    size_t longest = 0;
    for (const auto& t : constraint_.triggers) longest = std::max(longest, t.size());
    const size_t from = std::max(scan_from_, old_size >= longest ? old_size - longest + 1 : 0);
    size_t best = std::string::npos;
    for (const auto& t : constraint_.triggers) {
      if (t.empty()) continue;
      best = std::min(best, output_.find(t, from));
    }
    if (best != std::string::npos) start_grammar(best);
  }
  if (grammar_state_ == Grammar::Waiting && !constraint_.start_triggers.empty()) {
    // scan_from_ is where the answer begins (after the reasoning block, or 0).
    const size_t answer = skip_spaces(output_, scan_from_);
    for (const auto& t : constraint_.start_triggers) {
      if (!t.empty() && output_.compare(answer, t.size(), t) == 0) {
        start_grammar(answer);
        break;
      }
    }
  }
}

}  // namespace okapi::runtime
