// The one generation loop: N slots, each with its own KV cache, decoded together. A step gathers
// every active sequence's next tokens (one and its drafts for a sequence that is decoding, a chunk
// of the prompt for one that is reading its prompt) into one forward pass over all of them
// (Model::forward_sequences reads the weights once), then hands each sequence its rows
// (runtime/sequence.hpp). A job that arrives mid-generation takes a free slot at the next step;
// beyond the slots, a bounded queue waits (submit throws QueueFull past it). `okapi serve` runs
// the steps on a worker thread with many slots; `okapi chat` with one slot; `okapi run` drives
// the steps itself (run_step) on one slot.
//
// Prefix reuse: a slot keeps the tokens whose K/V it holds after its job ends. A new job goes to
// the idle slot sharing the largest part of its prompt as a prefix (above
// SchedulerOptions::slot_prompt_similarity; else the least recently used idle slot), and only that
// identical prefix (token for token) is kept; the rest of the cache is truncated. Nothing else
// crosses jobs.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <string>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv/kv_store.hpp"
#include "runtime/drafters.hpp"
#include "runtime/engine.hpp"
#include "runtime/job.hpp"
#include "runtime/sequence.hpp"
#include "runtime/slot_file.hpp"

namespace okapi::runtime {

struct SchedulerOptions {
  int n_slots = 1;
  int64_t n_ctx_per_slot = 0;  // cells of each slot's cache
  int64_t batch_size = 512;    // tokens per forward pass (prompt chunks fill what decoding leaves)
  size_t max_queue = 64;       // jobs waiting for a slot
  // Slot choice, as llama-server's --slot-prompt-similarity: a job goes to the idle slot whose
  // cached tokens share the largest fraction of its prompt as a prefix, if that fraction exceeds
  // this; otherwise to the least recently used idle slot (one never used first). 0: always LRU.
  float slot_prompt_similarity = 0.1f;
  // Speculative decoding: a drafter per slot from `drafters` (null: none), with its own RNG seeded
  // drafter_seed + slot. A slot's drafts are verified inside the step's one forward pass, beside
  // the other slots' tokens.
  const DrafterFactory* drafters = nullptr;
  uint32_t drafter_seed = 0x9e3779b9u;
  // True: steps run on a worker thread of the scheduler's own. False: the caller runs them (run_step).
  bool worker_thread = true;
  Setting context_setting = Setting::ContextLength;  // the setting that chose n_ctx_per_slot, for messages
};

// A slot id that no slot has (the server answers 400).
class SlotNotFound : public std::runtime_error {
 public:
  explicit SlotNotFound(int id) : std::runtime_error("Invalid slot ID " + std::to_string(id)) {}
};

class QueueFull : public std::runtime_error {
 public:
  QueueFull() : std::runtime_error("all slots are busy and the queue is full") {}
};

// Counters for /metrics (monotonic totals since start, and the current gauges).
struct SchedulerCounters {
  int64_t prompt_tokens = 0;  // prompt tokens evaluated (reused ones not counted)
  int64_t cached_prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t requests_finished = 0;
  int64_t requests_cancelled = 0;
  int64_t forward_passes = 0;
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;
  int64_t draft_rounds = 0;         // verification steps that held drafts
  int64_t busy_slots_in_passes = 0;  // sum over forward passes of the slots each held
  int64_t max_sequence_tokens = 0;   // the longest sequence seen (prompt + generated)
  double prompt_seconds = 0;  // forward time spent on prompt tokens (shared passes split by tokens)
  double generation_seconds = 0;
  int busy_slots = 0;
  int64_t queued = 0;
  int64_t kv_cells_used = 0;
  int64_t kv_cells_total = 0;
};

class Scheduler {
 public:
  // Makes the slots' KV caches (engine.make_kv, memory checked) and their drafters, and starts
  // the worker thread (options.worker_thread).
  Scheduler(Engine& engine, const SchedulerOptions& options);
  ~Scheduler();  // stops the worker; unfinished jobs end with StopReason::Interrupted
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job. Throws okapi::Error for a prompt that is empty, longer than a slot's context or
  // holds an id outside the vocabulary; QueueFull when every slot is busy and max_queue jobs wait.
  std::shared_ptr<Job> submit(SequenceRequest request);
  // Without a worker thread: admits queued jobs and runs one step. False when there was nothing
  // to do (no job in a slot or waiting).
  bool run_step();

  const SchedulerOptions& options() const { return options_; }
  SchedulerCounters counters() const;
  // /slots: one object per slot (id, n_ctx, is_processing, cached tokens, the job's progress).
  nlohmann::ordered_json slots_json() const;
  // Jobs in slots or waiting for one.
  int64_t active_jobs() const;
  // KV cache bytes of one slot (all slots are alike).
  size_t slot_kv_bytes() const;
  // The slots' KV store type ("f16", "exact direct", ...).
  std::string_view slot_kv_type_name() const;
  // The drafter's name ("" without one).
  std::string_view drafter_name() const;

  // Slot files (runtime/slot_file.hpp): an idle slot's tokens and KV cells saved to `path`,
  // restored from it (replacing what the slot held), or erased. A busy slot is waited for; the
  // slot takes no job meanwhile. Throws okapi::Error for a slot id out of range (SlotNotFound),
  // a file that does not fit the slot or cannot be written.
  SlotFileStats save_slot(int id, const std::filesystem::path& path);
  SlotFileStats restore_slot(int id, const std::filesystem::path& path);
  int64_t erase_slot(int id);  // returns the tokens the slot held

 private:
  struct Slot {
    int id = 0;
    std::unique_ptr<kv::KvStore> kv;
    std::vector<TokenId> cached;  // tokens whose K/V the store holds, position i at cell i
    std::shared_ptr<Job> job;
    std::optional<Sequence> sequence;
    std::unique_ptr<Drafter> drafter;
    uint64_t last_used = 0;  // step counter at release; 0: never used (LRU choice)
    std::vector<SequenceEvent> events;  // this step's, pushed to the job after it
    GenerationStats reported;          // the stats the counters have counted
    bool reserved = false;             // a slot file is being written from or read into it
    bool busy() const { return job != nullptr; }
  };

  // Waits until slot `id` is idle and reserves it (no job starts in it) while `action` runs.
  template <typename Action>
  auto with_idle_slot(int id, Action&& action);
  uint64_t fingerprint_ = 0;  // model_fingerprint(engine_), for slot files

  void run_loop();
  void admit_waiting();  // moves queued jobs into idle slots (under mutex_)
  Slot* choose_slot(const SequenceRequest& request);  // an idle slot for the job, or null (under mutex_)
  void start_job(Slot& slot, std::shared_ptr<Job> job, double submitted);
  void step();  // one forward pass over every active slot
  // Pushes the slot's events to its job; frees the slot when its sequence has finished.
  void deliver(Slot& slot);

  Engine& engine_;
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

// One job run to its end on a scheduler without a worker thread, as `okapi run` and tests do.
struct GenerationResult {
  std::vector<TokenId> tokens;  // generated ids (without the prompt)
  std::string text;             // their text (without an end-of-generation token)
  StopReason stop = StopReason::TokenLimit;
  GenerationStats stats;
};
// Submits `request` and runs steps until it ends, handing each event to `on_event` as it comes.
// `cancelled` is asked after each step; true cancels the job (it then ends as Interrupted). A
// job that ends with an error throws okapi::Error with its message.
GenerationResult generate(Scheduler& scheduler, SequenceRequest request,
                          const std::function<void(const SequenceEvent&)>& on_event = {},
                          const std::function<bool()>& cancelled = {});

}  // namespace okapi::runtime
