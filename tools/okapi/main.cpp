// okapi <verb> ...: the command-line front end (cli_app.hpp has the exit codes).
// Invoked through a link named llama-server (`ln -s okapi llama-server`), okapi is `okapi serve`
// taking llama-server's command line, so scripts and tools written for llama-server run it unchanged.
#include <string>
#include <string_view>
#include <vector>

#include "cli_app.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args;
  const std::string_view self = argc > 0 && argv[0] ? std::string_view(argv[0]) : std::string_view();
  const std::string_view name = self.substr(self.find_last_of('/') == std::string_view::npos ? 0 : self.find_last_of('/') + 1);
  if (name == "llama-server") args.emplace_back("serve");
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return okapi::cli::run_command_line(args);
}
