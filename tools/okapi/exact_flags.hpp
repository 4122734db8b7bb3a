// --exact and --exact-attention, shared by run, perplexity, bench and logits.
#pragma once
#include <CLI/CLI.hpp>

#include <string_view>

#include "kv/exact_store.hpp"
#include "backend/exact_ops.hpp"

namespace okapi::cli {

// --exact, --exact-attention, --exact-ring and --frobenius, parsed into typed options; their
// values at the call are the defaults shown.
void add_exact_flags(CLI::App* cmd, bool& exact, kv::ExactScores& exact_attention, backend::ExactRing& exact_ring);
// Call from the verb's callback: --exact-attention / --exact-ring / --frobenius without --exact,
// --frobenius without --exact-ring zomega, an unknown --exact-attention, or --exact together with an
// explicit --cache-type-k/-v (the exact store has its own int16 encoding), is an error.
void check_exact_flags(const CLI::App* cmd, bool exact);
// The --exact-attention name of `scores`: "direct", "ntt" or "ntt-crt".
std::string_view exact_attention_name(kv::ExactScores scores);

}  // namespace okapi::cli
