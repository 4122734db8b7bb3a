#include "exact_flags.hpp"

#include <array>
#include <optional>
#include <string>
#include <utility>

#include "core/error.hpp"

namespace okapi::cli {

namespace {

constexpr std::array<std::pair<std::string_view, kv::ExactScores>, 3> kExactAttention = {{
    {"direct", kv::ExactScores::Direct},
    {"ntt", kv::ExactScores::Ntt},
    {"ntt-crt", kv::ExactScores::NttCrt},
}};

std::optional<kv::ExactScores> find_exact_attention(std::string_view name) {
  for (const auto& [known, scores] : kExactAttention)
    if (known == name) return scores;
  return std::nullopt;
}

}  // namespace

std::string_view exact_attention_name(kv::ExactScores scores) {
  for (const auto& [name, known] : kExactAttention)
    if (known == scores) return name;
  return {};
}

void add_exact_flags(CLI::App* cmd, bool& exact, kv::ExactScores& exact_attention, backend::ExactRing& exact_ring) {
  cmd->add_flag("--exact", exact,
                "exact integer mode: bit-identical logits on any thread count, kernel set and compiler "
                "(docs/exact-mode.md)");
  cmd->add_option_function<std::string>(
         "--exact-attention",
         // An unknown name is reported by check_exact_flags, after "needs --exact".
         [&exact_attention](const std::string& name) {
           if (const auto scores = find_exact_attention(name)) exact_attention = *scores;
         },
         "exact attention scores: direct (integer dot products, default), ntt (NTT-domain K cache, one 60-bit "
         "prime) or ntt-crt (two 30-bit primes joined by CRT, no 128-bit arithmetic); same bits")
      ->default_str(std::string(exact_attention_name(exact_attention)));
  cmd->add_option_function<std::string>(
         "--exact-ring", [&exact_ring](const std::string& name) { exact_ring.zomega = name == "zomega"; },
         "exact weight products: integer (int16 dot products, default) or zomega (seed 000's Z[w] matvec, same "
         "bits)")
      ->default_str(exact_ring.zomega ? "zomega" : "integer")
      ->check(CLI::IsMember({"integer", "zomega"}));
  cmd->add_option("--frobenius", exact_ring.frobenius,
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
  if (const CLI::Option* attention = cmd->get_option("--exact-attention"); attention->count() > 0) {
    const std::string name = attention->as<std::string>();
    if (!find_exact_attention(name))
      throw_error("--exact-attention must be 'direct', 'ntt' or 'ntt-crt', got '{}'", name);
  }
  for (const char* name : {"--cache-type-k", "--cache-type-v"})
    if (cmd->get_option(name)->count() > 0)
      throw_usage_error("{} cannot be combined with --exact: the exact KV store keeps K/V as int16 with one scale per "
                  "token and head", name);
}

}  // namespace okapi::cli
