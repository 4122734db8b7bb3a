// Each verb lives in its own file and registers a CLI11 subcommand; the callback it installs
// checks what CLI11 cannot (combinations of flags), returns early on `dry_run`, then runs the
// verb and returns the process exit code through `exit_code`.
#pragma once
#include <CLI/CLI.hpp>

namespace okapi::cli {

struct VerbResult {
  int exit_code = 0;
  bool dry_run = false;  // validate the flags, run nothing (cli_app.hpp)
  // Under mpirun: every rank reached exit_code together (a collective stop), so a non-zero one
  // does not abort the job as one rank's failure does.
  bool every_rank_exits = false;
};

void register_inspect(CLI::App& app, VerbResult& result);
void register_convert(CLI::App& app, VerbResult& result);
void register_quantize(CLI::App& app, VerbResult& result);
void register_imatrix(CLI::App& app, VerbResult& result);
void register_tokenize(CLI::App& app, VerbResult& result);
void register_synth(CLI::App& app, VerbResult& result);
void register_logits(CLI::App& app, VerbResult& result);
void register_run(CLI::App& app, VerbResult& result);
void register_perplexity(CLI::App& app, VerbResult& result);
void register_bench(CLI::App& app, VerbResult& result);
void register_kv_eval(CLI::App& app, VerbResult& result);
void register_analyze(CLI::App& app, VerbResult& result);
void register_compress(CLI::App& app, VerbResult& result);
void register_train(CLI::App& app, VerbResult& result);
void register_serve(CLI::App& app, VerbResult& result);
void register_chat(CLI::App& app, VerbResult& result);
void register_template(CLI::App& app, VerbResult& result);
void register_embed(CLI::App& app, VerbResult& result);

}  // namespace okapi::cli
