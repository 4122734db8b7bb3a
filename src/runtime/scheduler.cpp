#include "runtime/scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/error.hpp"

namespace okapi::runtime {

namespace {

size_t common_prefix(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

Scheduler::Scheduler(Engine& engine, const SchedulerOptions& options) : engine_(engine), options_(options) {
  if (options_.n_slots < 1) throw_error_for(Setting::Slots, "a scheduler needs at least one slot, got {}", options_.n_slots);
  if (!(options_.slot_prompt_similarity >= 0 && options_.slot_prompt_similarity <= 1))
    throw_error("the slot prompt similarity is a fraction from 0 to 1, got {}", options_.slot_prompt_similarity);
  if (options_.batch_size < 1) throw_error_for(Setting::BatchSize, "a batch holds at least one token, got {}", options_.batch_size);
  if (options_.drafters && options_.drafters->options().draft_min > options_.drafters->options().draft_max)
    throw_error_for(Setting::DraftLength, "at least {} drafts a round were asked for, but at most {}", options_.drafters->options().draft_min,
                options_.drafters->options().draft_max);
  slots_.resize(static_cast<size_t>(options_.n_slots));
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    slot.id = static_cast<int>(i);
    slot.kv =
        engine_.make_kv(options_.n_ctx_per_slot, {.batch = options_.batch_size, .context = options_.context_setting});
    if (options_.drafters)
      slot.drafter = options_.drafters->make(*slot.kv, options_.drafter_seed + static_cast<uint32_t>(i));
  }
  options_.n_ctx_per_slot = slots_.front().kv->n_ctx();
  counters_.kv_cells_total = options_.n_ctx_per_slot * options_.n_slots;
  // A row per slot, plus a verification row per draft.
  const size_t drafts = options_.drafters ? static_cast<size_t>(std::max(options_.drafters->options().draft_max, 0)) : 0;
  logits_.resize(static_cast<size_t>(engine_.model().n_vocab()) * slots_.size() * (1 + drafts));
  fingerprint_ = model_fingerprint(engine_);
  if (options_.worker_thread) worker_ = std::thread([this] { run_loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::lock_guard lock(mutex_);
  for (auto& slot : slots_) {
    if (!slot.busy()) continue;
    slot.sequence->stop(StopReason::Interrupted, slot.events);
    deliver(slot);
  }
  std::vector<SequenceEvent> last(1);
  last.front().stop = StopReason::Interrupted;
  for (auto& [job, submitted] : queue_) job->push(last, job->stats());
  queue_.clear();
}

std::shared_ptr<Job> Scheduler::submit(SequenceRequest request) {
  if (request.prompt.empty()) throw_error("the prompt has no tokens");
  if (static_cast<int64_t>(request.prompt.size()) > options_.n_ctx_per_slot)
    throw_error_for(Setting::ContextLength, "the prompt has {} tokens but the context holds {}", request.prompt.size(), options_.n_ctx_per_slot);
  for (const TokenId id : request.prompt)
    if (id < 0 || id >= engine_.model().n_vocab())
      throw_error("token id {} is out of range [0, {})", id, engine_.model().n_vocab());
  if (request.slot >= options_.n_slots)
    throw_error_for(Setting::Slots, "slot {} does not exist: there are {}", request.slot, options_.n_slots);
  auto job = std::make_shared<Job>(std::move(request));
  {
    std::lock_guard lock(mutex_);
    // Queued jobs first fill the idle slots (at the next step); max_queue more may wait.
    const auto idle =
        static_cast<size_t>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.busy(); }));
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
    c.busy_slots += s.busy() ? 1 : 0;
    c.kv_cells_used += static_cast<int64_t>(s.cached.size());
  }
  c.queued = static_cast<int64_t>(queue_.size());
  return c;
}

int64_t Scheduler::active_jobs() const {
  const auto c = counters();
  return c.busy_slots + c.queued;
}

size_t Scheduler::slot_kv_bytes() const { return slots_.front().kv->bytes(); }

std::string_view Scheduler::slot_kv_type_name() const { return slots_.front().kv->type_name(); }

std::string_view Scheduler::drafter_name() const { return options_.drafters ? options_.drafters->name() : ""; }

nlohmann::ordered_json Scheduler::slots_json() const {
  std::lock_guard lock(mutex_);
  auto out = nlohmann::ordered_json::array();
  for (const auto& s : slots_) {
    nlohmann::ordered_json j;
    j["id"] = s.id;
    j["n_ctx"] = options_.n_ctx_per_slot;
    j["is_processing"] = s.busy();
    j["state"] = !s.busy() ? "idle" : s.sequence->decoding() ? "generating" : "prompt";
    j["n_cached_tokens"] = s.cached.size();
    if (s.busy()) {
      j["n_prompt_tokens"] = s.job->request().prompt.size();
      j["n_prompt_tokens_processed"] = s.sequence->prompt_done();
      j["n_decoded"] = s.sequence->stats().generated_tokens;
    }
    out.push_back(std::move(j));
  }
  return out;
}

template <typename Action>
auto Scheduler::with_idle_slot(int id, Action&& action) {
  if (id < 0 || id >= static_cast<int>(slots_.size())) throw SlotNotFound(id);
  Slot& slot = slots_[static_cast<size_t>(id)];
  {
    // The worker frees the slot when its job ends; a slot file waits for that (as llama-server
    // defers the task). Polled: a job's end does not signal anyone waiting here.
    std::unique_lock lock(mutex_);
    while (slot.busy() || slot.reserved) {
      if (stopping_) throw_error("the server is stopping");
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      lock.lock();
    }
    slot.reserved = true;
  }
  // Reserved and idle: the worker neither runs nor starts a job in it, so its cache is ours.
  struct Release {
    Scheduler& scheduler;
    Slot& slot;
    ~Release() {
      {
        std::lock_guard lock(scheduler.mutex_);
        slot.reserved = false;
      }
      scheduler.wake_.notify_all();
    }
  } release{*this, slot};
  return action(slot);
}

SlotFileStats Scheduler::save_slot(int id, const std::filesystem::path& path) {
  return with_idle_slot(id, [&](Slot& slot) {
    return write_slot_file(path, slot.cached, *slot.kv, fingerprint_, engine_.model().n_vocab());
  });
}

SlotFileStats Scheduler::restore_slot(int id, const std::filesystem::path& path) {
  return with_idle_slot(id, [&](Slot& slot) {
    // Read and checked whole before the slot's cache changes: a bad file leaves the slot as it was.
    SlotFileContents contents = read_slot_file(path, *slot.kv, fingerprint_, engine_.model().n_vocab());
    slot.kv->truncate(0);
    {
      std::lock_guard lock(mutex_);
      slot.cached.clear();
    }
    try {
      slot.kv->load_cells(static_cast<int64_t>(contents.tokens.size()), contents.cells);
    } catch (...) {
      slot.kv->truncate(0);
      throw;
    }
    std::lock_guard lock(mutex_);
    slot.cached = std::move(contents.tokens);
    return SlotFileStats{static_cast<int64_t>(slot.cached.size()), contents.bytes};
  });
}

int64_t Scheduler::erase_slot(int id) {
  return with_idle_slot(id, [&](Slot& slot) {
    std::lock_guard lock(mutex_);
    const auto n = static_cast<int64_t>(slot.cached.size());
    slot.cached.clear();
    slot.kv->truncate(0);
    return n;
  });
}

void Scheduler::run_loop() {
  while (true) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        return stopping_ || !queue_.empty() || std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy(); });
      });
      if (stopping_) break;
      admit_waiting();
    }
    step();
  }
}

bool Scheduler::run_step() {
  {
    std::lock_guard lock(mutex_);
    admit_waiting();
    if (std::none_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy(); })) return false;
  }
  step();
  return true;
}

void Scheduler::admit_waiting() {
  while (!queue_.empty()) {
    auto [job, submitted] = queue_.front();
    if (job->cancelled()) {
      queue_.pop_front();
      std::vector<SequenceEvent> last(1);
      last.front().stop = StopReason::Interrupted;
      job->push(last, job->stats());
      ++counters_.requests_cancelled;
      continue;
    }
    Slot* best = choose_slot(job->request());
    if (!best) break;
    queue_.pop_front();
    start_job(*best, std::move(job), submitted);
  }
  counters_.queued = static_cast<int64_t>(queue_.size());
}

// llama-server's choice: the idle slot whose cache covers the largest fraction of the prompt, when
// that fraction exceeds the threshold (ties: the least recently used); else the least recently used
// idle slot. Taking the longest prefix whatever its length would let a new conversation, sharing
// only the chat template's first tokens, evict a waiting conversation's cache while a never-used
// slot was free.
Scheduler::Slot* Scheduler::choose_slot(const SequenceRequest& request) {
  const int wanted = request.slot;
  const auto idle = [&](const Slot& s) { return !s.busy() && !s.reserved && (wanted < 0 || s.id == wanted); };
  const auto older = [](const Slot& a, const Slot* b) { return b == nullptr || a.last_used < b->last_used; };
  Slot* similar = nullptr;
  double best_fraction = 0;
  if (options_.slot_prompt_similarity > 0 && !request.prompt.empty()) {
    for (auto& s : slots_) {
      if (!idle(s) || s.cached.empty()) continue;
      const double fraction = static_cast<double>(common_prefix(s.cached, request.prompt)) /
                              static_cast<double>(request.prompt.size());
      if (fraction <= options_.slot_prompt_similarity) continue;
      if (similar == nullptr || fraction > best_fraction || (fraction == best_fraction && older(s, similar))) {
        similar = &s;
        best_fraction = fraction;
      }
    }
  }
  if (similar != nullptr) return similar;
  Slot* least_recent = nullptr;
  for (auto& s : slots_)
    if (idle(s) && older(s, least_recent)) least_recent = &s;
  return least_recent;
}

void Scheduler::start_job(Slot& slot, std::shared_ptr<Job> job, double submitted) {
  const auto& request = job->request();
  // Keep at least one prompt token to run: its logits give the first generated token.
  // A store with sliding-window rings may have overwritten what an older prefix needs
  // (KvStore::kept_prefix): then the prompt runs from the start.
  const size_t shared =
      request.reuse_cache ? std::min(common_prefix(slot.cached, request.prompt), request.prompt.size() - 1) : 0;
  const auto keep = static_cast<size_t>(slot.kv->kept_prefix(static_cast<int64_t>(shared)));
  slot.kv->truncate(static_cast<int64_t>(keep));
  slot.cached.resize(keep);
  slot.job = std::move(job);
  DraftSettings drafting;
  if (slot.drafter) {
    drafting.drafter = slot.drafter.get();
    drafting.draft_max = options_.drafters->options().draft_max;
    drafting.draft_min = options_.drafters->options().draft_min;
  }
  const grammar::TokenIndex* token_index = request.constraint.grammar ? &engine_.token_index() : nullptr;
  slot.sequence.emplace(engine_.tokenizer(), engine_.model().n_vocab(), request, SequenceCache{*slot.kv, slot.cached},
                        drafting, slot.id, submitted, token_index);
  slot.reported = {};
  slot.reported.cached_tokens = static_cast<int64_t>(keep);
  if (request.report_progress) {  // the first report: what the cache already holds
    SequenceEvent progress;
    progress.prompt_done = static_cast<int64_t>(keep);
    progress.prompt_total = static_cast<int64_t>(request.prompt.size());
    slot.events.push_back(std::move(progress));
  }
  slot.job->push(slot.events, slot.sequence->stats());
  counters_.cached_prompt_tokens += static_cast<int64_t>(keep);
}

void Scheduler::deliver(Slot& slot) {
  Sequence& sequence = *slot.sequence;
  const GenerationStats& stats = sequence.stats();
  counters_.generated_tokens += stats.generated_tokens - slot.reported.generated_tokens;
  counters_.drafted_tokens += stats.drafted_tokens - slot.reported.drafted_tokens;
  counters_.accepted_tokens += stats.accepted_tokens - slot.reported.accepted_tokens;
  counters_.draft_rounds += stats.draft_rounds - slot.reported.draft_rounds;
  counters_.max_sequence_tokens =
      std::max(counters_.max_sequence_tokens, stats.prompt_tokens + stats.generated_tokens);
  slot.reported = stats;
  std::optional<StopReason> stop;
  for (const auto& e : slot.events)
    if (e.stop) stop = e.stop;
  slot.job->push(slot.events, stats);
  if (!sequence.finished()) return;
  if (stop == StopReason::Interrupted) {
    ++counters_.requests_cancelled;
  } else if (stop != StopReason::Error) {
    ++counters_.requests_finished;
  } else {
    // The cache may hold part of a failed pass: forget it.
    slot.kv->truncate(0);
    slot.cached.clear();
  }
  slot.job.reset();
  slot.sequence.reset();
  slot.last_used = ++step_count_;
}

void Scheduler::step() {
  struct Part {
    Slot* slot;
    size_t rows;  // rows of logits it asked for
  };
  std::vector<Part> parts;
  std::vector<int32_t> tokens, positions;
  std::vector<kv::KvStore*> stores;
  std::vector<uint8_t> want;
  int64_t prompt_tokens = 0;
  for (auto& slot : slots_)
    if (slot.busy() && !slot.job->cancelled()) slot.sequence->draft();
  {
    std::lock_guard lock(mutex_);
    for (auto& slot : slots_) {
      if (!slot.busy() || !slot.job->cancelled()) continue;
      slot.sequence->stop(StopReason::Interrupted, slot.events);
      deliver(slot);
    }
    // Decoding sequences first (one token each, with its drafts): a long prompt never stalls running streams.
    const auto add = [&](Slot& slot, const Sequence::Inputs& in) {
      if (in.tokens.empty()) return;
      for (size_t i = 0; i < in.tokens.size(); ++i) {
        tokens.push_back(in.tokens[i]);
        positions.push_back(in.first_position + static_cast<int32_t>(i));
        stores.push_back(slot.kv.get());
        want.push_back(in.all_rows ? 1 : 0);
      }
      if (in.last_row) want.back() = 1;
      parts.push_back({&slot, in.all_rows ? in.tokens.size() : in.last_row ? 1 : 0});
      if (in.prompt) prompt_tokens += static_cast<int64_t>(in.tokens.size());
    };
    for (auto& slot : slots_)
      if (slot.busy() && slot.sequence->decoding()) add(slot, slot.sequence->next_inputs(0));
    int64_t budget = std::max<int64_t>(options_.batch_size - static_cast<int64_t>(tokens.size()), 0);
    for (auto& slot : slots_) {
      if (!slot.busy() || slot.sequence->decoding() || budget == 0) continue;
      const Sequence::Inputs in = slot.sequence->next_inputs(budget);
      budget -= static_cast<int64_t>(in.tokens.size());
      add(slot, in);
    }
  }
  if (tokens.empty()) return;

  const double start = now_seconds();
  std::string error;
  Setting error_setting = Setting::None;
  try {
    engine_.model().forward_sequences(engine_.ops(), stores, tokens, positions, want, logits_.data());
  } catch (const Error& e) {
    error = e.what();
    error_setting = e.setting();
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double seconds = now_seconds() - start;

  std::lock_guard lock(mutex_);
  ++counters_.forward_passes;
  counters_.busy_slots_in_passes += static_cast<int64_t>(parts.size());
  const double share = seconds / static_cast<double>(tokens.size());
  counters_.prompt_seconds += share * static_cast<double>(prompt_tokens);
  counters_.generation_seconds += share * static_cast<double>(static_cast<int64_t>(tokens.size()) - prompt_tokens);
  counters_.prompt_tokens += prompt_tokens;
  size_t row = 0;
  const auto n_vocab = static_cast<size_t>(engine_.model().n_vocab());
  for (const Part& part : parts) {
    Slot& slot = *part.slot;
    if (!error.empty()) {
      slot.sequence->stop(StopReason::Error, slot.events, error, error_setting);
    } else {
      slot.sequence->accept(logits_.data() + row * n_vocab, seconds, slot.events);
      row += part.rows;
    }
    deliver(slot);
  }
}

GenerationResult generate(Scheduler& scheduler, SequenceRequest request,
                          const std::function<void(const SequenceEvent&)>& on_event,
                          const std::function<bool()>& cancelled) {
  const auto job = scheduler.submit(std::move(request));
  GenerationResult result;
  std::vector<SequenceEvent> events;
  bool going = true;
  while (going) {
    const bool stepped = scheduler.run_step();
    if (cancelled && cancelled()) job->cancel();
    events.clear();
    job->take_events(events, std::chrono::milliseconds(0));
    for (const auto& event : events) {
      result.tokens.insert(result.tokens.end(), event.tokens.begin(), event.tokens.end());
      result.text += event.text;
      if (on_event) on_event(event);
      if (!event.stop) continue;
      if (*event.stop == StopReason::Error) throw Error(event.error, event.error_setting);
      result.stop = *event.stop;
      going = false;
    }
    if (!stepped && going) throw_error("the scheduler went idle before the job ended");
  }
  result.stats = job->stats();
  return result;
}

}  // namespace okapi::runtime
