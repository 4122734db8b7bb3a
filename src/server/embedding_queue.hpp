// Embeddings batched across requests: one worker thread owns the Embedder (and so the engine's
// Ops: nothing else runs the model on an embeddings server) and fills each forward pass with the
// waiting inputs of every request, one input of each request in turn, up to the pass's token and
// input budgets. A small request is therefore not stuck behind a large one, and many small
// requests share passes. A cancelled request's inputs that were not started are dropped.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/embedder.hpp"

namespace okapi::server {

// One request's inputs and, when finished, their outputs (in input order).
class EmbeddingJob {
 public:
  explicit EmbeddingJob(std::vector<std::vector<int32_t>> inputs);
  // Waits up to `timeout`; true once every output is in or the job failed.
  bool wait(std::chrono::milliseconds timeout);
  // The client went away: inputs not started are dropped.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  // After wait() returned true: empty when all went well, else the reason (a server error).
  const std::string& error() const { return error_; }
  std::vector<runtime::EmbeddingOutput>& outputs() { return outputs_; }

 private:
  friend class EmbeddingQueue;
  // Worker side (the queue's mutex guards next_; mutex_ guards the rest).
  std::vector<std::vector<int32_t>> inputs_;
  size_t next_ = 0;  // the first input not yet taken into a pass
  std::mutex mutex_;
  std::condition_variable finished_cv_;
  std::vector<runtime::EmbeddingOutput> outputs_;
  size_t done_ = 0;
  bool finished_ = false;
  std::string error_;
  std::atomic<bool> cancelled_{false};
};

struct EmbeddingCounters {
  int64_t requests = 0;         // submitted
  int64_t requests_finished = 0;
  int64_t requests_cancelled = 0;
  int64_t inputs = 0;           // embedded
  int64_t tokens = 0;           // embedded
  int64_t passes = 0;           // Embedder::embed calls (one forward pass each, but inputs longer than a pass)
  int64_t shared_passes = 0;    // passes holding inputs of more than one request
  double seconds = 0;           // in Embedder::embed
  int64_t queued = 0;           // requests waiting or running now
};

class EmbeddingQueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class EmbeddingQueue {
 public:
  // `max_jobs`: requests waiting or running at once (more: EmbeddingQueueFull). Starts the worker.
  EmbeddingQueue(runtime::Embedder& embedder, int64_t pass_tokens, int64_t pass_inputs, size_t max_jobs);
  // Stops the worker; requests still waiting fail ("the server is stopping").
  ~EmbeddingQueue();
  EmbeddingQueue(const EmbeddingQueue&) = delete;
  EmbeddingQueue& operator=(const EmbeddingQueue&) = delete;

  std::shared_ptr<EmbeddingJob> submit(std::vector<std::vector<int32_t>> inputs);
  EmbeddingCounters counters() const;

 private:
  struct Take {
    std::shared_ptr<EmbeddingJob> job;
    size_t index;
  };
  void run();
  // Under mutex_: the next pass's inputs, one of each job in turn, within the budgets.
  std::vector<Take> take_pass(std::vector<std::vector<int32_t>>& inputs);

  runtime::Embedder& embedder_;
  int64_t pass_tokens_;
  int64_t pass_inputs_;
  size_t max_jobs_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<EmbeddingJob>> jobs_;  // with inputs not yet taken
  bool stopping_ = false;
  EmbeddingCounters counters_;
  int64_t running_jobs_ = 0;  // submitted and not finished
  std::thread worker_;
};

}  // namespace okapi::server
