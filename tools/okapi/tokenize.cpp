// PLACEHOLDER: being written.
#include "core/error.hpp"
#include "verbs.hpp"

namespace okapi::cli {
void register_tokenize(CLI::App& app, VerbResult& /*result*/) {
  auto* cmd = app.add_subcommand("tokenize", "(not yet available)");
  cmd->callback([] { throw okapi::Error("tokenize: not yet implemented"); });
}
}  // namespace okapi::cli
