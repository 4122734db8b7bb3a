#include "runtime/session.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include "core/error.hpp"
#include "core/progress.hpp"
#include "core/system_memory.hpp"
#include "runtime/cancel.hpp"

namespace okapi::runtime {

std::string_view to_string(StopReason reason) {
  switch (reason) {
    case StopReason::EndOfGeneration: return "end of generation";
    case StopReason::TokenLimit: return "token limit";
    case StopReason::ContextFull: return "context full";
    case StopReason::Interrupted: return "interrupted";
  }
  return "unknown";
}

double Timings::prompt_tokens_per_second() const {
  return prompt_seconds > 0 ? static_cast<double>(prompt_tokens) / prompt_seconds : 0.0;
}
double Timings::generation_tokens_per_second() const {
  return generation_seconds > 0 ? static_cast<double>(generated_tokens) / generation_seconds : 0.0;
}

double Timings::acceptance_rate() const {
  return drafted_tokens > 0 ? static_cast<double>(accepted_tokens) / static_cast<double>(drafted_tokens) : 0.0;
}

std::vector<tokenizer::TokenId> Session::tokenize_prompt(std::string_view prompt) const {
  tokenizer::EncodeOptions options;
  options.add_special = true;
  options.parse_special = true;  // as llama-cli: "<s>" in a prompt is the BOS token
  return engine_.tokenizer().encode(prompt, options);
}

bool Session::is_end_of_generation(tokenizer::TokenId id) const {
  const tokenizer::Vocab& vocab = engine_.tokenizer().vocab();
  return id == vocab.eos || id == vocab.eot;
}

GenerationResult Session::generate(std::span<const tokenizer::TokenId> prompt, sample::Sampler& sampler,
                                   const GenerateOptions& options,
                                   const std::function<void(std::string_view)>& on_text) {
  return out_of_memory_as_error("generating", [&] { return generate_tokens(prompt, sampler, options, on_text); });
}

GenerationResult Session::generate_tokens(std::span<const tokenizer::TokenId> prompt, sample::Sampler& sampler,
                                          const GenerateOptions& options,
                                          const std::function<void(std::string_view)>& on_text) {
  const int64_t n_ctx = kv_.n_ctx();
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt == 0) throw_error("the prompt has no tokens");
  if (n_prompt > n_ctx)
    throw_error("the prompt has {} tokens but the context holds only {} (-c {}); use a larger -c", n_prompt, n_ctx,
                n_ctx);
  if (options.batch_size < 1) throw_error("-b must be at least 1, got {}", options.batch_size);
  const model::Model& model = engine_.model();
  const int64_t n_vocab = model.n_vocab();
  GenerationResult result;
  result.timings.load_seconds = engine_.load_seconds();
  kv_.truncate(0);

  // Prefill: batches of the prompt; only the last batch's last row of logits is needed.
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  std::vector<int32_t> positions;
  const double prefill_start = now_seconds();
  std::optional<ProgressBar> progress;
  if (n_prompt > options.batch_size) progress.emplace("prompt", static_cast<uint64_t>(n_prompt));
  for (int64_t begin = 0; begin < n_prompt; begin += options.batch_size) {
    const int64_t count = std::min(options.batch_size, n_prompt - begin);
    positions.resize(static_cast<size_t>(count));
    std::iota(positions.begin(), positions.end(), static_cast<int32_t>(begin));
    model.forward(engine_.ops(), kv_, prompt.subspan(static_cast<size_t>(begin), static_cast<size_t>(count)),
                  positions, model::LogitRows::Last, logits.data());
    if (progress) progress->update(static_cast<uint64_t>(begin + count), "tokens");
    if (interrupt_requested()) break;
  }
  if (progress) progress->finish();
  if (options.drafter && !interrupt_requested()) {
    // The drafter's prompt pass belongs to the prompt's time, as the target's does.
    const double draft_start = now_seconds();
    options.drafter->reset();
    options.drafter->prefill(prompt);
    result.timings.draft_prompt_seconds = now_seconds() - draft_start;
  }
  result.timings.prompt_seconds = now_seconds() - prefill_start;
  if (options.after_prefill) options.after_prefill();
  result.timings.prompt_tokens = n_prompt;
  if (interrupt_requested()) {
    result.stop = StopReason::Interrupted;
    return result;
  }
  for (const auto id : prompt) sampler.accept(id);

  tokenizer::StreamDecoder decoder(engine_.tokenizer());
  const auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    result.text += piece;
    if (on_text) on_text(piece);
  };
  const double decode_start = now_seconds();
  result.stop = StopReason::TokenLimit;
  std::vector<tokenizer::TokenId> context(prompt.begin(), prompt.end());
  const auto generated = [&] { return static_cast<int64_t>(result.tokens.size()); };
  // Records a chosen token; false when generation ends with it (plain decoding's checks, in order).
  const auto take = [&](tokenizer::TokenId next) {
    sampler.accept(next);
    result.tokens.push_back(next);
    if (!options.ignore_eos && is_end_of_generation(next)) {
      result.stop = StopReason::EndOfGeneration;
      return false;
    }
    emit(decoder.push(next));
    context.push_back(next);
    if (options.n_predict >= 0 && generated() >= options.n_predict) return false;
    if (n_prompt + generated() - 1 >= n_ctx) {  // the position the token would be run at
      result.stop = StopReason::ContextFull;
      return false;
    }
    return true;
  };
  if (options.n_predict != 0 && interrupt_requested()) result.stop = StopReason::Interrupted;
  if (options.n_predict != 0 && result.stop != StopReason::Interrupted && take(sampler.sample(logits))) {
    DraftLength length(options.draft_max, options.draft_min);
    std::vector<tokenizer::TokenId> batch;
    std::vector<float> rows;
    while (true) {
      if (interrupt_requested()) {
        result.stop = StopReason::Interrupted;
        break;
      }
      // The last chosen token runs at `position`; drafts follow it, inside the context and the limit.
      const int64_t position = n_prompt + generated() - 1;
      std::vector<DraftToken> drafts;
      int requested = 0;
      double draft_seconds = 0;
      double pause_seconds = 0;
      if (options.drafter) {
        int64_t room = n_ctx - 1 - position;
        if (options.n_predict >= 0) room = std::min(room, options.n_predict - generated() - 1);
        const int k = length.next(static_cast<int>(std::clamp<int64_t>(room, 0, options.draft_max)));
        requested = k;
        if (k > 0) {
          const double t0 = now_seconds();
          drafts = options.drafter->draft(context, k, sampler);
          draft_seconds = now_seconds() - t0;
          pause_seconds = catch_up_after_pause_seconds(*options.drafter);
          if (static_cast<int>(drafts.size()) > k) drafts.resize(static_cast<size_t>(k));
          if (static_cast<int>(drafts.size()) < options.draft_min) drafts.clear();
        }
      }
      const double verify_start = now_seconds();
      batch.assign(1, context.back());
      for (const auto& d : drafts) batch.push_back(d.id);
      positions.resize(batch.size());
      std::iota(positions.begin(), positions.end(), static_cast<int32_t>(position));
      rows.resize(batch.size() * static_cast<size_t>(n_vocab));
      model.forward(engine_.ops(), kv_, batch, positions, drafts.empty() ? model::LogitRows::Last : model::LogitRows::All,
                    rows.data());
      ++result.timings.decode_passes;
      const auto row = [&](size_t i) {
        return std::span<const float>(rows.data() + i * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab));
      };
      bool going = true;
      size_t accepted = 0;
      for (size_t i = 0; i < drafts.size() && going; ++i) {
        const Verdict verdict = verify_draft(sampler.distribution(row(i)), drafts[i], sampler);
        going = take(verdict.token);
        if (!verdict.accepted) break;
        ++accepted;
      }
      // Every draft passed: the target's own next token comes free from the last row.
      if (going && accepted == drafts.size()) going = take(sampler.sample(row(drafts.size())));
      if (options.drafter)
        length.record({requested, static_cast<int>(drafts.size()), static_cast<int>(accepted), draft_seconds,
                       pause_seconds, now_seconds() - verify_start});
      result.timings.drafted_tokens += static_cast<int64_t>(drafts.size());
      result.timings.accepted_tokens += static_cast<int64_t>(accepted);
      result.timings.draft_seconds += draft_seconds;
      // Rejected drafts' cells are forgotten; the newest token has not been run yet. (A round
      // without drafts wrote nothing past it.)
      if (!drafts.empty()) kv_.truncate(n_prompt + generated() - 1);
      if (!going) break;
    }
  }
  emit(decoder.flush());
  result.timings.generation_seconds = now_seconds() - decode_start;
  result.timings.generated_tokens = static_cast<int64_t>(result.tokens.size());
  return result;
}

}  // namespace okapi::runtime
