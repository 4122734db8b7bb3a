// okapi convert MODEL.bin --tokenizer TOKENIZER.bin -o OUT.gguf [--type f32|f16]
// [--context-length N|seq_len] [--name NAME]: llama2.c / bitllama2.c checkpoint to GGUF. The
// recorded context length is the checkpoint's seq_len unless told otherwise.
#include <fmt/format.h>

#include <charconv>
#include <memory>
#include <string>

#include "common_flags.hpp"
#include "core/error.hpp"
#include "core/output_paths.hpp"
#include "format/convert_llama2c.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct ConvertArgs {
  std::string input;
  std::string tokenizer;
  std::string output;
  std::string type = "f32";
  std::string context_length;  // "", "seq_len" or a number
  std::string name;
};

// "" for a context length flag value CLI11 should accept ("seq_len" or a positive integer).
std::string context_length_problem(const std::string& text) {
  if (text == "seq_len") return {};
  uint32_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value == 0)
    return fmt::format("'{}' is neither a positive integer nor 'seq_len'", text);
  return {};
}

int run_convert(const ConvertArgs& args) {
  llama2c::ConvertOptions options;
  options.type = args.type == "f16" ? DType::F16 : DType::F32;
  options.name = args.name;
  // Not given or "seq_len": the checkpoint's seq_len (the converter's default).
  if (!args.context_length.empty() && args.context_length != "seq_len")
    options.context_length = static_cast<uint32_t>(std::stoul(args.context_length));
  const auto summary = llama2c::convert_file(args.input, args.tokenizer, args.output, options);
  fmt::print(report_stream({args.output}), "converted {} ({}) to {}: architecture {}, {} tensors, {} bytes\n", args.input,
             llama2c::format_name(summary.source_format), args.output, summary.architecture, summary.n_tensors,
             summary.file_bytes);
  return 0;
}

}  // namespace

void register_convert(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<ConvertArgs>();
  auto* cmd = app.add_subcommand(
      "convert",
      "Convert a llama2.c checkpoint (legacy or 'ak42' v1 fp32 -> llama, as llama.cpp's convert-llama2c-to-ggml; "
      "bitllama2.c ternary -> bitnet) plus its tokenizer.bin to GGUF");
  cmd->add_option("input", args->input, "llama2.c checkpoint (.bin)")->required()->check(non_empty());
  cmd->add_option("--tokenizer,-t", args->tokenizer, "llama2.c tokenizer.bin (its vocabulary goes into the GGUF)")
      ->required()
      ->check(non_empty());
  cmd->add_option("-o,--output", args->output, "GGUF file to write (replaced atomically)")->required()->check(non_empty());
  cmd->add_option("--type", args->type, "type of the 2-D weights: f32 (default) or f16; norms stay f32")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& t) { return t == "f32" || t == "f16" ? std::string() : fmt::format("'{}' is not f32 or f16", t); },
          ""));
  cmd->add_option("--context-length", args->context_length,
                  "context_length to record: a number, or 'seq_len' (the default: the checkpoint's trained "
                  "context); 128 reproduces llama.cpp's converter byte for byte")
      ->check(CLI::Validator(context_length_problem, ""));
  cmd->add_option("--name", args->name, "general.name (default: 'llama' as llama.cpp; bitnet: the file stem)");
  cmd->callback([args, &result] {
    if (result.dry_run) return;
    result.exit_code = run_convert(*args);
  });
}

}  // namespace okapi::cli
