// --exact and --exact-attention, shared by run, perplexity, bench and logits.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

namespace okapi::cli {

void add_exact_flags(CLI::App* cmd, bool& exact, std::string& exact_attention);
// Call from the verb's callback: --exact-attention without --exact, or --exact together with an
// explicit --cache-type-k/-v (the exact store has its own int16 encoding), is an error.
void check_exact_flags(const CLI::App* cmd, bool exact);

}  // namespace okapi::cli
