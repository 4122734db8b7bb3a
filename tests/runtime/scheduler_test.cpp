// The one generation loop's scheduler: a request gives the same tokens alone and batched with
// others (greedy), on a worker thread or driven by the caller, prefix reuse keeps exactly the shared tokens, cancellation frees the slot, the
// queue is bounded, and limits end generation with the right reason.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "runtime/drafters.hpp"
#include "runtime/engine.hpp"
#include "runtime/scheduler.hpp"
#include "support/paths.hpp"

namespace okapi::runtime {
namespace {

const std::filesystem::path kModel = test::repo_dir() / "models" / "stories260K.gguf";

struct Outcome {
  std::string text;
  std::vector<TokenId> tokens;
  StopReason stop = StopReason::Error;
  GenerationStats stats;
};

Outcome wait_for(Job& job) {
  Outcome out;
  std::vector<SequenceEvent> events;
  while (job.take_events(events, std::chrono::milliseconds(50))) {
    for (auto& e : events) {
      out.text += e.text;
      for (const auto& lp : e.logprobs) out.tokens.push_back(lp.id);
      if (e.stop) out.stop = *e.stop;
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
    EngineOptions options;
    options.threads = 2;
    engine_ = Engine::load(kModel, options);
  }
  SequenceRequest request(const std::string& prompt, int64_t max_tokens) {
    SequenceRequest r;
    r.prompt = tokenize_prompt(engine_->tokenizer(), prompt);
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.top_logprobs = 0;  // records the sampled ids
    return r;
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(SchedulerTest, GreedyTextIsTheSameAloneAndBatched) {
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily and Ben went to the park",
                                            "One day", "Tom had a red ball"};
  std::vector<Outcome> alone;
  {
    Scheduler scheduler(*engine_, options(1, 256, 512, 16));
    for (const auto& p : prompts) alone.push_back(wait_for(*scheduler.submit(request(p, 40))));
  }
  // Driven by the caller (as okapi run), with the prompt read 3 tokens a pass: the same tokens.
  {
    SchedulerOptions o = options(1, 256, 3, 16);
    o.worker_thread = false;
    Scheduler scheduler(*engine_, o);
    const auto r = generate(scheduler, request(prompts[0], 40));
    EXPECT_EQ(r.tokens, alone[0].tokens);
    EXPECT_EQ(r.text, alone[0].text);
    EXPECT_EQ(r.stop, StopReason::TokenLimit);
  }
  // Small batches force prompt chunks to share passes with decoding slots.
  Scheduler scheduler(*engine_, options(3, 256, 7, 16));
  std::vector<std::shared_ptr<Job>> jobs;
  for (const auto& p : prompts) jobs.push_back(scheduler.submit(request(p, 40)));
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Outcome batched = wait_for(*jobs[i]);
    EXPECT_EQ(batched.tokens, alone[i].tokens) << prompts[i];
    EXPECT_EQ(batched.text, alone[i].text) << prompts[i];
    EXPECT_EQ(batched.stop, alone[i].stop);
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
  for (const bool use_model : {true, false}) {
    DrafterOptions drafting;
    drafting.draft_max = 4;
    if (use_model) {
      drafting.draft_model = kModel.string();
    } else {
      drafting.lookup = 3;
    }
    const DrafterFactory drafters(drafting, *engine_, {});
    SchedulerOptions o = options(3, 256, 9, 16);
    o.drafters = &drafters;
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
  SequenceRequest first = request("Once upon a time there was a little girl", 8);
  const Outcome a = wait_for(*scheduler.submit(first));
  EXPECT_EQ(a.stats.cached_tokens, 0);
  // The next turn extends the first prompt: its whole prompt is reused from the same slot.
  SequenceRequest second = first;
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

// llama-server's --slot-prompt-similarity: a new conversation that shares only a token or two with a
// waiting one takes a never-used slot instead of evicting it; 0 always takes the least recently used.
TEST_F(SchedulerTest, SlotChoiceKeepsAWaitingConversationsCache) {
  const auto follow_up = [&](const SequenceRequest& first, const Outcome& answer) {
    SequenceRequest next = first;
    next.prompt.insert(next.prompt.end(), answer.tokens.begin(), answer.tokens.end() - 1);
    const auto extra = request("He smiled", 4).prompt;
    next.prompt.insert(next.prompt.end(), extra.begin() + 1, extra.end());
    return next;
  };
  const SequenceRequest first = request("Once upon a time there was a little girl named Lily", 6);
  const SequenceRequest other = request("The big brown dog ran to the park with a ball", 6);
  ASSERT_EQ(first.prompt.front(), other.prompt.front());  // both share BOS: the old choice's trap
  {
    Scheduler scheduler(*engine_, options(3, 256, 512, 4));  // the default threshold, 0.1
    const Outcome a = wait_for(*scheduler.submit(first));
    const Outcome b = wait_for(*scheduler.submit(other));
    EXPECT_NE(b.stats.slot, a.stats.slot);
    EXPECT_LE(b.stats.cached_tokens, 1);
    const SequenceRequest next = follow_up(first, a);
    const Outcome c = wait_for(*scheduler.submit(next));
    EXPECT_EQ(c.stats.slot, a.stats.slot);
    EXPECT_EQ(c.stats.cached_tokens, static_cast<int64_t>(first.prompt.size() + a.tokens.size() - 1));
  }
  {
    SchedulerOptions lru = options(3, 256, 512, 4);
    lru.slot_prompt_similarity = 0;
    Scheduler scheduler(*engine_, lru);
    const Outcome a = wait_for(*scheduler.submit(first));
    const Outcome b = wait_for(*scheduler.submit(other));
    EXPECT_NE(b.stats.slot, a.stats.slot);
    // The third slot was never used: the least recently used, so the follow-up starts from nothing.
    const Outcome c = wait_for(*scheduler.submit(follow_up(first, a)));
    EXPECT_NE(c.stats.slot, a.stats.slot);
    EXPECT_NE(c.stats.slot, b.stats.slot);
    EXPECT_EQ(c.stats.cached_tokens, 0);
    // Now every slot has been used, a's is the least recent: the next follow-up lands there.
    const Outcome d = wait_for(*scheduler.submit(follow_up(first, a)));
    EXPECT_EQ(d.stats.slot, a.stats.slot);
    EXPECT_GT(d.stats.cached_tokens, static_cast<int64_t>(first.prompt.size()) - 1);
  }
  SchedulerOptions bad = options(1, 256, 512, 4);
  bad.slot_prompt_similarity = 1.5f;
  EXPECT_THROW(Scheduler(*engine_, std::move(bad)).options(), Error);
}

TEST_F(SchedulerTest, LimitsAndStopStrings) {
  Scheduler scheduler(*engine_, options(1, 32, 512, 4));
  const Outcome limited = wait_for(*scheduler.submit(request("Once upon a time", 5)));
  EXPECT_EQ(limited.stop, StopReason::TokenLimit);
  EXPECT_EQ(limited.stats.generated_tokens, 5);
  // The context: a 32-cell slot ends generation when the next token would not fit.
  SequenceRequest r = request("Once upon a time", -1);
  r.ignore_eos = true;
  const Outcome full = wait_for(*scheduler.submit(r));
  EXPECT_EQ(full.stop, StopReason::ContextFull);
  EXPECT_EQ(full.stats.prompt_tokens + full.stats.generated_tokens, 33);
  // A stop string taken from the greedy text itself ends it there.
  const Outcome longer = wait_for(*scheduler.submit(request("Once upon a time", 20)));
  const size_t cut = longer.text.find(' ', 8);
  ASSERT_NE(cut, std::string::npos);
  SequenceRequest stopped = request("Once upon a time", 20);
  stopped.stop = {longer.text.substr(cut, 3)};
  const Outcome s = wait_for(*scheduler.submit(stopped));
  EXPECT_EQ(s.stop, StopReason::StopString);
  EXPECT_EQ(s.text, longer.text.substr(0, longer.text.find(stopped.stop[0])));
}

TEST_F(SchedulerTest, CancelFreesTheSlotAndTheQueueIsBounded) {
  Scheduler scheduler(*engine_, options(1, 512, 512, 1));
  SequenceRequest endless = request("Once upon a time", -1);
  endless.ignore_eos = true;
  auto running = scheduler.submit(endless);
  auto waiting = scheduler.submit(request("One day", 4));
  EXPECT_THROW(scheduler.submit(request("The dog", 4)), QueueFull);
  running->cancel();
  const Outcome cancelled = wait_for(*running);
  EXPECT_EQ(cancelled.stop, StopReason::Interrupted);
  const Outcome next = wait_for(*waiting);
  EXPECT_EQ(next.stop, StopReason::TokenLimit);
  for (int i = 0; i < 100 && scheduler.active_jobs() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(scheduler.active_jobs(), 0);
  const auto slots = scheduler.slots_json();
  EXPECT_FALSE(slots[0]["is_processing"].get<bool>());
}

TEST_F(SchedulerTest, BadPromptsAreErrors) {
  Scheduler scheduler(*engine_, options(1, 8, 512, 1));
  EXPECT_THROW(scheduler.submit(SequenceRequest{}), okapi::Error);
  SequenceRequest too_long = request("Once upon a time there was a little girl named Lily", 4);
  EXPECT_THROW(scheduler.submit(too_long), okapi::Error);
  SequenceRequest bad_id = request("Once", 4);
  bad_id.prompt.push_back(100000);
  EXPECT_THROW(scheduler.submit(bad_id), okapi::Error);
}

}  // namespace
}  // namespace okapi::runtime
