// okapi tokenize -m MODEL (-p TEXT | -f FILE) [--ids] [--no-bos] [--parse-special] [--json]:
// token ids of a text, as llama.cpp's llama-tokenize prints them. MODEL is a GGUF file (its
// tokenizer.ggml.* vocabulary) or a llama2.c tokenizer.bin.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_output.hpp"
#include "format/gguf.hpp"
#include "tokenizer/tokenizer.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  std::string prompt;
  std::string file;
  bool ids = false;
  bool no_bos = false;
  bool parse_special = false;
  bool json = false;
};

bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

tokenizer::Vocab load_vocab(const std::string& path) {
  require_input_file(path, "model");
  if (starts_with_gguf_magic(path)) return tokenizer::Vocab::from_gguf(gguf::File::open(path));
  return tokenizer::Vocab::from_llama2c(path);
}

void write(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

void run(const TokenizeArgs& args) {
  const tokenizer::Tokenizer tok(load_vocab(args.model));
  const std::string text = args.file.empty() ? args.prompt : read_input_file(args.file, "text file");
  tokenizer::EncodeOptions options;
  options.add_special = !args.no_bos;
  options.parse_special = args.parse_special;
  const std::vector<tokenizer::TokenId> ids = tok.encode(text, options);

  if (args.json) {
    nlohmann::ordered_json out;
    out["model"] = args.model;
    out["n_tokens"] = ids.size();
    out["ids"] = ids;
    auto pieces = nlohmann::ordered_json::array();
    for (auto id : ids) pieces.push_back(tok.token_to_piece(id, true));
    out["pieces"] = std::move(pieces);
    // Pieces may be partial UTF-8 (byte tokens): repaired, with their bytes listed (json_output.hpp).
    write(dump_json(std::move(out), 2) + "\n");
  } else if (args.ids) {
    std::string line = "[";
    for (size_t i = 0; i < ids.size(); ++i) line += fmt::format("{}{}", i ? ", " : "", ids[i]);
    write(line + "]\n");
  } else {
    // llama-tokenize's "%6d -> '%s'", pieces rendered with special tokens visible.
    for (auto id : ids) write(fmt::format("{:6} -> '{}'\n", id, tok.token_to_piece(id, true)));
  }
  std::fflush(stdout);
}

}  // namespace

void register_tokenize(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "print the token ids of a text (like llama-tokenize)");
  cmd->add_option("-m,--model", args->model, "GGUF model / vocabulary, or llama2.c tokenizer.bin")->required();
  auto* prompt = cmd->add_option("-p,--prompt", args->prompt, "text to tokenize");
  auto* file = cmd->add_option("-f,--file", args->file, "file whose exact bytes are tokenized");
  prompt->excludes(file);
  file->excludes(prompt);
  cmd->add_flag("--ids", args->ids, "print only the ids, as one line [id, id, ...]");
  cmd->add_flag("--no-bos", args->no_bos, "do not add BOS/EOS even if the vocabulary asks for them");
  cmd->add_flag("--parse-special", args->parse_special, "recognise special token texts such as <s>");
  cmd->add_flag("--json", args->json, "print ids and pieces as JSON");
  cmd->callback([args, prompt, file, &result] {
    if (prompt->count() == 0 && file->count() == 0) throw_usage_error("tokenize: give the text with -p TEXT or -f FILE");
    if (result.dry_run) return;
    run(*args);
    result.exit_code = 0;
  });
}

}  // namespace okapi::cli
