// okapi <verb> ...: the command-line front end. Errors become a message on stderr and exit code 1;
// bad flags exit with CLI11's usage code (non-zero).
#include <cstdio>
#include <exception>
#include <string_view>

#include "core/error.hpp"
#include "verbs.hpp"

namespace {

// llama.cpp spells the KV cache type flags -ctk / -ctv; CLI11 only accepts one-letter short
// names, so they are rewritten to their long forms before parsing.
void rewrite_llama_style_flags(int argc, char** argv) {
  static char cache_type_k[] = "--cache-type-k";
  static char cache_type_v[] = "--cache-type-v";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-ctk") argv[i] = cache_type_k;
    if (arg == "-ctv") argv[i] = cache_type_v;
  }
}

}  // namespace

int main(int argc, char** argv) {
  rewrite_llama_style_flags(argc, argv);
  CLI::App app{"okapi: run, compress and train transformer language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "okapi 0.1.0");
  okapi::cli::VerbResult result;
  okapi::cli::register_inspect(app, result);
  okapi::cli::register_convert(app, result);
  okapi::cli::register_quantize(app, result);
  okapi::cli::register_tokenize(app, result);
  okapi::cli::register_synth(app, result);
  okapi::cli::register_logits(app, result);
  okapi::cli::register_run(app, result);
  okapi::cli::register_perplexity(app, result);
  okapi::cli::register_bench(app, result);
  okapi::cli::register_train(app, result);
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
