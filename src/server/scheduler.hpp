// Continuous batching: N slots, each with its own KV cache, decoded together. One worker thread
// runs steps; a step gathers every active slot's next tokens (one for a slot that is decoding, a
// chunk of the prompt for one that is reading its prompt) into one forward pass over all the
// sequences (Model::forward_sequences reads the weights once for all of them), then samples each
// slot's next token. A request that arrives mid-generation takes a free slot at the next step;
// beyond the slots, a bounded queue waits (submit throws QueueFull past it).
//
// Prefix reuse: a slot keeps the tokens whose K/V it holds after its request ends. A new request
// goes to the idle slot sharing the longest prefix with its prompt, and only that identical prefix
// (token for token) is kept; the rest of the cache is truncated. Nothing else crosses requests.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv/kv_store.hpp"
#include "runtime/engine.hpp"
#include "runtime/speculative.hpp"
#include "runtime/stop_strings.hpp"
#include "server/job.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::server {

struct SchedulerOptions {
  int n_slots = 1;
  int64_t n_ctx_per_slot = 0;  // cells of each slot's cache
  int64_t batch_size = 512;    // tokens per forward pass (prompt chunks fill what decoding leaves)
  size_t max_queue = 64;       // requests waiting for a slot
  // Speculative decoding: a drafter per slot (null: none), as `okapi run` drafts (draft_max,
  // draft_min, the adaptive DraftLength per slot). A slot's drafts are verified inside the step's
  // one forward pass, beside the other slots' tokens.
  std::function<std::unique_ptr<runtime::Drafter>(int slot)> make_drafter;
  int draft_max = 16;
  int draft_min = 0;
};

class QueueFull : public std::runtime_error {
 public:
  QueueFull() : std::runtime_error("all slots are busy and the queue is full") {}
};

// Counters for /metrics (monotonic totals since start, and the current gauges).
struct SchedulerCounters {
  int64_t prompt_tokens = 0;       // prompt tokens evaluated (reused ones not counted)
  int64_t cached_prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t requests_finished = 0;
  int64_t requests_cancelled = 0;
  int64_t forward_passes = 0;
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;
  double prompt_seconds = 0;     // forward time spent on prompt tokens (shared passes split by tokens)
  double generation_seconds = 0;
  int busy_slots = 0;
  int64_t queued = 0;
  int64_t kv_cells_used = 0;
  int64_t kv_cells_total = 0;
};

class Scheduler {
 public:
  // Makes the slots' KV caches (engine.make_kv, memory checked) and starts the worker thread.
  Scheduler(runtime::Engine& engine, const SchedulerOptions& options);
  ~Scheduler();  // stops the worker; unfinished jobs end with FinishReason::Cancelled
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job. Throws QueueFull when every slot is busy and max_queue jobs already wait.
  std::shared_ptr<Job> submit(JobRequest request);

  const SchedulerOptions& options() const { return options_; }
  SchedulerCounters counters() const;
  // /slots: one object per slot (id, n_ctx, is_processing, cached tokens, the job's progress).
  nlohmann::ordered_json slots_json() const;
  // Jobs in slots or waiting for one.
  int64_t active_jobs() const;
  // KV cache bytes of one slot (all slots are alike).
  size_t slot_kv_bytes() const;

 private:
  enum class SlotState { Idle, Prompt, Decode };
  struct Slot {
    int id = 0;
    std::unique_ptr<kv::KvStore> kv;
    std::vector<TokenId> cached;  // tokens whose K/V the store holds, position i at cell i
    SlotState state = SlotState::Idle;
    std::shared_ptr<Job> job;
    std::optional<sample::Sampler> sampler;
    std::optional<tokenizer::StreamDecoder> decoder;
    runtime::StopStrings stops;
    size_t prompt_done = 0;  // prompt tokens whose K/V is in the store
    TokenId pending = 0;     // Decode: the sampled token to run next
    int64_t generated = 0;
    JobStats stats;
    double started = 0, first_token = 0, submitted = 0;
    uint64_t last_used = 0;  // step counter at release (LRU among equal prefixes)
    std::unique_ptr<runtime::Drafter> drafter;
    std::optional<runtime::DraftLength> draft_length;
    std::vector<runtime::DraftToken> drafts;  // this step's, verified in its forward pass
    runtime::DraftRound draft_round;          // ... what asking for them cost (for draft_length)
  };

  void run_loop();
  bool admit_waiting();                // moves queued jobs into idle slots (under mutex_)
  void start_job(Slot& slot, std::shared_ptr<Job> job, double submitted);
  void step();                         // one forward pass over every active slot
  // After a row of logits for `slot`: samples, emits, finishes. Returns false when the job ended.
  bool take_token(Slot& slot, const float* logits);
  // A chosen token (sampled, or a verified draft): records it, emits its text, finishes the job
  // when it ends generation. Returns false when the job ended.
  bool emit_token(Slot& slot, TokenId id, const float* logits);
  // A decoding slot's rows: drafts verified by the exact rule, then the bonus or replacement token.
  void verify_round(Slot& slot, const float* rows, double round_seconds);
  void draft_for_decoding_slots();
  void finish(Slot& slot, FinishReason reason, const std::string& error = {});
  TokenLogprob logprobs_of(const float* logits, TokenId chosen, int top) const;

  runtime::Engine& engine_;
  SchedulerOptions options_;
  std::vector<Slot> slots_;
  mutable std::mutex mutex_;  // queue_, slot states as /slots reads them, counters_
  std::condition_variable wake_;
  std::deque<std::pair<std::shared_ptr<Job>, double>> queue_;
  SchedulerCounters counters_;
  bool stopping_ = false;
  uint64_t step_count_ = 0;
  std::vector<float> logits_;
  std::thread worker_;
};

}  // namespace okapi::server
