#include "server/embedding_queue.hpp"

#include <algorithm>
#include <exception>

#include "core/error.hpp"
#include "runtime/engine.hpp"
#include "server/api_error.hpp"

namespace okapi::server {

EmbeddingJob::EmbeddingJob(std::vector<std::vector<int32_t>> inputs)
    : inputs_(std::move(inputs)), outputs_(inputs_.size()) {}

bool EmbeddingJob::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return finished_cv_.wait_for(lock, timeout, [this] { return finished_; });
}

EmbeddingQueue::EmbeddingQueue(runtime::Embedder& embedder, int64_t pass_tokens, int64_t pass_inputs, size_t max_jobs)
    : embedder_(embedder), pass_tokens_(pass_tokens), pass_inputs_(pass_inputs), max_jobs_(max_jobs) {
  worker_ = std::thread([this] { run(); });
}

EmbeddingQueue::~EmbeddingQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

std::shared_ptr<EmbeddingJob> EmbeddingQueue::submit(std::vector<std::vector<int32_t>> inputs) {
  auto job = std::make_shared<EmbeddingJob>(std::move(inputs));
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw EmbeddingQueueFull("the server is stopping");
    if (static_cast<size_t>(running_jobs_) >= max_jobs_)
      throw EmbeddingQueueFull(fmt::format("{} embedding requests are waiting already (the server's --queue and "
                                           "--parallel): retry later",
                                           running_jobs_));
    ++running_jobs_;
    ++counters_.requests;
    if (job->inputs_.empty()) {
      job->finished_ = true;
      --running_jobs_;
      ++counters_.requests_finished;
      return job;
    }
    jobs_.push_back(job);
  }
  work_cv_.notify_one();
  return job;
}

EmbeddingCounters EmbeddingQueue::counters() const {
  std::lock_guard lock(mutex_);
  EmbeddingCounters c = counters_;
  c.queued = running_jobs_;
  return c;
}

std::vector<EmbeddingQueue::Take> EmbeddingQueue::take_pass(std::vector<std::vector<int32_t>>& inputs) {
  // Cancelled requests leave the queue; their inputs already in a pass still finish.
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    EmbeddingJob& job = **it;
    if (!job.cancelled()) {
      ++it;
      continue;
    }
    {
      std::lock_guard job_lock(job.mutex_);
      if (!job.finished_) {
        job.finished_ = true;
        job.error_ = "cancelled";
        --running_jobs_;
        ++counters_.requests_cancelled;
      }
    }
    job.finished_cv_.notify_all();
    it = jobs_.erase(it);
  }
  std::vector<Take> takes;
  int64_t tokens = 0;
  bool full = false;
  while (!full) {
    bool took = false;
    for (const auto& job : jobs_) {
      if (job->next_ >= job->inputs_.size()) continue;
      auto& input = job->inputs_[job->next_];
      const auto n = static_cast<int64_t>(input.size());
      // The first input is always taken (one longer than a pass runs alone: a causal model's
      // input spans passes); then only what fits.
      if (!takes.empty() && (tokens + n > pass_tokens_ || static_cast<int64_t>(takes.size()) >= pass_inputs_)) {
        full = true;
        break;
      }
      takes.push_back({job, job->next_});
      inputs.push_back(std::move(input));
      ++job->next_;
      tokens += n;
      took = true;
    }
    if (!took) break;
  }
  std::erase_if(jobs_, [](const auto& job) { return job->next_ >= job->inputs_.size(); });
  return takes;
}

void EmbeddingQueue::run() {
  for (;;) {
    std::vector<std::vector<int32_t>> inputs;
    std::vector<Take> takes;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) {
        for (auto& job : jobs_) {
          {
            std::lock_guard job_lock(job->mutex_);
            if (job->finished_) continue;
            job->finished_ = true;
            job->error_ = "the server is stopping";
            --running_jobs_;
          }
          job->finished_cv_.notify_all();
        }
        jobs_.clear();
        return;
      }
      takes = take_pass(inputs);
    }
    if (takes.empty()) continue;

    std::vector<runtime::EmbeddingOutput> outputs;
    std::string error;
    const double start = runtime::now_seconds();
    try {
      outputs = embedder_.embed(inputs);
      if (outputs.size() != inputs.size())
        error = fmt::format("the embedder gave {} outputs for {} inputs", outputs.size(), inputs.size());
    } catch (const std::exception& e) {
      error = client_message(e);
    }
    const double seconds = runtime::now_seconds() - start;

    std::lock_guard lock(mutex_);
    ++counters_.passes;
    counters_.seconds += seconds;
    if (std::any_of(takes.begin(), takes.end(), [&](const Take& t) { return t.job != takes.front().job; }))
      ++counters_.shared_passes;
    for (size_t k = 0; k < takes.size(); ++k) {
      EmbeddingJob& job = *takes[k].job;
      bool now_finished = false;
      {
        std::lock_guard job_lock(job.mutex_);
        if (job.finished_) continue;  // cancelled meanwhile
        if (!error.empty()) {
          job.error_ = error;
          now_finished = true;
        } else {
          counters_.inputs += 1;
          counters_.tokens += static_cast<int64_t>(inputs[k].size());
          job.outputs_[takes[k].index] = std::move(outputs[k]);
          now_finished = ++job.done_ == job.outputs_.size();
        }
        if (now_finished) job.finished_ = true;
      }
      if (!now_finished) continue;
      --running_jobs_;
      if (error.empty()) ++counters_.requests_finished;
      job.finished_cv_.notify_all();
      // A failed job's other inputs are not embedded.
      if (!error.empty()) std::erase_if(jobs_, [&](const auto& j) { return j.get() == &job; });
    }
  }
}

}  // namespace okapi::server
