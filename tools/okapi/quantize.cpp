// PLACEHOLDER: being written.
#include "core/error.hpp"
#include "verbs.hpp"

namespace okapi::cli {
void register_quantize(CLI::App& app, VerbResult& /*result*/) {
  auto* cmd = app.add_subcommand("quantize", "(not yet available)");
  cmd->callback([] { throw okapi::Error("quantize: not yet implemented"); });
}
}  // namespace okapi::cli
