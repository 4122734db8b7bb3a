// okapi <verb> ...: the command-line front end. Errors become a message on stderr and exit code 1;
// bad flags exit with CLI11's usage code (non-zero).
#include <cstdio>
#include <exception>

#include "core/error.hpp"
#include "verbs.hpp"

int main(int argc, char** argv) {
  CLI::App app{"okapi: run, compress and train transformer language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "okapi 0.1.0");
  okapi::cli::VerbResult result;
  okapi::cli::register_inspect(app, result);
  okapi::cli::register_convert(app, result);
  okapi::cli::register_quantize(app, result);
  okapi::cli::register_tokenize(app, result);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const okapi::Error& e) {
    std::fprintf(stderr, "okapi: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "okapi: internal error: %s\n", e.what());
    return 2;
  }
  return result.exit_code;
}
