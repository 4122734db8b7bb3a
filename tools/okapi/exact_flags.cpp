#include "exact_flags.hpp"

#include "core/error.hpp"

namespace okapi::cli {

void add_exact_flags(CLI::App* cmd, bool& exact, std::string& exact_attention, std::string& exact_ring,
                     unsigned& frobenius) {
  cmd->add_flag("--exact", exact,
                "exact integer mode: bit-identical logits on any thread count, kernel set and compiler "
                "(docs/exact-mode.md)");
  cmd->add_option("--exact-attention", exact_attention, "exact attention scores: direct (integer dot products, default), ntt (NTT-domain K cache, one 60-bit "
                  "prime) or ntt-crt (two 30-bit primes joined by CRT, no 128-bit arithmetic); same bits")
      ->capture_default_str();
  cmd->add_option("--exact-ring", exact_ring,
                  "exact weight products: integer (int16 dot products, default) or zomega (seed 000's Z[w] matvec, "
                  "same bits)")
      ->capture_default_str()
      ->check(CLI::IsMember({"integer", "zomega"}));
  cmd->add_option("--frobenius", frobenius,
                  "with --exact-ring zomega: shim the weights by pi^K (pi = w, norm 41) at load and divide every "
                  "product by it; the logits stay bit-identical")
      ->capture_default_str()
      ->check(CLI::Range(0u, 64u));
}

void check_exact_flags(const CLI::App* cmd, bool exact) {
  for (const char* name : {"--exact-attention", "--exact-ring", "--frobenius"})
    if (!exact && cmd->get_option(name)->count() > 0) throw_usage_error("{} needs --exact", name);
  if (cmd->get_option("--frobenius")->count() > 0 && cmd->get_option("--exact-ring")->as<std::string>() != "zomega")
    throw_usage_error("--frobenius needs --exact-ring zomega");
  if (!exact) return;
  for (const char* name : {"--cache-type-k", "--cache-type-v"})
    if (cmd->get_option(name)->count() > 0)
      throw_usage_error("{} cannot be combined with --exact: the exact KV store keeps K/V as int16 with one scale per "
                  "token and head", name);
}

}  // namespace okapi::cli
