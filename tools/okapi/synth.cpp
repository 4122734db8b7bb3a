// okapi synth --preset P [--arch A] [--type T] [--seed S] [--layers N] [-t N] -o FILE
// A random-weight GGUF of a real model's shape (synth/presets.hpp), deterministic by seed and
// readable by llama.cpp: the benchmark models.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "common_flags.hpp"
#include "core/error.hpp"
#include "core/output_paths.hpp"
#include "core/progress.hpp"
#include "quantize/mix.hpp"
#include "synth/synth.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct SynthArgs {
  synth::SynthOptions options;
  std::string output;
  int threads = default_threads();
};

std::string presets_footer() {
  std::string s = "Presets (architectures):";
  for (const auto& p : synth::all_presets()) {
    std::string archs;
    for (auto a : p.archs) archs += (archs.empty() ? "" : ", ") + std::string(a);
    s += fmt::format("\n  {:<16} {}", p.name, archs);
  }
  s += "\nTypes:";
  for (const auto& m : quantize::all_mixes()) s += fmt::format(" {}", m.name);
  return s;
}

void run_synth(SynthArgs& args) {
  args.options.n_threads = args.threads;
  std::unique_ptr<ProgressBar> bar;
  const auto report = synth::write_synth(args.options, args.output, [&bar](size_t done, size_t total,
                                                                           const std::string& name) {
    if (!bar) bar = std::make_unique<ProgressBar>("synth", total);
    bar->update(done, name);
  });
  if (bar) bar->finish();
  // stderr when the model goes to stdout
  fmt::print(report_stream({args.output}), "{}: {} {} layers, {} tensors, {:.1f} M parameters, {}, {:.2f} MiB, {:.2f} s\n",
             args.output, report.arch, report.n_layer, report.n_tensors, static_cast<double>(report.n_params) / 1e6,
             args.options.type, static_cast<double>(report.file_bytes) / (1024.0 * 1024.0), report.seconds);
}

// A CLI11 check from a function that throws okapi::Error: the error's text is the reason, so a bad
// value is a usage error (exit 2) naming the flag.
CLI::Validator checked_by(void (*check)(const std::string&)) {
  return CLI::Validator(
      [check](std::string& value) {
        try {
          check(value);
          return std::string();
        } catch (const Error& e) {
          return std::string(e.what());
        }
      },
      "");
}

// --arch must be one the preset can be written as (the preset itself is checked while parsing).
void check_arch(const synth::SynthOptions& options) {
  if (options.arch.empty()) return;
  const synth::Preset& preset = synth::preset_by_name(options.preset);
  std::string valid;
  for (const auto a : preset.archs) {
    if (a == options.arch) return;
    valid += (valid.empty() ? "" : ", ") + std::string(a);
  }
  throw_usage_error("synth: --arch: preset '{}' cannot be written as architecture '{}'; valid: {}", preset.name,
                    options.arch, valid);
}

}  // namespace

void register_synth(CLI::App& app, VerbResult& result) {
  auto shared_args = std::make_shared<SynthArgs>();
  SynthArgs& args = *shared_args;
  auto* cmd = app.add_subcommand("synth", "Write a random-weight GGUF of a real model's shape");
  cmd->footer(presets_footer());
  cmd->add_option("--preset", args.options.preset, "Model shape, e.g. stories15M (see the list below)")
      ->required()
      ->check(checked_by([](const std::string& name) { (void)synth::preset_by_name(name); }));
  cmd->add_option("--arch", args.options.arch, "Architecture name to write (default: the preset's)");
  cmd->add_option("--type", args.options.type, "Quantization mix, e.g. F32, Q8_0, Q4_K_M (default F32)")
      ->check(checked_by([](const std::string& name) { (void)quantize::mix_by_name(name); }));
  cmd->add_option("-s,--seed", args.options.seed, "Seed of the weights (default 1)")->check(in_range(0, 4294967295.0));
  cmd->add_option("--layers", args.options.layers, "Number of blocks (default: the model's)")
      ->check(in_range(1, 100000));
  cmd->add_option("--vocab", args.options.vocab, "Vocabulary size (default: the model's; smaller for quick tests)")
      ->check(in_range(1, 2147483647.0));
  cmd->add_option("--vocab-from", args.options.vocab_from,
                  "take the tokenizer (and chat template) of this GGUF, e.g. a llama.cpp vocab file")
      ->check(non_empty());
  cmd->add_option("-o,--output", args.output, "Output GGUF file (written atomically)")->required()->check(non_empty());
  add_threads_flag(cmd, args.threads);
  cmd->callback([shared_args, &result] {
    check_arch(shared_args->options);
    if (result.dry_run) return;
    run_synth(*shared_args);
  });
}

}  // namespace okapi::cli
