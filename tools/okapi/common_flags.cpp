#include "common_flags.hpp"

#include "sample/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "kv/kv_store.hpp"

namespace okapi::cli {
namespace {

constexpr double kMaxCount = 2147483647.0;  // counts and lengths are int32 in GGUF and the KV cache

std::string bound(double v) {
  if (v == kUnbounded) return "inf";
  if (v == -kUnbounded) return "-inf";
  return fmt::format("{}", v);
}

// "" when `text` is a finite number in [lo, hi], else the reason.
std::string check_number(const std::string& text, double lo, double hi) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || std::isnan(v))
    return fmt::format("'{}' is not a number", text);
  if (!std::isfinite(v) || errno == ERANGE || v < lo || v > hi)
    return fmt::format("{} is out of range [{}, {}]", text, bound(lo), bound(hi));
  return {};
}

}  // namespace

CLI::Validator in_range(double lo, double hi) {
  return CLI::Validator([lo, hi](std::string& value) { return check_number(value, lo, hi); },
                        fmt::format("in [{}, {}]", bound(lo), bound(hi)));
}

CLI::Validator each_in_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& value) {
        if (value.empty()) return std::string("the list is empty");
        size_t start = 0;
        while (start <= value.size()) {
          const size_t comma = std::min(value.find(',', start), value.size());
          const std::string item = value.substr(start, comma - start);
          if (std::string reason = check_number(item, lo, hi); !reason.empty()) return reason;
          start = comma + 1;
        }
        return std::string();
      },
      fmt::format("each in [{}, {}]", bound(lo), bound(hi)));
}

CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& value) { return value.empty() ? std::string("the value is empty") : std::string(); }, "");
}

void add_threads_flag(CLI::App* cmd, int& threads) {
  cmd->add_option("-t,--threads", threads, "threads (default: one per core)")
      ->capture_default_str()
      ->check(in_range(1, kMaxThreads));
}

void add_ctx_flag(CLI::App* cmd, int64_t& n_ctx, const std::string& description) {
  cmd->add_option("-c,--ctx-size", n_ctx, description)->check(in_range(0, kMaxCount));
}

void add_batch_flag(CLI::App* cmd, int64_t& batch_size, const std::string& description) {
  cmd->add_option("-b,--batch-size", batch_size, description)->capture_default_str()->check(in_range(1, kMaxCount));
}

void add_seed_flag(CLI::App* cmd, int64_t& seed) {
  cmd->add_option("-s,--seed", seed, "RNG seed (-1: random)")->capture_default_str()->check(in_range(-1, 4294967295.0));
}

void add_cache_type_flags(CLI::App* cmd, std::string& type_k, std::string& type_v, std::string& kv_rotate) {
  // The store factory's list is the one list of types.
  const auto known_type = CLI::Validator(
      [](std::string& value) {
        try {
          kv::check_cache_type("the cache", value);
          return std::string();
        } catch (const Error& e) {
          return std::string(e.what());
        }
      },
      "");
  const std::string names = fmt::format("{}", fmt::join(kv::cache_type_names(), ", "));
  cmd->add_option("--cache-type-k", type_k, "K cache type: " + names + " (also -ctk)")
      ->capture_default_str()
      ->check(known_type);
  cmd->add_option("--cache-type-v", type_v, "V cache type: " + names + " (also -ctv)")
      ->capture_default_str()
      ->check(known_type);
  cmd->add_option("--kv-rotate", kv_rotate,
                  "rotate K and V rows before storing them: none, or hadamard (seeded randomized Hadamard per layer "
                  "and head; any head width)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "hadamard"}));
}

int default_threads() { return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 512u)); }

void add_sampling_flags(CLI::App* cmd, sample::SamplerConfig& s) {
  cmd->add_option("--temp", s.temperature, "temperature (<= 0: greedy)")->capture_default_str()->check(in_range(-kUnbounded, kUnbounded));
  cmd->add_option("--top-k", s.top_k, "top-k (<= 0: off)")->capture_default_str()->check(in_range(-kUnbounded, kUnbounded));
  cmd->add_option("--top-p", s.top_p, "top-p (1: off)")->capture_default_str()->check(in_range(0, 1));
  cmd->add_option("--min-p", s.min_p, "min-p (0: off)")->capture_default_str()->check(in_range(0, 1));
  cmd->add_option("--typical", s.typical_p, "locally typical sampling p (1: off)")->capture_default_str()->check(in_range(0, 1));
  cmd->add_option("--repeat-penalty", s.repeat_penalty, "repetition penalty (1: off)")->capture_default_str()
      ->check(in_range(1e-6, kUnbounded));
  cmd->add_option("--repeat-last-n", s.repeat_last_n, "penalty window (0: off, -1: all)")->capture_default_str()
      ->check(in_range(-1, kUnbounded));
  cmd->add_option("--frequency-penalty", s.frequency_penalty, "frequency penalty")->capture_default_str()
      ->check(in_range(-kUnbounded, kUnbounded));
  cmd->add_option("--presence-penalty", s.presence_penalty, "presence penalty")->capture_default_str()
      ->check(in_range(-kUnbounded, kUnbounded));
}

}  // namespace okapi::cli
