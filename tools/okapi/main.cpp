// okapi <verb> ...: the command-line front end (cli_app.hpp has the exit codes).
#include <string>
#include <vector>

#include "cli_app.hpp"
#include "common_flags.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  if (const int code = okapi::cli::accept_llama_habits(args); code != 0) return code;  // -ngl, -fa, -cnv
  return okapi::cli::run_command_line(args);
}
