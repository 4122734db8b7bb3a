// okapi compress -m IN.gguf -o OUT.gguf --ratio R [--method svd] [--type f32|f16]
// Replaces projection matrices by low-rank factors so that OUT holds about (1 - R) of IN's weight
// bytes (compress/low_rank.hpp); the engine runs OUT like any model. Prints the plan (rank and
// energy kept per matrix) and the sizes.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>

#include "common_flags.hpp"
#include "compress/low_rank.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/output_paths.hpp"
#include "format/model_file.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct CompressArgs {
  std::string model, out, type;
  compress::CompressOptions options;
};

int run(const CompressArgs& args) {
  require_input_file(args.model, "--model");
  check_output_path({args.out, "-o"}, {{args.model, "--model"}});
  compress::CompressOptions options = args.options;
  if (args.type == "f32") options.factor_type = DType::F32;
  if (args.type == "f16") options.factor_type = DType::F16;
  const gguf::File file = gguf::open_model(args.model);
  // The header waits for the first row: a plan the model cannot serve leaves stdout empty.
  bool header = false;
  const auto report = compress::compress_model(file, args.out, options, [&header](const compress::FactoredMatrix& m) {
    if (!header) {
      std::printf("| tensor                       | rows x cols   |  rank | energy kept |\n");
      std::printf("|------------------------------|---------------|------:|------------:|\n");
      header = true;
    }
    std::printf("| %-28s | %5lld x %-5lld | %5lld | %10.4f%% |\n", m.name.c_str(), static_cast<long long>(m.rows),
                static_cast<long long>(m.cols), static_cast<long long>(m.rank), 100.0 * m.energy_kept);
    std::fflush(stdout);
  });
  int64_t factored = 0;
  for (const auto& m : report.matrices) factored += m.rank > 0;
  std::fprintf(stderr,
               "compress: %s: %lld of %zu projections factored (%s), energy threshold %.4f; weights %.2f MB -> %.2f MB "
               "(%.1f%% removed)\n",
               args.out.c_str(), static_cast<long long>(factored), report.matrices.size(),
               std::string(dtype_name(report.factor_type)).c_str(), report.energy_threshold, report.bytes_before / 1e6,
               report.bytes_after / 1e6, 100.0 * (1.0 - report.bytes_after / report.bytes_before));
  return 0;
}

}  // namespace

void register_compress(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<CompressArgs>();
  auto* cmd = app.add_subcommand("compress", "replace projection matrices by low-rank factors (a smaller GGUF)");
  cmd->add_option("-m,--model", args->model, "GGUF model to compress")->required()->check(non_empty());
  cmd->add_option("-o,--output", args->out, "the compressed GGUF to write")->required()->check(non_empty());
  cmd->add_option("--ratio", args->options.ratio, "fraction of the weight bytes to remove, in (0, 1)")
      ->required()
      ->check(in_range(1e-9, 1.0 - 1e-9));
  cmd->add_option("--method", args->options.method, "how to factor: svd (truncated SVD of each matrix)")
      ->capture_default_str()
      ->check(CLI::IsMember(compress::compress_methods()));
  cmd->add_option("--type", args->type, "storage of the factors: f32 or f16 (default: f32 for an f32 model, else f16)")
      ->check(CLI::IsMember({"f32", "f16"}));
  cmd->callback([args, &result] {
    if (result.dry_run) return;
    result.exit_code = run(*args);
  });
}

}  // namespace okapi::cli
