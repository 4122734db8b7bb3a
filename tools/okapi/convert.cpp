// okapi convert MODEL.bin --tokenizer TOKENIZER.bin -o OUT.gguf [--type f32|f16]
// [--context-length N|seq_len] [--name NAME]: llama2.c / bitllama2.c checkpoint to GGUF.
#include <fmt/format.h>

#include <charconv>
#include <memory>
#include <string>

#include "core/error.hpp"
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

std::optional<uint32_t> parse_context_length(const std::string& text, const llama2c::Checkpoint& checkpoint) {
  if (text.empty()) return std::nullopt;
  if (text == "seq_len") return static_cast<uint32_t>(checkpoint.config().seq_len);
  uint32_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value == 0) {
    throw_error("convert: --context-length '{}' is neither a positive integer nor 'seq_len'", text);
  }
  return value;
}

int run_convert(const ConvertArgs& args) {
  llama2c::ConvertOptions options;
  if (args.type == "f32") {
    options.type = DType::F32;
  } else if (args.type == "f16") {
    options.type = DType::F16;
  } else {
    throw_error("convert: --type '{}' is not f32 or f16", args.type);
  }
  options.name = args.name;
  if (!args.context_length.empty()) {
    // "seq_len" needs the header: read it once here; convert_file reads it again (cheap, mapped).
    const auto checkpoint = llama2c::Checkpoint::open(args.input);
    options.context_length = parse_context_length(args.context_length, checkpoint);
  }
  const auto summary = llama2c::convert_file(args.input, args.tokenizer, args.output, options);
  fmt::print("converted {} ({}) to {}: architecture {}, {} tensors, {} bytes\n", args.input,
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
  cmd->add_option("input", args->input, "llama2.c checkpoint (.bin)")->required();
  cmd->add_option("--tokenizer,-t", args->tokenizer, "llama2.c tokenizer.bin (its vocabulary goes into the GGUF)")
      ->required();
  cmd->add_option("-o,--output", args->output, "GGUF file to write (replaced atomically)")->required();
  cmd->add_option("--type", args->type, "type of the 2-D weights: f32 (default) or f16; norms stay f32")
      ->capture_default_str();
  cmd->add_option("--context-length", args->context_length,
                  "context_length to record: a number, or 'seq_len' for the checkpoint's; default: 128 as "
                  "llama.cpp's converter writes for llama2.c models, seq_len for bitnet");
  cmd->add_option("--name", args->name, "general.name (default: 'llama' as llama.cpp; bitnet: the file stem)");
  cmd->callback([args, &result] { result.exit_code = run_convert(*args); });
}

}  // namespace okapi::cli
