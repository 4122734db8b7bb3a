#include "exact_flags.hpp"

#include "core/error.hpp"

namespace okapi::cli {

void add_exact_flags(CLI::App* cmd, bool& exact, std::string& exact_attention) {
  cmd->add_flag("--exact", exact,
                "exact integer mode: bit-identical logits on any thread count, kernel set and compiler "
                "(docs/exact-mode.md)");
  cmd->add_option("--exact-attention", exact_attention, "exact attention scores: direct (integer dot products, default), ntt (NTT-domain K cache, one 60-bit "
                  "prime) or ntt-crt (two 30-bit primes joined by CRT, no 128-bit arithmetic); same bits")
      ->capture_default_str();
}

void check_exact_flags(const CLI::App* cmd, bool exact) {
  if (!exact && cmd->get_option("--exact-attention")->count() > 0)
    throw_usage_error("--exact-attention needs --exact");
  if (!exact) return;
  for (const char* name : {"--cache-type-k", "--cache-type-v"})
    if (cmd->get_option(name)->count() > 0)
      throw_usage_error("{} cannot be combined with --exact: the exact KV store keeps K/V as int16 with one scale per "
                  "token and head", name);
}

}  // namespace okapi::cli
