// The whole command line of okapi: builds the verbs, parses, runs the chosen one and turns every
// failure into one `okapi: error: ...` line on stderr. Exit codes: 0 success, 1 an error while
// working (bad file, missing model, out of memory), 2 a command line that cannot be valid
// (no or unknown verb, unknown flag, missing or out-of-range value), 130 interrupted.
#pragma once
#include <string>
#include <vector>

namespace okapi::cli {

inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

struct CliMode {
  // Parse and validate only; run no verb (the argument-parser fuzz target uses this).
  bool dry_run = false;
};

// `args` excludes the program name: {"run", "-m", "model.gguf"}.
int run_command_line(const std::vector<std::string>& arguments, const CliMode& mode = {});

}  // namespace okapi::cli
