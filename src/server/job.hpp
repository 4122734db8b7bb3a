// One generation request as the scheduler runs it: what to generate (JobRequest), and the channel
// its results come back through (events a handler thread waits for, one job per HTTP request).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sample/sampler.hpp"
#include "tokenizer/vocab.hpp"

namespace okapi::server {

using tokenizer::TokenId;

enum class FinishReason { Stop, Length, Cancelled, Error };
// OpenAI's finish_reason: "stop" (end of generation or a stop string) or "length".
const char* finish_reason_name(FinishReason reason);

struct JobRequest {
  std::vector<TokenId> prompt;
  sample::SamplerConfig sampling;
  int64_t max_tokens = -1;  // < 0: until end of generation or the slot's context is full
  std::vector<std::string> stop;
  int top_logprobs = -1;  // < 0: no logprobs; else the chosen token's and this many alternatives
  bool ignore_eos = false;
};

struct TokenLogprob {
  TokenId id = 0;
  std::string token;  // its bytes (may be part of a UTF-8 character)
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // most likely first
};

struct JobEvent {
  std::string text;                    // newly complete text (may be empty)
  std::vector<TokenLogprob> logprobs;  // the tokens sampled since the previous event
  std::optional<FinishReason> finish;  // set on the last event
  std::string error;                   // finish == Error
};

struct JobStats {
  int slot = -1;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose KV was reused from the slot's previous request
  int64_t completion_tokens = 0;
  double queued_ms = 0;
  double prompt_ms = 0;     // from the slot's first prompt chunk to the first sampled token
  double predicted_ms = 0;  // from the first sampled token to the end
  int64_t drafted_tokens = 0;   // speculative decoding: drafts proposed for this job
  int64_t accepted_tokens = 0;  // ... and kept
};

class Job {
 public:
  explicit Job(JobRequest request) : request_(std::move(request)) {}
  const JobRequest& request() const { return request_; }

  // Moves the events produced so far into `out`, waiting up to `timeout` for one. False once the
  // last event has been taken.
  bool take_events(std::vector<JobEvent>& out, std::chrono::milliseconds timeout);
  // Asks the scheduler to stop this job (client gone); it frees the slot at its next step.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  JobStats stats() const;

  // Scheduler side.
  void push(JobEvent event);
  void update_stats(const JobStats& stats);

 private:
  JobRequest request_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<JobEvent> events_;
  bool finished_ = false;  // the last event was pushed
  bool drained_ = false;   // ... and taken
  JobStats stats_;
};

}  // namespace okapi::server
