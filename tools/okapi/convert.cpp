// PLACEHOLDER: being written.
#include "core/error.hpp"
#include "verbs.hpp"

namespace okapi::cli {
void register_convert(CLI::App& app, VerbResult& /*result*/) {
  auto* cmd = app.add_subcommand("convert", "(not yet available)");
  cmd->callback([] { throw okapi::Error("convert: not yet implemented"); });
}
}  // namespace okapi::cli
