// libFuzzer target for okapi's command line: the input, split at NUL bytes, is the argument list
// (verb, flags, values). It is parsed and validated in dry-run mode (cli_app.hpp: no verb runs,
// no model is read, nothing is written). A crash, a sanitizer report, an exception escaping
// run_command_line or an exit code other than 0, 1 or 2 is a finding. Run it with -close_fd_mask=3
// to keep the help texts and error messages of millions of inputs off the console.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli_app.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kMaxArgs = 64;
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      if (args.size() == kMaxArgs) break;
      args.emplace_back();
    } else {
      args.back().push_back(static_cast<char>(data[i]));
    }
  }
  if (size == 0) args.clear();
  okapi::cli::CliMode mode;
  mode.dry_run = true;
  const int code = okapi::cli::run_command_line(args, mode);
  if (code != 0 && code != 1 && code != 2) std::abort();
  return 0;
}
