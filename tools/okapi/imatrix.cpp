// okapi imatrix -m MODEL -f TEXT [-o imatrix.gguf] [-c 512] [--chunks N] [--chunk N]
//               [--in-file F ...] [--output-format gguf|dat] [--process-output] [--no-ppl]
//               [--save-frequency N] [--output-frequency N] [-t N] [-ctk T] [-ctv T]
// llama-imatrix's importance matrix (eval/imatrix.hpp): per weight, the sums of the squared
// inputs of every column and the activation counts (per expert for MoE weights), written in
// llama-imatrix's GGUF format or its legacy .dat. The running perplexity of each chunk is printed
// as llama-imatrix prints it ("[1]12.3456,[2]..."). --in-file files are merged first; with no -f,
// they are only combined into -o.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common_flags.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/output_paths.hpp"
#include "core/progress.hpp"
#include "eval/imatrix.hpp"
#include "quantize/imatrix_file.hpp"
#include "runtime/cancel.hpp"
#include "runtime/engine.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct ImatrixArgs {
  std::string model;
  std::string text_file;
  std::string output = "imatrix.gguf";
  std::string output_format = "gguf";
  std::vector<std::string> in_files;
  eval::ImatrixOptions options;
  bool no_ppl = false;
  int64_t save_frequency = 0;
  int64_t output_frequency = 10;
  // llama-imatrix's default cache types (F16).
  runtime::EngineOptions engine{default_threads(), {kv::CacheType::f16(), kv::CacheType::f16()}};
};

void check_flags(const ImatrixArgs& args) {
  if (args.text_file.empty() && args.in_files.empty())
    throw UsageError("imatrix: no text (-f) to run and no --in-file to combine");
  if (!args.text_file.empty() && args.model.empty()) throw UsageError("imatrix: -f needs a model (-m)");
}

void save(const quantize::Imatrix& imatrix, const std::string& path, bool dat) {
  if (dat) {
    quantize::write_imatrix_dat(imatrix, path);
  } else {
    quantize::write_imatrix_gguf(imatrix, path);
  }
}

int run(ImatrixArgs args) {
  const bool dat = args.output_format == "dat";
  std::vector<NamedPath> inputs;
  if (!args.model.empty()) inputs.push_back({args.model, "-m"});
  if (!args.text_file.empty()) inputs.push_back({args.text_file, "-f"});
  for (const std::string& f : args.in_files) inputs.push_back({f, "--in-file"});
  check_output_path({args.output, "-o"}, inputs);
  if (!dat && !args.output.ends_with(".gguf"))
    std::fprintf(stderr, "imatrix: writing the GGUF format to '%s', whose name does not end in .gguf "
                         "(--output-format dat writes the legacy format)\n", args.output.c_str());

  // --in-file: merged as llama-imatrix loads them, legacy files scaled by the chunk size (-c).
  quantize::Imatrix imatrix;
  imatrix.chunk_size = args.options.n_ctx;
  for (const std::string& f : args.in_files) {
    std::fprintf(stderr, "imatrix: loading '%s'\n", f.c_str());
    quantize::merge_imatrix(imatrix, quantize::read_imatrix(f), args.options.n_ctx);
  }
  imatrix.chunk_count = eval::imatrix_chunk_count(imatrix);

  if (args.text_file.empty()) {
    save(imatrix, args.output, dat);
    std::fprintf(stderr, "imatrix: %s %zu entries (%lld chunks) to '%s'\n",
                 args.in_files.size() > 1 ? "combined" : "wrote", imatrix.entries.size(),
                 static_cast<long long>(imatrix.chunk_count), args.output.c_str());
    return 0;
  }

  args.options.compute_ppl = !args.no_ppl;
  args.options.dataset = args.text_file;
  const std::string text = okapi::read_text_file(args.text_file);
  std::FILE* report = report_stream({args.output});  // stderr when -o is stdout
  const auto engine = runtime::Engine::load(args.model, args.engine);
  std::fprintf(stderr, "imatrix: model loaded in %.2f ms\n", engine->load_seconds() * 1e3);
  runtime::install_interrupt_handler();
  std::unique_ptr<ProgressBar> progress;
  const auto on_chunk = [&](const eval::ImatrixChunkReport& c) {
    if (!progress) {
      std::fprintf(stderr, "imatrix: computing over %lld chunks, n_ctx=%lld; %.2f seconds per pass - ETA %.2f minutes\n",
                   static_cast<long long>(c.n_chunks), static_cast<long long>(args.options.n_ctx), c.seconds,
                   c.seconds * static_cast<double>(c.n_chunks) / 60.0);
      progress = std::make_unique<ProgressBar>("imatrix", static_cast<uint64_t>(c.n_chunks));
    }
    if (args.options.compute_ppl) {
      std::fprintf(report, "[%lld]%.4f,", static_cast<long long>(c.chunk + 1), c.running_ppl);
      std::fflush(report);
    }
    progress->update(static_cast<uint64_t>(c.chunk + 1),
                     args.options.compute_ppl ? fmt::format("ppl {:.4f}", c.running_ppl) : std::string());
    const int64_t done = imatrix.chunk_count;
    // (an output written in place, a device or stdout, gets the final matrix only)
    if (args.output_frequency > 0 && done % args.output_frequency == 0 && !written_in_place(args.output))
      save(imatrix, args.output, dat);
    if (args.save_frequency > 0 && done % args.save_frequency == 0)
      save(imatrix, args.output + ".at_" + std::to_string(done), dat);
  };
  const eval::ImatrixResult r = eval::collect_imatrix(*engine, text, args.options, imatrix, on_chunk);
  if (progress) progress->finish();
  std::fprintf(report, "\n");
  if (r.interrupted) std::fprintf(stderr, "imatrix: interrupted after %lld chunks\n", static_cast<long long>(r.n_chunks));
  if (args.options.compute_ppl && r.n_chunks > 0)
    std::fprintf(report, "Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_stderr);
  std::fflush(report);
  save(imatrix, args.output, dat);
  std::fprintf(stderr, "imatrix: %lld chunks of %lld tokens in %.2f s; %zu entries written to '%s'\n",
               static_cast<long long>(r.n_chunks), static_cast<long long>(args.options.n_ctx), r.seconds,
               imatrix.entries.size(), args.output.c_str());
  return r.interrupted ? 130 : 0;
}

}  // namespace

void register_imatrix(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<ImatrixArgs>();
  auto& o = args->options;
  auto* cmd = app.add_subcommand("imatrix", "importance matrix of a text for quantization, as llama-imatrix computes it");
  cmd->add_option("-m,--model", args->model, "GGUF model (needed with -f)")->check(non_empty());
  cmd->add_option("-f,--file", args->text_file, "calibration text")->check(non_empty());
  cmd->add_option("-o,--output", args->output, "output file")->capture_default_str()->check(non_empty());
  cmd->add_option("-c,--ctx-size", o.n_ctx, "tokens per chunk")->capture_default_str()->check(in_range(2, 2147483647));
  cmd->add_option("--chunks", o.n_chunks, "chunks to process (-1: all)")->capture_default_str()
      ->check(in_range(-1, kUnbounded));
  cmd->add_option("--chunk,--from-chunk", o.from_chunk, "skip this many chunks of the text first")
      ->capture_default_str()->check(in_range(0, kUnbounded));
  cmd->add_option("--in-file", args->in_files, "importance matrix to merge first (repeat or comma-separate)")
      ->delimiter(',')->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->check(non_empty());
  cmd->add_option("--output-format", args->output_format, "gguf, or dat (llama-imatrix's legacy format)")
      ->capture_default_str()->check(CLI::IsMember({"gguf", "dat"}));
  cmd->add_flag("--process-output", o.process_output, "collect output.weight too");
  cmd->add_flag("--no-ppl", args->no_ppl, "do not compute the perplexity");
  cmd->add_option("--save-frequency", args->save_frequency, "also write OUTPUT.at_N every N chunks (0: never)")
      ->capture_default_str()->check(in_range(0, kUnbounded));
  cmd->add_option("--output-frequency", args->output_frequency, "rewrite the output every N chunks (0: at the end)")
      ->capture_default_str()->check(in_range(0, kUnbounded));
  add_threads_flag(cmd, args->engine.threads);
  add_cache_type_flags(cmd, args->engine.cache);
  cmd->callback([args, &result] {
    check_flags(*args);
    if (result.dry_run) return;
    result.exit_code = run(*args);
  });
}

}  // namespace okapi::cli
