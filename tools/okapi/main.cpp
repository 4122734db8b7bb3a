// okapi <verb> ...: the command-line front end (cli_app.hpp has the exit codes).
#include <string>
#include <vector>

#include "cli_app.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return okapi::cli::run_command_line(args);
}
