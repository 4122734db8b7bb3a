// The continuous-batching scheduler: a request gives the same tokens alone and batched with
// others (greedy), prefix reuse keeps exactly the shared tokens, cancellation frees the slot, the
// queue is bounded, and limits end generation with the right reason.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "runtime/drafters.hpp"
#include "runtime/engine.hpp"
#include "runtime/session.hpp"
#include "server/scheduler.hpp"
#include "support/paths.hpp"

namespace okapi::server {
namespace {

const std::filesystem::path kModel = test::repo_dir() / "models" / "stories260K.gguf";

struct Outcome {
  std::string text;
  std::vector<TokenId> tokens;
  FinishReason finish = FinishReason::Error;
  JobStats stats;
};

Outcome wait_for(Job& job) {
  Outcome out;
  std::vector<JobEvent> events;
  while (job.take_events(events, std::chrono::milliseconds(50))) {
    for (auto& e : events) {
      out.text += e.text;
      for (const auto& lp : e.logprobs) out.tokens.push_back(lp.id);
      if (e.finish) out.finish = *e.finish;
    }
    events.clear();
  }
  out.stats = job.stats();
  return out;
}

SchedulerOptions options(int slots, int64_t n_ctx, int64_t batch, size_t queue) {
  SchedulerOptions o;
  o.n_slots = slots;
  o.n_ctx_per_slot = n_ctx;
  o.batch_size = batch;
  o.max_queue = queue;
  return o;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime::EngineOptions options;
    options.threads = 2;
    engine_ = runtime::Engine::load(kModel, options);
  }
  JobRequest request(const std::string& prompt, int64_t max_tokens) {
    runtime::Session session(*engine_, *kv_dummy());
    JobRequest r;
    r.prompt = session.tokenize_prompt(prompt);
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.top_logprobs = 0;  // records the sampled ids
    return r;
  }
  kv::KvStore* kv_dummy() {
    if (!dummy_) dummy_ = engine_->make_kv(64);
    return dummy_.get();
  }
  std::unique_ptr<runtime::Engine> engine_;
  std::unique_ptr<kv::KvStore> dummy_;
};

TEST_F(SchedulerTest, GreedyTextIsTheSameAloneAndBatched) {
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily and Ben went to the park",
                                            "One day", "Tom had a red ball"};
  std::vector<Outcome> alone;
  {
    Scheduler scheduler(*engine_, options(1, 256, 512, 16));
    for (const auto& p : prompts) alone.push_back(wait_for(*scheduler.submit(request(p, 40))));
  }
  // Plain decoding (Session) gives the same tokens as the scheduler alone.
  {
    auto kv = engine_->make_kv(256);
    runtime::Session session(*engine_, *kv);
    sample::SamplerConfig greedy;
    greedy.temperature = 0;
    sample::Sampler sampler(greedy);
    runtime::GenerateOptions go;
    go.n_predict = 40;
    const auto r = session.generate(request(prompts[0], 40).prompt, sampler, go);
    EXPECT_EQ(r.tokens, alone[0].tokens);
  }
  // Small batches force prompt chunks to share passes with decoding slots.
  Scheduler scheduler(*engine_, options(3, 256, 7, 16));
  std::vector<std::shared_ptr<Job>> jobs;
  for (const auto& p : prompts) jobs.push_back(scheduler.submit(request(p, 40)));
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Outcome batched = wait_for(*jobs[i]);
    EXPECT_EQ(batched.tokens, alone[i].tokens) << prompts[i];
    EXPECT_EQ(batched.text, alone[i].text) << prompts[i];
    EXPECT_EQ(batched.finish, alone[i].finish);
  }
  EXPECT_EQ(scheduler.active_jobs(), 0);
}

// Speculative decoding in the slots (a draft model: stories260K drafting for itself, and prompt
// lookup): greedy text is the same as without, alone and batched, and drafts are accepted.
TEST_F(SchedulerTest, DraftsChangeNothingButTheNumberOfPasses) {
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily and Ben went to the park",
                                            "One day"};
  std::vector<Outcome> plain;
  {
    Scheduler scheduler(*engine_, options(2, 256, 512, 16));
    for (const auto& p : prompts) plain.push_back(wait_for(*scheduler.submit(request(p, 48))));
  }
  auto draft_engine = runtime::Engine::load_sharing_threads(kModel, {}, *engine_);
  for (const bool use_model : {true, false}) {
    SchedulerOptions o = options(3, 256, 9, 16);
    o.draft_max = 4;
    if (use_model) {
      o.make_drafter = [&](int) -> std::unique_ptr<runtime::Drafter> {
        return std::make_unique<runtime::ModelDrafter>(*draft_engine, draft_engine->make_kv(256), "self",
                                                       runtime::ModelDrafterOptions{});
      };
    } else {
      o.make_drafter = [](int) -> std::unique_ptr<runtime::Drafter> {
        return std::make_unique<runtime::LookupDrafter>(3);
      };
    }
    Scheduler scheduler(*engine_, o);
    std::vector<std::shared_ptr<Job>> jobs;
    for (const auto& p : prompts) jobs.push_back(scheduler.submit(request(p, 48)));
    int64_t accepted = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const Outcome out = wait_for(*jobs[i]);
      EXPECT_EQ(out.tokens, plain[i].tokens) << prompts[i] << (use_model ? " (draft model)" : " (lookup)");
      EXPECT_EQ(out.text, plain[i].text);
      accepted += out.stats.accepted_tokens;
    }
    if (use_model) {
      EXPECT_GT(accepted, 0);
      EXPECT_GT(scheduler.counters().drafted_tokens, 0);
    }
  }
}

TEST_F(SchedulerTest, PrefixReuseKeepsOnlyTheSharedTokens) {
  Scheduler scheduler(*engine_, options(2, 256, 512, 4));
  JobRequest first = request("Once upon a time there was a little girl", 8);
  const Outcome a = wait_for(*scheduler.submit(first));
  EXPECT_EQ(a.stats.cached_tokens, 0);
  // The next turn extends the first prompt: its whole prompt is reused from the same slot.
  JobRequest second = first;
  second.prompt.insert(second.prompt.end(), a.tokens.begin(), a.tokens.end() - 1);
  const auto extra = request("She liked", 8).prompt;
  second.prompt.insert(second.prompt.end(), extra.begin() + 1, extra.end());
  const Outcome b = wait_for(*scheduler.submit(second));
  EXPECT_EQ(b.stats.slot, a.stats.slot);
  EXPECT_EQ(b.stats.cached_tokens, static_cast<int64_t>(first.prompt.size() + a.tokens.size() - 1));
  // The reused answer equals a fresh slot's answer.
  Scheduler fresh(*engine_, options(1, 256, 512, 4));
  const Outcome c = wait_for(*fresh.submit(second));
  EXPECT_EQ(c.stats.cached_tokens, 0);
  EXPECT_EQ(b.tokens, c.tokens);
  // A different conversation shares only BOS-and-after tokens that are equal.
  const Outcome d = wait_for(*scheduler.submit(request("The little dog", 4)));
  EXPECT_LE(d.stats.cached_tokens, 1);
}

TEST_F(SchedulerTest, LimitsAndStopStrings) {
  Scheduler scheduler(*engine_, options(1, 32, 512, 4));
  const Outcome limited = wait_for(*scheduler.submit(request("Once upon a time", 5)));
  EXPECT_EQ(limited.finish, FinishReason::Length);
  EXPECT_EQ(limited.stats.completion_tokens, 5);
  // The context: a 32-cell slot ends generation when the next token would not fit.
  JobRequest r = request("Once upon a time", -1);
  r.ignore_eos = true;
  const Outcome full = wait_for(*scheduler.submit(r));
  EXPECT_EQ(full.finish, FinishReason::Length);
  EXPECT_EQ(full.stats.prompt_tokens + full.stats.completion_tokens, 33);
  // A stop string taken from the greedy text itself ends it there.
  const Outcome longer = wait_for(*scheduler.submit(request("Once upon a time", 20)));
  const size_t cut = longer.text.find(' ', 8);
  ASSERT_NE(cut, std::string::npos);
  JobRequest stopped = request("Once upon a time", 20);
  stopped.stop = {longer.text.substr(cut, 3)};
  const Outcome s = wait_for(*scheduler.submit(stopped));
  EXPECT_EQ(s.finish, FinishReason::Stop);
  EXPECT_EQ(s.text, longer.text.substr(0, longer.text.find(stopped.stop[0])));
}

TEST_F(SchedulerTest, CancelFreesTheSlotAndTheQueueIsBounded) {
  Scheduler scheduler(*engine_, options(1, 512, 512, 1));
  JobRequest endless = request("Once upon a time", -1);
  endless.ignore_eos = true;
  auto running = scheduler.submit(endless);
  auto waiting = scheduler.submit(request("One day", 4));
  EXPECT_THROW(scheduler.submit(request("The dog", 4)), QueueFull);
  running->cancel();
  const Outcome cancelled = wait_for(*running);
  EXPECT_EQ(cancelled.finish, FinishReason::Cancelled);
  const Outcome next = wait_for(*waiting);
  EXPECT_EQ(next.finish, FinishReason::Length);
  for (int i = 0; i < 100 && scheduler.active_jobs() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(scheduler.active_jobs(), 0);
  const auto slots = scheduler.slots_json();
  EXPECT_FALSE(slots[0]["is_processing"].get<bool>());
}

TEST_F(SchedulerTest, BadPromptsAreErrors) {
  Scheduler scheduler(*engine_, options(1, 8, 512, 1));
  EXPECT_THROW(scheduler.submit(JobRequest{}), okapi::Error);
  JobRequest too_long = request("Once upon a time there was a little girl named Lily", 4);
  EXPECT_THROW(scheduler.submit(too_long), okapi::Error);
  JobRequest bad_id = request("Once", 4);
  bad_id.prompt.push_back(100000);
  EXPECT_THROW(scheduler.submit(bad_id), okapi::Error);
}

}  // namespace
}  // namespace okapi::server
