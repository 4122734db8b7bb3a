// okapi logits -m MODEL (-p TEXT | -f FILE | --tokens 1,2,3) -o OUT.bin [-t T] [--batch-size B] [-c CTX]
//              [-ctk f32|f16] [-ctv f32|f16] [--exact [--exact-attention ntt|direct]] [--force]
// Writes the logits of every position (float32 little-endian, row-major [n_tokens x n_vocab]) to
// OUT.bin and OUT.json beside it (model sha256, token ids, n_vocab, top-10 per position). The
// fidelity checks against llama.cpp's dump_logits use it; the KV cache is F32 unless told otherwise.
// An existing OUT.json (not named by the user) is replaced only with --force, or when it is the
// JSON an earlier run wrote for this same OUT.bin.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_output.hpp"
#include "core/output_paths.hpp"
#include "core/sha256.hpp"
#include "core/system_memory.hpp"
#include "core/thread_pool.hpp"
#include "common_flags.hpp"
#include "exact_flags.hpp"
#include "format/gguf.hpp"
#include "format/model_file.hpp"
#include "kv/exact_store.hpp"
#include "kv/kv_store.hpp"
#include "model/evaluate.hpp"
#include "model/model.hpp"
#include "runtime/engine.hpp"
#include "tokenizer/tokenizer.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct LogitsArgs {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  std::string tokens;
  std::string output;
  int threads = default_threads();
  int64_t batch_size = 512;
  int64_t n_ctx = runtime::kContextNotGiven;
  kv::CacheTypes cache;
  bool exact = false;
  kv::ExactScores exact_attention = kv::ExactScores::Direct;
  backend::ExactRing exact_ring;
  bool force = false;
};

std::vector<int32_t> parse_tokens(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    try {
      size_t used = 0;
      const long value = std::stol(item, &used);
      if (used != item.size() || value < 0 || value > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(value));
    } catch (const std::exception&) {
      throw_error("--tokens: '{}' is not a token id (expected comma-separated integers)", item);
    }
    start = comma + 1;
  }
  return ids;
}

void write_bytes(const std::filesystem::path& path, const void* data, size_t size) {
  AtomicFileWriter writer(path);
  writer.write(data, size);
  writer.commit();
}

nlohmann::ordered_json top10(const float* row, int64_t n_vocab) {
  std::vector<int32_t> order(static_cast<size_t>(n_vocab));
  std::iota(order.begin(), order.end(), 0);
  const auto k = static_cast<size_t>(std::min<int64_t>(10, n_vocab));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  auto out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < k; ++i) out.push_back({{"id", order[i]}, {"logit", row[order[i]]}});
  return out;
}

std::filesystem::path json_path_of(const std::filesystem::path& out_path) {
  std::filesystem::path json_path = out_path;
  return json_path.replace_extension(".json");
}

// True when `json_path` is the JSON an earlier `okapi logits -o out_path` wrote beside that same
// output: it describes the file the user asked to replace, so it goes with it (an unrelated
// file of that name still needs --force).
bool is_own_sidecar(const std::filesystem::path& json_path, const std::filesystem::path& out_path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(json_path, ec) || std::filesystem::file_size(json_path, ec) > (64u << 20))
    return false;
  try {
    const auto json = nlohmann::json::parse(read_input_file(json_path, "JSON"));
    return json.is_object() && json.value("logits_file", std::string()) == out_path.filename().string() &&
           json.contains("logits_sha256") && json.contains("top10");
  } catch (const std::exception&) {
    return false;
  }
}

void run(const LogitsArgs& args) {
  OutputPlan paths;
  paths.inputs = {{args.model, "-m"}};
  if (!args.prompt_file.empty()) paths.inputs.push_back({args.prompt_file, "-f"});
  paths.outputs = {{args.output, "-o"}};
  // A device, FIFO or /dev/stdout has no "beside": then no JSON is written.
  const bool sidecar = !written_in_place(args.output);
  if (sidecar) paths.sidecars = {{json_path_of(args.output), "the JSON written beside -o"}};
  paths.force = args.force || is_own_sidecar(json_path_of(args.output), args.output);
  check_output_plan(paths);
  const std::string prompt = args.prompt_file.empty() ? args.prompt : read_input_file(args.prompt_file, "prompt file");
  gguf::File file = gguf::open_model(args.model);
  const std::string sha = sha256_hex(file.bytes().data(), file.bytes().size());
  std::vector<int32_t> tokens;
  if (!args.tokens.empty()) {
    tokens = parse_tokens(args.tokens);
  } else {
    const tokenizer::Tokenizer tok(tokenizer::Vocab::from_gguf(file));
    tokenizer::EncodeOptions options;
    options.add_special = true;
    options.parse_special = true;  // as llama.cpp's dump_logits / llama-tokenize
    tokens = tok.encode(prompt, options);
  }
  if (tokens.empty()) throw_error("logits: the prompt has no tokens");
  const std::unique_ptr<model::Model> model = model::Model::load(std::move(file));
  const model::HParams& hp = model->hparams();
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  const int64_t n_ctx = args.n_ctx == runtime::kContextNotGiven ? n_tokens : runtime::resolve_context(args.n_ctx, hp);
  if (n_tokens > n_ctx) throw_error("logits: the prompt has {} tokens but the context is {} (-c)", n_tokens, n_ctx);
  const runtime::EngineOptions engine{args.threads, args.cache, args.exact, args.exact_attention, args.exact_ring};
  const runtime::Workload work{.batch = args.batch_size, .logit_rows = n_tokens};
  runtime::check_memory(*model, engine, args.threads, n_ctx, work, /*weights_loaded=*/false);
  ThreadPool pool(args.threads);
  const std::unique_ptr<model::Ops> ops = runtime::make_backend(engine, &pool);
  ops->prepare(model->weights());
  const auto kv = runtime::make_checked_kv(*model, *ops, engine, args.threads, n_ctx, work, /*weights_loaded=*/true);
  (void)runtime::warn_beyond_trained_context(n_ctx, hp);
  const std::vector<float> logits = out_of_memory_as_error(
      "computing logits", [&] { return model::evaluate_all(*model, *ops, *kv, tokens, args.batch_size); });

  const std::filesystem::path out_path = args.output;
  write_bytes(out_path, logits.data(), logits.size() * sizeof(float));
  nlohmann::ordered_json json;
  json["model"] = args.model;
  json["model_sha256"] = sha;
  json["architecture"] = hp.arch;
  json["n_tokens"] = tokens.size();
  json["tokens"] = tokens;
  json["n_vocab"] = hp.n_vocab;
  json["n_ctx"] = n_ctx;
  json["batch_size"] = args.batch_size;
  json["threads"] = args.threads;
  json["cache_type_k"] = std::string(args.exact ? kv->type_name() : args.cache.k.name());
  json["cache_type_v"] = std::string(args.exact ? kv->type_name() : args.cache.v.name());
  json["exact"] = args.exact;
  json["logits_sha256"] = sha256_hex(logits.data(), logits.size() * sizeof(float));
  json["logits_file"] = out_path.filename().string();
  json["logits_format"] = "float32 little-endian, row-major [n_tokens x n_vocab]";
  auto top = nlohmann::ordered_json::array();
  for (size_t t = 0; t < tokens.size(); ++t)
    top.push_back(top10(logits.data() + static_cast<int64_t>(t) * hp.n_vocab, hp.n_vocab));
  json["top10"] = std::move(top);
  const std::string text = dump_json(std::move(json), 2) + "\n";
  if (sidecar) write_bytes(json_path_of(out_path), text.data(), text.size());
  std::fprintf(stderr, "logits: %zu tokens x %lld vocab -> %s%s\n", tokens.size(), static_cast<long long>(hp.n_vocab),
               out_path.string().c_str(), sidecar ? "" : " (not a regular file: no JSON beside it)");
}

}  // namespace

void register_logits(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<LogitsArgs>();
  auto* cmd = app.add_subcommand("logits", "write the logits of every position of a prompt (float32 + JSON)");
  cmd->add_option("-m,--model", args->model, "GGUF model")->required();
  auto* prompt = cmd->add_option("-p,--prompt", args->prompt, "text (tokenized with BOS as the vocab says)");
  auto* prompt_file = cmd->add_option("-f,--file", args->prompt_file, "read the text from a file")->check(non_empty());
  auto* tokens = cmd->add_option("--tokens", args->tokens, "comma-separated token ids instead of text")
                     ->check(each_in_range(0, 2147483647.0));
  for (CLI::Option* a : {prompt, prompt_file, tokens})
    for (CLI::Option* b : {prompt, prompt_file, tokens})
      if (a != b) a->excludes(b);
  cmd->add_option("-o,--output", args->output, "OUT.bin (OUT.json is written beside it)")->required()->check(non_empty());
  add_threads_flag(cmd, args->threads);
  add_batch_flag(cmd, args->batch_size, "tokens per forward pass (1 = token by token)");
  add_ctx_flag(cmd, args->n_ctx, "context length of the KV cache (default: the prompt length; 0: the model's trained context)");
  add_cache_type_flags(cmd, args->cache);
  add_exact_flags(cmd, args->exact, args->exact_attention, args->exact_ring);
  cmd->add_flag("--force", args->force, "replace an existing OUT.json");
  cmd->callback([args, cmd, prompt, prompt_file, tokens, &result] {
    check_exact_flags(cmd, args->exact);
    if (prompt->count() == 0 && prompt_file->count() == 0 && tokens->count() == 0)
      throw_usage_error("logits: give the input with -p TEXT, -f FILE or --tokens IDS");
    if (result.dry_run) return;
    run(*args);
    result.exit_code = 0;
  });
}

}  // namespace okapi::cli
