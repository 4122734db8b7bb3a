// --exact and --exact-attention, shared by run, perplexity, bench and logits.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

namespace okapi::cli {

// --exact, --exact-attention, --exact-ring and --frobenius.
void add_exact_flags(CLI::App* cmd, bool& exact, std::string& exact_attention, std::string& exact_ring,
                     unsigned& frobenius);
// Call from the verb's callback: --exact-attention / --exact-ring / --frobenius without --exact,
// --frobenius without --exact-ring zomega, or --exact together with an
// explicit --cache-type-k/-v (the exact store has its own int16 encoding), is an error.
void check_exact_flags(const CLI::App* cmd, bool exact);

}  // namespace okapi::cli
