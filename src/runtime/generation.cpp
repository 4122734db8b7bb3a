#include "runtime/generation.hpp"

namespace okapi::runtime {

std::string_view to_string(StopReason reason) {
  switch (reason) {
    case StopReason::EndOfGeneration: return "end of generation";
    case StopReason::StopString: return "stop string";
    case StopReason::TokenLimit: return "token limit";
    case StopReason::ContextFull: return "context full";
    case StopReason::Interrupted: return "interrupted";
    case StopReason::Error: return "error";
  }
  return "unknown";
}

double GenerationStats::acceptance_rate() const {
  return drafted_tokens > 0 ? static_cast<double>(accepted_tokens) / static_cast<double>(drafted_tokens) : 0.0;
}

double GenerationStats::prompt_tokens_per_second() const {
  const int64_t run = prompt_tokens - cached_tokens;
  return prompt_seconds > 0 ? static_cast<double>(run) / prompt_seconds : 0.0;
}

double GenerationStats::generation_tokens_per_second() const {
  return generation_seconds > 0 ? static_cast<double>(generated_tokens) / generation_seconds : 0.0;
}

}  // namespace okapi::runtime
