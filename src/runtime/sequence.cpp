#include "runtime/sequence.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/engine.hpp"

namespace okapi::runtime {

Sequence::Sequence(const tokenizer::Tokenizer& tokenizer, int64_t n_vocab, SequenceRequest request,
                   SequenceCache cache, DraftSettings drafting, int slot, double submitted,
                   const grammar::TokenIndex* token_index)
    : tokenizer_(tokenizer),
      n_vocab_(static_cast<size_t>(n_vocab)),
      request_(std::move(request)),
      cache_(cache),
      drafting_(drafting),
      sampler_(request_.sampling),
      decoder_(tokenizer),
      stops_(request_.stop),
      prompt_done_(cache.tokens.size()) {
  for (const TokenId id : request_.prompt) sampler_.accept(id);
  auto gate = std::make_unique<OutputGate>(tokenizer_, token_index, request_.constraint, request_.reasoning);
  if (gate->enabled()) {
    gate_ = std::move(gate);
    // Drafts are verified against the unconstrained distribution: not under a grammar or budget.
    drafting_.drafter = nullptr;
  }
  preserved_ = request_.preserved_tokens;
  std::sort(preserved_.begin(), preserved_.end());
  if (drafting_.drafter) {
    drafting_.drafter->reset();
    draft_length_.emplace(drafting_.draft_max, drafting_.draft_min);
  }
  started_ = now_seconds();
  stats_.slot = slot;
  stats_.prompt_tokens = static_cast<int64_t>(request_.prompt.size());
  stats_.cached_tokens = static_cast<int64_t>(prompt_done_);
  stats_.queued_seconds = started_ - submitted;
}

std::vector<TokenId> tokenize_prompt(const tokenizer::Tokenizer& tokenizer, std::string_view prompt) {
  tokenizer::EncodeOptions options;
  options.add_special = true;
  options.parse_special = true;  // as llama-cli: "<s>" in a prompt is the BOS token
  return tokenizer.encode(prompt, options);
}

bool Sequence::is_end_of_generation(TokenId id) const {
  const tokenizer::Vocab& vocab = tokenizer_.vocab();
  return id == vocab.eos || id == vocab.eot;
}

void Sequence::draft() {
  drafts_.clear();
  draft_round_ = {};
  if (state_ != State::Decode || !drafting_.drafter) return;
  // Drafts follow the pending token, inside the context and the request's limit.
  const auto position = static_cast<int64_t>(cache_.tokens.size());
  int64_t room = cache_.kv.n_ctx() - 1 - position;
  if (request_.max_tokens >= 0) room = std::min(room, request_.max_tokens - stats_.generated_tokens - 1);
  const int k = draft_length_->next(static_cast<int>(std::clamp<int64_t>(room, 0, drafting_.draft_max)));
  draft_round_.requested = k;
  if (k <= 0) return;
  const double start = now_seconds();
  context_.assign(cache_.tokens.begin(), cache_.tokens.end());
  context_.push_back(pending_);
  try {
    drafts_ = drafting_.drafter->draft(context_, k, sampler_);
  } catch (const std::exception&) {
    drafts_.clear();  // a drafter that fails only costs its speed-up; verification decides the text
  }
  draft_round_.draft_seconds = now_seconds() - start;
  stats_.draft_seconds += draft_round_.draft_seconds;
  draft_round_.pause_seconds = catch_up_after_pause_seconds(*drafting_.drafter);
  if (static_cast<int>(drafts_.size()) > k) drafts_.resize(static_cast<size_t>(k));
  if (static_cast<int>(drafts_.size()) < drafting_.draft_min) drafts_.clear();
}

Sequence::Inputs Sequence::next_inputs(int64_t budget) {
  Inputs in;
  inputs_.clear();
  if (state_ == State::Decode) {
    inputs_.push_back(pending_);
    for (const auto& d : drafts_) inputs_.push_back(d.id);
    in.first_position = static_cast<int32_t>(cache_.tokens.size());
    in.all_rows = true;
  } else if (state_ == State::Prompt && budget > 0) {
    const auto& prompt = request_.prompt;
    const size_t count = std::min<size_t>(prompt.size() - prompt_done_, static_cast<size_t>(budget));
    inputs_.assign(prompt.begin() + static_cast<std::ptrdiff_t>(prompt_done_),
                   prompt.begin() + static_cast<std::ptrdiff_t>(prompt_done_ + count));
    in.first_position = static_cast<int32_t>(prompt_done_);
    in.last_row = prompt_done_ + count == prompt.size();
    in.prompt = true;
  }
  in.tokens = inputs_;
  return in;
}

void Sequence::accept(const float* rows, double pass_seconds, std::vector<SequenceEvent>& events) {
  if (state_ == State::Decode) {
    ++stats_.decode_passes;
    cache_.tokens.push_back(pending_);
    verify(rows, pass_seconds, events);
    return;
  }
  if (state_ != State::Prompt || inputs_.empty()) return;
  cache_.tokens.insert(cache_.tokens.end(), inputs_.begin(), inputs_.end());
  prompt_done_ += inputs_.size();
  inputs_.clear();
  if (request_.report_progress) {
    SequenceEvent progress;
    progress.prompt_done = static_cast<int64_t>(prompt_done_);
    progress.prompt_total = static_cast<int64_t>(request_.prompt.size());
    events.push_back(std::move(progress));
  }
  if (prompt_done_ == request_.prompt.size()) finish_prompt(rows, events);
}

void Sequence::finish_prompt(const float* row, std::vector<SequenceEvent>& events) {
  if (drafting_.drafter) {
    // The drafter's prompt pass belongs to the prompt's time, as the target's does.
    const double start = now_seconds();
    try {
      drafting_.drafter->prefill(request_.prompt);
    } catch (const std::exception&) {
      drafting_.drafter->reset();  // it catches up when it drafts, or fails then and drafts nothing
    }
    stats_.draft_prompt_seconds = now_seconds() - start;
  }
  prompt_end_ = now_seconds();
  stats_.prompt_seconds = prompt_end_ - started_;
  if (request_.max_tokens == 0) {
    stop(StopReason::TokenLimit, events);
    return;
  }
  TokenId id = 0;
  try {
    id = choose(row);
  } catch (const Error& e) {
    stop(StopReason::Error, events, e.what());
    return;
  }
  if (!emit(id, row, events)) return;
  pending_ = id;
  state_ = State::Decode;
}

void Sequence::verify(const float* rows, double pass_seconds, std::vector<SequenceEvent>& events) {
  const auto row = [&](size_t i) { return rows + i * n_vocab_; };
  const std::vector<DraftToken> drafts = std::move(drafts_);
  drafts_.clear();
  size_t accepted = 0;
  if (drafts.empty()) {
    TokenId id = 0;
    try {
      id = choose(row(0));
    } catch (const Error& e) {
      stop(StopReason::Error, events, e.what());
      return;
    }
    if (emit(id, row(0), events)) pending_ = id;
  } else {
    bool going = true;
    stats_.drafted_tokens += static_cast<int64_t>(drafts.size());
    for (size_t i = 0; i < drafts.size() && going; ++i) {
      const auto dist = sampler_.distribution(std::span<const float>(row(i), n_vocab_));
      const Verdict verdict = verify_draft(dist, drafts[i], sampler_);
      if (verdict.accepted) ++stats_.accepted_tokens;
      going = emit(verdict.token, row(i), events);
      if (!going) break;
      if (!verdict.accepted) {
        pending_ = verdict.token;
        break;
      }
      cache_.tokens.push_back(verdict.token);  // its K/V, written by this pass, stays
      ++accepted;
    }
    // Every draft passed: the target's own next token comes free from the last row.
    if (going && accepted == drafts.size()) {
      const TokenId id = sampler_.sample(std::span<const float>(row(drafts.size()), n_vocab_));
      if (emit(id, row(drafts.size()), events)) pending_ = id;
    }
    // Rejected drafts' cells are forgotten; the pending token has not been run yet.
    cache_.kv.truncate(static_cast<int64_t>(cache_.tokens.size()));
  }
  if (draft_length_ && state_ != State::Finished) {
    DraftRound round = draft_round_;
    round.drafted = static_cast<int>(drafts.size());
    round.accepted = static_cast<int>(accepted);
    round.verify_seconds = pass_seconds;
    draft_length_->record(round);
  }
}

TokenId Sequence::choose(const float* row) {
  const std::span<const float> logits(row, n_vocab_);
  if (!gate_) return sampler_.sample(logits);
  if (const auto forced = gate_->forced()) return *forced;
  if (gate_->constrains()) return sampler_.sample(logits, gate_->filter());
  return sampler_.sample(logits);
}

bool Sequence::emit(TokenId id, const float* logits, std::vector<SequenceEvent>& events) {
  sampler_.accept(id);
  if (gate_) gate_->accept(id);
  ++stats_.generated_tokens;
  stats_.generation_seconds = now_seconds() - prompt_end_;
  SequenceEvent event;
  event.tokens.push_back(id);
  if (request_.top_logprobs >= 0) event.logprobs.push_back(logprobs_of(logits, id));
  if (!request_.ignore_eos && is_end_of_generation(id)) {
    events.push_back(std::move(event));
    stop(StopReason::EndOfGeneration, events);
    return false;
  }
  if (std::binary_search(preserved_.begin(), preserved_.end(), id)) {
    // A marker a parser reads: its text goes out even though it is a control token.
    event.text = stops_.push(decoder_.flush() + tokenizer_.token_to_piece(id, true));
  } else {
    event.text = stops_.push(decoder_.push(id));
  }
  events.push_back(std::move(event));
  if (stops_.matched()) {
    stop(StopReason::StopString, events);
    return false;
  }
  if (request_.max_tokens >= 0 && stats_.generated_tokens >= request_.max_tokens) {
    stop(StopReason::TokenLimit, events);
    return false;
  }
  // The token would run at position tokens.size(): past the context, generation ends.
  if (static_cast<int64_t>(cache_.tokens.size()) >= cache_.kv.n_ctx()) {
    stop(StopReason::ContextFull, events);
    return false;
  }
  return true;
}

void Sequence::stop(StopReason reason, std::vector<SequenceEvent>& events, const std::string& error,
                    Setting error_setting) {
  if (state_ == State::Finished) return;
  SequenceEvent last;
  if (reason != StopReason::Error) {
    // Text held back by the decoder (an unfinished UTF-8 character) or by the stop strings.
    last.text = stops_.push(decoder_.flush());
    last.text += stops_.flush();
  }
  last.stop = reason;
  if (reason == StopReason::StopString) last.stop_string = stops_.matched_stop();
  last.error = error;
  last.error_setting = error_setting;
  if (prompt_end_ > 0) stats_.generation_seconds = now_seconds() - prompt_end_;
  events.push_back(std::move(last));
  state_ = State::Finished;
}

TokenLogprob Sequence::logprobs_of(const float* logits, TokenId chosen) const {
  const size_t n = n_vocab_;
  const float max = *std::max_element(logits, logits + n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - max));
  const double log_norm = static_cast<double>(max) + std::log(sum);
  const auto logprob = [&](size_t i) { return static_cast<float>(static_cast<double>(logits[i]) - log_norm); };
  TokenLogprob out;
  out.id = chosen;
  out.token = tokenizer_.token_to_piece(chosen);
  out.logprob = logprob(static_cast<size_t>(chosen));
  if (request_.top_logprobs > 0) {
    std::vector<int32_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0);
    const auto k = std::min<size_t>(static_cast<size_t>(request_.top_logprobs), n);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t i = 0; i < k; ++i)
      out.top.emplace_back(tokenizer_.token_to_piece(ids[i]), logprob(static_cast<size_t>(ids[i])));
  }
  return out;
}

}  // namespace okapi::runtime
