// okapi compress -m IN.gguf -o OUT.gguf --ratio R [--method M] [--calib TEXT] [--calib-tokens N]
//                [--ranks auto|energy|uniform|mcr|FILE] [--type T]
// Replaces projection matrices by low-rank factors so that OUT holds about (1 - R) of IN's weight
// bytes (compress/low_rank.hpp); the engine runs OUT like any model. Calibrated methods first run
// the model over TEXT (compress/calibration.hpp). Prints the plan (rank and energy kept per
// matrix) and the sizes.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "common_flags.hpp"
#include "compress/gauge.hpp"
#include "compress/low_rank.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/output_paths.hpp"
#include "core/progress.hpp"
#include "eval/perplexity.hpp"
#include "format/model_file.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

// A scratch file removed when it goes out of scope (the gauged copy of the model).
class TemporaryFile {
 public:
  explicit TemporaryFile(std::filesystem::path path) : path_(std::move(path)) {}
  ~TemporaryFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct CompressArgs {
  std::string model, out, type, calib, gauge = "none";
  double ratio = 0;
  int64_t calib_tokens = 8192;
  int threads = 0;
  compress::CompressOptions options;
};

int run(const CompressArgs& args) {
  require_input_file(args.model, "--model");
  check_output_path({args.out, "-o"}, {{args.model, "--model"}});
  compress::CompressOptions options = args.options;
  if (args.ratio > 0) options.ratio = args.ratio;
  if (!args.type.empty()) {
    const auto type = dtype_from_name(args.type);
    if (!type) throw_usage_error("compress: --type '{}' is not a tensor type (f32, f16, q8_0, ...)", args.type);
    options.factor_type = *type;
  }
  const std::string ranks = options.ranks == "auto" ? compress::default_rank_allocation(options.method) : options.ranks;
  const bool ranks_file = ranks != "energy" && ranks != "uniform" && ranks != "mcr";
  if (!ranks_file && !options.ratio) throw_usage_error("compress: --ratio R is required (or --ranks FILE)");
  if (ranks_file && options.ratio) throw_usage_error("compress: --ranks FILE sets the ranks; leave out --ratio");
  if (ranks_file) require_input_file(ranks, "--ranks");
  const bool gauge = args.gauge == "pca";
  const bool wants_calibration = compress::method_needs_calibration(options.method) || ranks == "mcr" || gauge ||
                                 (options.method == "gp" && !args.calib.empty());
  if (!args.calib.empty() && !wants_calibration) {
    throw_usage_error("compress: --method {} with --ranks {} does not use calibration text; leave out --calib",
                      options.method, ranks);
  }
  if (wants_calibration && args.calib.empty()) {
    throw_usage_error("compress: --method {} with --ranks {}{} needs calibration text: --calib TEXT", options.method,
                      ranks, gauge ? " and --gauge pca" : "");
  }
  std::optional<gguf::File> file = gguf::open_model(args.model);
  compress::Calibration calibration;
  compress::CalibrationSource source;
  std::unique_ptr<ProgressBar> progress;
  std::filesystem::path model_path = args.model;
  // Beside the output; for a device or FIFO (/dev/null) in the temp directory.
  const std::filesystem::path out_path(args.out);
  TemporaryFile gauged(
      written_in_place(out_path)
          ? std::filesystem::temp_directory_path() / fmt::format(".okapi-{}.gauged.tmp", ::getpid())
          : out_path.parent_path() / ("." + out_path.filename().string() + ".gauged.tmp"));
  if (wants_calibration) {
    require_input_file(args.calib, "--calib");
    compress::CalibrationOptions calib_options;
    calib_options.max_tokens = args.calib_tokens;
    calib_options.threads = args.threads > 0 ? args.threads : default_threads();
    source.text = okapi::read_text_file(args.calib);
    if (gauge) {
      // The residual stream's PCA from the original, then everything else on the rotated copy.
      const compress::Calibration original = compress::calibrate(args.model, source.text, calib_options);
      const compress::GaugeReport g = compress::write_orthogonal_gauge(*file, original.residual_second_moment, gauged.path());
      double original_bytes = 0;
      for (const gguf::TensorInfo& t : file->tensors()) original_bytes += static_cast<double>(t.nbytes);
      options.reference_bytes = original_bytes;
      model_path = gauged.path();
      file = gguf::open_model(model_path);
      std::fprintf(stderr, "compress: orthogonal gauge (residual PCA: %.1f%% of the energy in the first 10%% of directions)%s\n",
                   100.0 * g.top_energy, g.untied_output ? "; the tied output head is now its own tensor" : "");
    }
    source.model = model_path;
    source.options = calib_options;
    options.source = &source;
    options.on_site = [&progress](size_t site, size_t sites) {
      if (!progress) progress = std::make_unique<ProgressBar>("compress: fitting input sites", sites);
      progress->update(site);
      if (site == sites) progress->finish();
    };
    calibration = compress::calibrate(model_path, source.text, calib_options);
    std::fprintf(stderr, "compress: calibrated on %lld tokens of %s\n", static_cast<long long>(calibration.tokens),
                 args.calib.c_str());
    options.calibration = &calibration;
  }
  // The header waits for the first row: a plan the model cannot serve leaves stdout empty.
  bool header = false;
  std::FILE* const table = report_stream({args.out});  // stderr when the model goes to stdout
  const auto report = compress::compress_model(*file, args.out, options, [&header, table](const compress::FactoredMatrix& m) {
    if (!header) {
      std::fprintf(table, "| tensor                       | rows x cols   |  rank | energy kept | basis\n");
      std::fprintf(table, "|------------------------------|---------------|------:|------------:|------\n");
      header = true;
    }
    std::fprintf(table, "| %-28s | %5lld x %-5lld | %5lld | %10.4f%% | %s%s\n", m.name.c_str(), static_cast<long long>(m.rows),
                static_cast<long long>(m.cols), static_cast<long long>(m.rank), 100.0 * m.energy_kept,
                m.basis.empty() ? "own" : m.basis.c_str(), m.sink_vector ? " +sink" : "");
    std::fflush(table);
  });
  int64_t factored = 0;
  for (const auto& m : report.matrices) factored += m.rank > 0;
  for (const std::string& note : report.notes) std::fprintf(stderr, "compress: %s\n", note.c_str());
  std::fprintf(stderr,
               "compress: %s: method %s, ranks %s (parameter %.4f), %lld of %zu projections factored (%s); weights "
               "%.2f MB -> %.2f MB (%.1f%% removed)\n",
               args.out.c_str(), report.method.c_str(), report.ranks.c_str(), report.allocation_parameter,
               static_cast<long long>(factored), report.matrices.size(),
               std::string(dtype_name(report.factor_type)).c_str(), report.bytes_before / 1e6,
               report.bytes_after / 1e6, 100.0 * (1.0 - report.bytes_after / report.bytes_before));
  return 0;
}

}  // namespace

void register_compress(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<CompressArgs>();
  auto* cmd = app.add_subcommand("compress", "replace projection matrices by low-rank factors (a smaller GGUF)");
  cmd->add_option("-m,--model", args->model, "GGUF model to compress")->required()->check(non_empty());
  cmd->add_option("-o,--output", args->out, "the compressed GGUF to write")->required()->check(non_empty());
  cmd->add_option("--ratio", args->ratio, "fraction of the weight bytes to remove, in (0, 1)")
      ->check(in_range(1e-9, 1.0 - 1e-9));
  cmd->add_option("--method", args->options.method,
                  "best (okapi's measured best: SVD-LLM whitening with energy-threshold ranks), svd, asvd, svd-llm, "
                  "basis-sharing, grc (seed 003: shared Q/K/V basis), gp (seed 003: per-slot PCA, MCR ranks)")
      ->capture_default_str()
      ->check(CLI::IsMember(compress::compress_methods()));
  cmd->add_option("--calib", args->calib, "calibration text for asvd, svd-llm, basis-sharing, best, and mcr ranks")
      ->check(non_empty());
  cmd->add_option("--calib-tokens", args->calib_tokens, "tokens of the calibration text to run")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{128}, int64_t{1} << 24));
  cmd->add_option("--ranks", args->options.ranks,
                  "rank allocation: auto (the method's), energy, uniform, mcr, or a file of 'NAME RANK' lines")
      ->capture_default_str()
      ->check(non_empty());
  cmd->add_option("--share-layers", args->options.share_layers, "basis-sharing: layers per shared basis")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  cmd->add_option("--type", args->type,
                  "storage of the factors: f32, f16 or a quantized type such as q8_0 (default: f32 for an f32 model, "
                  "else f16)");
  cmd->add_option("--gauge", args->gauge,
                  "none, or pca: fold the RMSNorm weights into the matrices and rotate the residual stream to its "
                  "principal axes first (SliceGPT's orthogonal gauge; needs --calib)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "pca"}));
  add_threads_flag(cmd, args->threads);
  cmd->callback([args, &result] {
    if (result.dry_run) return;
    result.exit_code = run(*args);
  });
}

}  // namespace okapi::cli
