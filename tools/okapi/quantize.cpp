// okapi quantize IN.gguf OUT.gguf TYPE [-t N] [--imatrix FILE] [--include-weights NAME ...]
//                [--exclude-weights NAME ...] [--pure] [--output-tensor-type T]
//                [--token-embedding-type T] [--tensor-type PATTERN=TYPE ...] [--leave-output-tensor]
//                [--allow-requantize]
// Like llama-quantize: every tensor gets the type the mix chooses; the output is written
// atomically (an existing OUT is replaced only by a complete new file).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common_flags.hpp"
#include "core/error.hpp"
#include "core/output_paths.hpp"
#include "core/progress.hpp"
#include "quantize/model_quantizer.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct QuantizeArgs {
  std::string input;
  std::string output;
  std::string type;
  int threads = default_threads();
  bool pure = false;
  bool leave_output_tensor = false;
  std::string output_tensor_type;
  std::string token_embedding_type;
  std::vector<std::string> tensor_types;
  std::string imatrix;
  std::vector<std::string> include_weights;
  std::vector<std::string> exclude_weights;
  bool allow_requantize = false;
};

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

std::string mix_list() {
  std::string s;
  for (const auto& m : quantize::all_mixes()) s += fmt::format("\n  {:<7} {}", m.name, m.description);
  return s;
}

// Per output type: tensor count and bytes before -> after; then the totals.
void print_summary(std::FILE* stream, const quantize::QuantizeReport& report, const quantize::MixSpec& mix) {
  struct Row {
    size_t count = 0;
    uint64_t in = 0;
    uint64_t out = 0;
    int64_t elements = 0;
  };
  std::map<std::string, Row> by_type;
  Row total;
  for (const auto& t : report.tensors) {
    for (Row* r : {&by_type[std::string(dtype_name(t.output_type))], &total}) {
      ++r->count;
      r->in += t.input_bytes;
      r->out += t.output_bytes;
      r->elements += t.n_elements;
    }
  }
  auto bpw = [](const Row& r) {
    return r.elements > 0 ? 8.0 * static_cast<double>(r.out) / static_cast<double>(r.elements) : 0.0;
  };
  fmt::print(stream, "{:<8} {:>7} {:>12} {:>12} {:>7}\n", "type", "tensors", "in MiB", "out MiB", "bpw");
  for (const auto& [name, r] : by_type) {
    fmt::print(stream, "{:<8} {:>7} {:>12.2f} {:>12.2f} {:>7.2f}\n", name, r.count, mib(r.in), mib(r.out), bpw(r));
  }
  const double in = static_cast<double>(report.input_file_bytes);
  const double out = static_cast<double>(std::max<uint64_t>(report.output_file_bytes, 1));
  const std::string change =
      in >= out ? fmt::format("{:.2f}x smaller", in / out) : fmt::format("{:.2f}x larger", out / in);
  fmt::print(stream, "{:<8} {:>7} {:>12.2f} {:>12.2f} {:>7.2f}\n", "total", total.count, mib(total.in), mib(total.out),
             bpw(total));
  fmt::print(stream, "{}: file {:.2f} MiB -> {:.2f} MiB, {}, {:.2f} bits per weight, {:.2f} s\n", mix.name,
             mib(report.input_file_bytes), mib(report.output_file_bytes), change, bpw(total), report.seconds);
}

void run_quantize(const QuantizeArgs& args) {
  const quantize::MixSpec& mix = quantize::mix_by_name(args.type);
  quantize::QuantizeOptions options;
  options.mix.file_type = mix.file_type;
  options.mix.pure = args.pure;
  options.mix.quantize_output_tensor = !args.leave_output_tensor;
  if (!args.output_tensor_type.empty()) {
    options.mix.output_tensor_type = quantize::output_type_by_name(args.output_tensor_type);
  }
  if (!args.token_embedding_type.empty()) {
    options.mix.token_embedding_type = quantize::output_type_by_name(args.token_embedding_type);
  }
  for (const std::string& t : args.tensor_types) {
    options.mix.tensor_types.push_back(quantize::parse_tensor_type_override(t));
  }
  options.imatrix.file = args.imatrix;
  options.imatrix.include_weights = args.include_weights;
  options.imatrix.exclude_weights = args.exclude_weights;
  options.allow_requantize = args.allow_requantize;
  options.n_threads = args.threads;
  // llama-quantize's tensor order, so that the file is byte-identical to its output.
  options.order = quantize::TensorOrder::LlamaCpp;

  std::unique_ptr<ProgressBar> bar;
  quantize::QuantizeObserver observer;
  observer.on_warning = [](const std::string& message) {
    std::fprintf(stderr, "okapi: warning: %s\n", message.c_str());
  };
  observer.on_tensor = [&bar](size_t done, size_t total, const std::string& name) {
    if (!bar) bar = std::make_unique<ProgressBar>("quantize", total);
    bar->update(done, name);
  };
  const quantize::QuantizeReport report = quantize::quantize_model(args.input, args.output, options, observer);
  if (bar) bar->finish();
  print_summary(report_stream({args.output}), report, mix);  // stderr when the model went to stdout
}

}  // namespace

void register_quantize(CLI::App& app, VerbResult& result) {
  auto shared_args = std::make_shared<QuantizeArgs>();
  QuantizeArgs& args = *shared_args;
  auto* cmd = app.add_subcommand("quantize", "Quantize a GGUF model (like llama-quantize)");
  cmd->footer("Types:" + mix_list());
  cmd->add_option("input", args.input, "Input GGUF model")->required()->check(non_empty());
  cmd->add_option("output", args.output, "Output GGUF file (written atomically)")->required()->check(non_empty());
  cmd->add_option("type", args.type, "Quantization mix, e.g. Q4_K_M (see the list below)")
      ->required()
      ->check(CLI::Validator(
          [](std::string& name) {
            try {
              (void)quantize::mix_by_name(name);
              return std::string();
            } catch (const Error& e) {
              return std::string(e.what());
            }
          },
          ""));
  add_threads_flag(cmd, args.threads);
  cmd->add_flag("--pure", args.pure, "Give every quantizable tensor TYPE's base format, without the mix rules");
  cmd->add_option("--output-tensor-type", args.output_tensor_type, "Type for output.weight, e.g. q8_0");
  cmd->add_option("--token-embedding-type", args.token_embedding_type, "Type for token_embd.weight, e.g. q8_0");
  cmd->add_flag("--leave-output-tensor", args.leave_output_tensor, "Copy output.weight unchanged");
  cmd->add_option("--tensor-type", args.tensor_types,
                  "PATTERN=TYPE: tensors whose name matches the regular expression get TYPE (repeatable; the "
                  "first match wins), e.g. attn_v=q8_0")
      ->allow_extra_args(false);
  cmd->add_option("--imatrix", args.imatrix, "Importance matrix (llama-imatrix's GGUF or legacy .dat, or okapi imatrix's)")
      ->check(non_empty());
  auto* include = cmd->add_option("--include-weights", args.include_weights,
                                  "Use importance weights only for tensors whose name contains NAME (repeatable)")
                      ->allow_extra_args(false);
  auto* exclude = cmd->add_option("--exclude-weights", args.exclude_weights,
                                  "Use no importance weights for tensors whose name contains NAME (repeatable)")
                      ->allow_extra_args(false);
  include->excludes(exclude);
  cmd->add_flag("--allow-requantize", args.allow_requantize,
                "Convert tensors that are already quantized (quality suffers; refused otherwise)");
  cmd->callback([shared_args, &result] {
    if (result.dry_run) return;
    run_quantize(*shared_args);
  });
}

}  // namespace okapi::cli
