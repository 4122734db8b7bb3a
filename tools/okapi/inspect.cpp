// PLACEHOLDER: being written.
#include "core/error.hpp"
#include "verbs.hpp"

namespace okapi::cli {
void register_inspect(CLI::App& app, VerbResult& /*result*/) {
  auto* cmd = app.add_subcommand("inspect", "(not yet available)");
  cmd->callback([] { throw okapi::Error("inspect: not yet implemented"); });
}
}  // namespace okapi::cli
