#include "server/scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.hpp"

namespace okapi::server {

using runtime::now_seconds;

namespace {

size_t common_prefix(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

Scheduler::Scheduler(runtime::Engine& engine, const SchedulerOptions& options) : engine_(engine), options_(options) {
  if (options_.n_slots < 1) throw_error("the server needs at least one slot, got -np {}", options_.n_slots);
  if (options_.batch_size < 1) throw_error("-b must be at least 1, got {}", options_.batch_size);
  slots_.resize(static_cast<size_t>(options_.n_slots));
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].id = static_cast<int>(i);
    // Each slot's context (-c / -np) is what meets the trained context, not -c's total.
    slots_[i].kv = engine_.make_kv(options_.n_ctx_per_slot, {.batch = options_.batch_size, .flag = "-c/-np"});
    if (options_.make_drafter) slots_[i].drafter = options_.make_drafter(static_cast<int>(i));
  }
  if (options_.draft_min > options_.draft_max)
    throw_error("--draft-min {} is more than --draft-max {}", options_.draft_min, options_.draft_max);
  counters_.kv_cells_total = options_.n_ctx_per_slot * options_.n_slots;
  // A row per slot, plus a verification row per draft.
  const size_t drafts = options_.make_drafter ? static_cast<size_t>(std::max(options_.draft_max, 0)) : 0;
  logits_.resize(static_cast<size_t>(engine_.model().n_vocab()) * slots_.size() * (1 + drafts));
  worker_ = std::thread([this] { run_loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::shared_ptr<Job> Scheduler::submit(JobRequest request) {
  if (request.prompt.empty()) throw_error("the prompt has no tokens");
  if (static_cast<int64_t>(request.prompt.size()) > options_.n_ctx_per_slot)
    throw_error("the prompt has {} tokens but a slot's context holds {}", request.prompt.size(),
                options_.n_ctx_per_slot);
  for (const TokenId id : request.prompt)
    if (id < 0 || id >= engine_.model().n_vocab())
      throw_error("token id {} is out of range [0, {})", id, engine_.model().n_vocab());
  auto job = std::make_shared<Job>(std::move(request));
  {
    std::lock_guard lock(mutex_);
    // Queued jobs first fill the idle slots (at the worker's next step); max_queue more may wait.
    const auto idle = static_cast<size_t>(
        std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.state == SlotState::Idle; }));
    if (stopping_ || queue_.size() >= idle + options_.max_queue) throw QueueFull();
    queue_.emplace_back(job, now_seconds());
    counters_.queued = static_cast<int64_t>(queue_.size());
  }
  wake_.notify_all();
  return job;
}

SchedulerCounters Scheduler::counters() const {
  std::lock_guard lock(mutex_);
  SchedulerCounters c = counters_;
  c.busy_slots = 0;
  c.kv_cells_used = 0;
  for (const auto& s : slots_) {
    c.busy_slots += s.state != SlotState::Idle ? 1 : 0;
    c.kv_cells_used += static_cast<int64_t>(s.cached.size());
  }
  c.queued = static_cast<int64_t>(queue_.size());
  return c;
}

int64_t Scheduler::active_jobs() const {
  const auto c = counters();
  return c.busy_slots + c.queued;
}

size_t Scheduler::slot_kv_bytes() const { return slots_.empty() ? 0 : slots_.front().kv->bytes(); }

nlohmann::ordered_json Scheduler::slots_json() const {
  std::lock_guard lock(mutex_);
  auto out = nlohmann::ordered_json::array();
  for (const auto& s : slots_) {
    nlohmann::ordered_json j;
    j["id"] = s.id;
    j["n_ctx"] = options_.n_ctx_per_slot;
    j["is_processing"] = s.state != SlotState::Idle;
    j["state"] = s.state == SlotState::Idle ? "idle" : s.state == SlotState::Prompt ? "prompt" : "generating";
    j["n_cached_tokens"] = s.cached.size();
    if (s.job) {
      j["n_prompt_tokens"] = s.job->request().prompt.size();
      j["n_prompt_tokens_processed"] = s.prompt_done;
      j["n_decoded"] = s.generated;
    }
    out.push_back(std::move(j));
  }
  return out;
}

void Scheduler::run_loop() {
  while (true) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        if (stopping_ || !queue_.empty()) return true;
        return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.state != SlotState::Idle; });
      });
      if (stopping_) break;
      admit_waiting();
    }
    step();
  }
  std::lock_guard lock(mutex_);
  for (auto& slot : slots_)
    if (slot.state != SlotState::Idle) finish(slot, FinishReason::Cancelled);
  for (auto& [job, submitted] : queue_) job->push({.text = {}, .logprobs = {}, .finish = FinishReason::Cancelled, .error = {}});
  queue_.clear();
}

bool Scheduler::admit_waiting() {
  bool admitted = false;
  while (!queue_.empty()) {
    auto [job, submitted] = queue_.front();
    if (job->cancelled()) {
      queue_.pop_front();
      job->push({.text = {}, .logprobs = {}, .finish = FinishReason::Cancelled, .error = {}});
      ++counters_.requests_cancelled;
      continue;
    }
    // The idle slot sharing the longest prefix with the prompt; among equals, the least recently used.
    Slot* best = nullptr;
    size_t best_prefix = 0;
    for (auto& s : slots_) {
      if (s.state != SlotState::Idle) continue;
      const size_t prefix = common_prefix(s.cached, job->request().prompt);
      if (!best || prefix > best_prefix || (prefix == best_prefix && s.last_used < best->last_used)) {
        best = &s;
        best_prefix = prefix;
      }
    }
    if (!best) break;
    queue_.pop_front();
    start_job(*best, std::move(job), submitted);
    admitted = true;
  }
  counters_.queued = static_cast<int64_t>(queue_.size());
  return admitted;
}

void Scheduler::start_job(Slot& slot, std::shared_ptr<Job> job, double submitted) {
  const auto& request = job->request();
  // Keep at least one prompt token to run: its logits give the first generated token.
  const size_t keep = std::min(common_prefix(slot.cached, request.prompt), request.prompt.size() - 1);
  slot.kv->truncate(static_cast<int64_t>(keep));
  slot.cached.resize(keep);
  slot.prompt_done = keep;
  slot.job = std::move(job);
  slot.state = SlotState::Prompt;
  slot.sampler.emplace(request.sampling);
  for (const TokenId id : request.prompt) slot.sampler->accept(id);
  slot.decoder.emplace(engine_.tokenizer());
  slot.stops = runtime::StopStrings(request.stop);
  if (slot.drafter) {
    slot.drafter->reset();
    slot.draft_length.emplace(options_.draft_max, options_.draft_min);
  }
  slot.drafts.clear();
  slot.generated = 0;
  slot.submitted = submitted;
  slot.started = now_seconds();
  slot.first_token = 0;
  slot.stats = {};
  slot.stats.slot = slot.id;
  slot.stats.prompt_tokens = static_cast<int64_t>(request.prompt.size());
  slot.stats.cached_tokens = static_cast<int64_t>(keep);
  slot.stats.queued_ms = (slot.started - submitted) * 1e3;
  slot.job->update_stats(slot.stats);
  counters_.cached_prompt_tokens += static_cast<int64_t>(keep);
}

void Scheduler::step() {
  struct Part {
    Slot* slot;
    size_t count;
    bool wants_logits;
  };
  std::vector<Part> parts;
  std::vector<int32_t> tokens, positions;
  std::vector<kv::KvStore*> stores;
  std::vector<uint8_t> want;
  int64_t prompt_tokens = 0;
  draft_for_decoding_slots();
  {
    std::lock_guard lock(mutex_);
    for (auto& slot : slots_)
      if (slot.state != SlotState::Idle && slot.job->cancelled()) finish(slot, FinishReason::Cancelled);
    // Decoding slots first (one token each, with its drafts): a long prompt never stalls running streams.
    for (auto& slot : slots_) {
      if (slot.state != SlotState::Decode) continue;
      const auto position = static_cast<int32_t>(slot.cached.size());
      tokens.push_back(slot.pending);
      for (const auto& d : slot.drafts) tokens.push_back(d.id);
      for (size_t i = 0; i <= slot.drafts.size(); ++i) {
        positions.push_back(position + static_cast<int32_t>(i));
        stores.push_back(slot.kv.get());
        want.push_back(1);
      }
      parts.push_back({&slot, 1 + slot.drafts.size(), true});
    }
    int64_t budget = std::max<int64_t>(options_.batch_size - static_cast<int64_t>(tokens.size()), 0);
    for (auto& slot : slots_) {
      if (slot.state != SlotState::Prompt || budget == 0) continue;
      const auto& prompt = slot.job->request().prompt;
      const size_t count = std::min<size_t>(prompt.size() - slot.prompt_done, static_cast<size_t>(budget));
      for (size_t i = 0; i < count; ++i) {
        tokens.push_back(prompt[slot.prompt_done + i]);
        positions.push_back(static_cast<int32_t>(slot.prompt_done + i));
        stores.push_back(slot.kv.get());
        want.push_back(0);
      }
      const bool last = slot.prompt_done + count == prompt.size();
      if (last) want.back() = 1;
      parts.push_back({&slot, count, last});
      budget -= static_cast<int64_t>(count);
      prompt_tokens += static_cast<int64_t>(count);
    }
  }
  if (tokens.empty()) return;

  const double start = now_seconds();
  std::string error;
  try {
    engine_.model().forward_sequences(engine_.ops(), stores, tokens, positions, want, logits_.data());
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double seconds = now_seconds() - start;

  std::lock_guard lock(mutex_);
  ++counters_.forward_passes;
  const double share = seconds / static_cast<double>(tokens.size());
  counters_.prompt_seconds += share * static_cast<double>(prompt_tokens);
  counters_.generation_seconds += share * static_cast<double>(static_cast<int64_t>(tokens.size()) - prompt_tokens);
  counters_.prompt_tokens += prompt_tokens;
  size_t row = 0;
  const auto n_vocab = static_cast<size_t>(engine_.model().n_vocab());
  for (const Part& part : parts) {
    Slot& slot = *part.slot;
    if (!error.empty()) {
      finish(slot, FinishReason::Error, error);
      continue;
    }
    if (slot.state == SlotState::Decode) {
      slot.cached.push_back(slot.pending);
      verify_round(slot, logits_.data() + row * n_vocab, seconds);
      row += part.count;
      continue;
    }
    const auto& prompt = slot.job->request().prompt;
    slot.cached.insert(slot.cached.end(), prompt.begin() + static_cast<std::ptrdiff_t>(slot.prompt_done),
                       prompt.begin() + static_cast<std::ptrdiff_t>(slot.prompt_done + part.count));
    slot.prompt_done += part.count;
    if (part.wants_logits) take_token(slot, logits_.data() + row++ * n_vocab);
  }
}

void Scheduler::draft_for_decoding_slots() {
  std::vector<TokenId> context;
  for (auto& slot : slots_) {
    slot.drafts.clear();
    slot.draft_round = {};
    if (slot.state != SlotState::Decode || !slot.drafter || slot.job->cancelled()) continue;
    const JobRequest& request = slot.job->request();
    // Drafts follow the pending token, inside the slot's context and the request's limit.
    const auto position = static_cast<int64_t>(slot.cached.size());
    int64_t room = options_.n_ctx_per_slot - 1 - position;
    if (request.max_tokens >= 0) room = std::min(room, request.max_tokens - slot.generated - 1);
    const int k = slot.draft_length->next(static_cast<int>(std::clamp<int64_t>(room, 0, options_.draft_max)));
    slot.draft_round.requested = k;
    if (k <= 0) continue;
    const double start = now_seconds();
    context.assign(slot.cached.begin(), slot.cached.end());
    context.push_back(slot.pending);
    try {
      slot.drafts = slot.drafter->draft(context, k, *slot.sampler);
    } catch (const std::exception&) {
      slot.drafts.clear();  // a drafter that fails only costs its speed-up; verification decides the text
    }
    slot.draft_round.draft_seconds = now_seconds() - start;
    slot.draft_round.pause_seconds = runtime::catch_up_after_pause_seconds(*slot.drafter);
    if (static_cast<int>(slot.drafts.size()) > k) slot.drafts.resize(static_cast<size_t>(k));
    if (static_cast<int>(slot.drafts.size()) < options_.draft_min) slot.drafts.clear();
  }
}

void Scheduler::verify_round(Slot& slot, const float* rows, double round_seconds) {
  const auto n_vocab = static_cast<size_t>(engine_.model().n_vocab());
  const auto row = [&](size_t i) { return rows + i * n_vocab; };
  const std::vector<runtime::DraftToken> drafts = std::move(slot.drafts);
  slot.drafts.clear();
  size_t accepted = 0;
  if (drafts.empty()) {
    take_token(slot, row(0));
  } else {
    bool going = true;
    // Counted before the tokens are emitted: the job's last stats go out when it finishes.
    slot.stats.drafted_tokens += static_cast<int64_t>(drafts.size());
    counters_.drafted_tokens += static_cast<int64_t>(drafts.size());
    for (size_t i = 0; i < drafts.size() && going; ++i) {
      const auto dist = slot.sampler->distribution(std::span<const float>(row(i), n_vocab));
      const runtime::Verdict verdict = runtime::verify_draft(dist, drafts[i], *slot.sampler);
      if (verdict.accepted) {
        ++slot.stats.accepted_tokens;
        ++counters_.accepted_tokens;
      }
      going = emit_token(slot, verdict.token, row(i));
      if (!going) break;
      if (!verdict.accepted) {
        slot.pending = verdict.token;
        break;
      }
      slot.cached.push_back(verdict.token);  // its K/V, written by this pass, stays
      ++accepted;
    }
    // Every draft passed: the target's own next token comes free from the last row.
    if (going && accepted == drafts.size()) {
      const TokenId id = slot.sampler->sample(std::span<const float>(row(drafts.size()), n_vocab));
      if (emit_token(slot, id, row(drafts.size()))) slot.pending = id;
    }
    // Rejected drafts' cells are forgotten; the pending token has not been run yet.
    slot.kv->truncate(static_cast<int64_t>(slot.cached.size()));
  }
  if (slot.draft_length && slot.state != SlotState::Idle) {
    runtime::DraftRound round = slot.draft_round;
    round.drafted = static_cast<int>(drafts.size());
    round.accepted = static_cast<int>(accepted);
    round.verify_seconds = round_seconds;
    slot.draft_length->record(round);
  }
}

TokenLogprob Scheduler::logprobs_of(const float* logits, TokenId chosen, int top) const {
  const auto n = static_cast<size_t>(engine_.model().n_vocab());
  const float max = *std::max_element(logits, logits + n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - max));
  const double log_norm = static_cast<double>(max) + std::log(sum);
  const auto logprob = [&](size_t i) { return static_cast<float>(static_cast<double>(logits[i]) - log_norm); };
  const auto& tok = engine_.tokenizer();
  TokenLogprob out;
  out.id = chosen;
  out.token = tok.token_to_piece(chosen);
  out.logprob = logprob(static_cast<size_t>(chosen));
  if (top > 0) {
    std::vector<int32_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0);
    const auto k = std::min<size_t>(static_cast<size_t>(top), n);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t i = 0; i < k; ++i)
      out.top.emplace_back(tok.token_to_piece(ids[i]), logprob(static_cast<size_t>(ids[i])));
  }
  return out;
}

bool Scheduler::take_token(Slot& slot, const float* logits) {
  const auto n_vocab = static_cast<size_t>(engine_.model().n_vocab());
  const TokenId id = slot.sampler->sample(std::span<const float>(logits, n_vocab));
  if (!emit_token(slot, id, logits)) return false;
  slot.pending = id;
  slot.state = SlotState::Decode;
  return true;
}

bool Scheduler::emit_token(Slot& slot, TokenId id, const float* logits) {
  const JobRequest& request = slot.job->request();
  const double now = now_seconds();
  if (slot.state == SlotState::Prompt) {
    slot.first_token = now;
    slot.stats.prompt_ms = (now - slot.started) * 1e3;
  }
  slot.sampler->accept(id);
  ++slot.generated;
  ++counters_.generated_tokens;
  JobEvent event;
  if (request.top_logprobs >= 0) event.logprobs.push_back(logprobs_of(logits, id, request.top_logprobs));
  slot.stats.completion_tokens = slot.generated;
  slot.stats.predicted_ms = (now - slot.first_token) * 1e3;
  const auto& vocab = engine_.tokenizer().vocab();
  if (!request.ignore_eos && (id == vocab.eos || id == vocab.eot)) {
    slot.job->push(std::move(event));
    finish(slot, FinishReason::Stop);
    return false;
  }
  event.text = slot.stops.push(slot.decoder->push(id));
  slot.job->push(std::move(event));
  if (slot.stops.matched()) {
    finish(slot, FinishReason::Stop);
    return false;
  }
  const bool limit = request.max_tokens >= 0 && slot.generated >= request.max_tokens;
  // The token would run at position cached.size(): past the slot's context, generation ends.
  if (limit || static_cast<int64_t>(slot.cached.size()) >= options_.n_ctx_per_slot) {
    finish(slot, FinishReason::Length);
    return false;
  }
  slot.job->update_stats(slot.stats);
  return true;
}

void Scheduler::finish(Slot& slot, FinishReason reason, const std::string& error) {
  JobEvent last;
  if (reason == FinishReason::Stop || reason == FinishReason::Length) {
    last.text = slot.stops.push(slot.decoder->flush());
    last.text += slot.stops.flush();
    ++counters_.requests_finished;
  } else if (reason == FinishReason::Cancelled) {
    ++counters_.requests_cancelled;
  }
  last.finish = reason;
  last.error = error;
  if (slot.first_token > 0) slot.stats.predicted_ms = (now_seconds() - slot.first_token) * 1e3;
  slot.job->update_stats(slot.stats);
  slot.job->push(std::move(last));
  if (reason == FinishReason::Error) {
    // The cache may hold part of a failed pass: forget it.
    slot.kv->truncate(0);
    slot.cached.clear();
  }
  slot.job.reset();
  slot.sampler.reset();
  slot.decoder.reset();
  slot.state = SlotState::Idle;
  slot.last_used = ++step_count_;
}

}  // namespace okapi::server
