// Runs the real okapi binary as a user would (or any command line), capturing exit code and output.
#pragma once
#include <string>

namespace okapi::test {

struct CommandResult {
  int exit_code = -1;   // -1 when the process did not exit normally (crash, signal)
  std::string output;   // stdout and stderr interleaved
};

// `command` runs through /bin/sh with stderr redirected into the captured stdout.
CommandResult run_command(const std::string& command);

// `text` single-quoted for /bin/sh: any bytes but NUL pass through unchanged.
std::string shell_quote(const std::string& text);

// `args` is appended to the okapi binary path and run through /bin/sh.
CommandResult run_cli(const std::string& args);

}  // namespace okapi::test
