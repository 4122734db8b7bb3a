// okapi embed -m MODEL (-p TEXT ... | -f FILE) [--pooling none|mean|cls|last|rank] [--embd-normalize N]
//             [--embd-output-format ''|array|json|json+|raw] [--json] [--embd-separator S] [--cls-separator S]
//             [-c N] [-b N] [-ub N] [-t T] [-ctk/-ctv] [-o FILE] [-e] [--verbose-prompt]
// One vector per input, as llama-embedding computes them (runtime::Embedder): a -p is split on
// --embd-separator (default a newline), a -f file gives one input per non-empty line. The default
// output lists each vector's first values and, for several inputs, their cosine-similarity
// matrix; --embd-output-format json / json+ / array / raw are llama-embedding's formats. Rank
// pooling (cross-encoder rerankers) reads "query<TAB>document" inputs and prints their scores.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common_flags.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/output_paths.hpp"
#include "core/utf8.hpp"
#include "model/embedding.hpp"
#include "runtime/embedder.hpp"
#include "runtime/engine.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct EmbedArgs {
  std::string model;
  ModelSourceFlags source;  // --hf-repo / --model-url when -m is not given
  std::vector<std::string> prompts;
  std::string file;
  std::string pooling;  // empty: the file's pooling_type
  int normalize = runtime::kNormalizeEuclidean;
  bool normalize_given = false;
  std::string format;
  bool json = false;
  std::string embd_separator = "\n";
  std::string cls_separator = "\t";
  bool escape = false;
  bool verbose_prompt = false;
  int64_t n_ctx = runtime::kContextNotGiven;
  int64_t batch_size = 2048;
  int64_t ubatch_size = 0;  // 0: not given
  // llama.cpp's default KV cache type (used by causal embedding models; encoders keep F32).
  runtime::EngineOptions engine{default_threads(), {kv::CacheType::f16(), kv::CacheType::f16()}};
  std::string output;
};

std::vector<std::string> split_on(const std::string& text, const std::string& separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t end = text.find(separator); end != std::string::npos; end = text.find(separator, start)) {
    parts.push_back(text.substr(start, end - start));
    start = end + separator.size();
  }
  parts.push_back(text.substr(start));
  return parts;
}

// The inputs' texts: each -p split on the separator (an empty piece is an error), or the file's
// non-empty lines.
std::vector<std::string> input_texts(const EmbedArgs& args) {
  std::vector<std::string> texts;
  if (!args.file.empty()) {
    const std::string content = read_input_file(args.file, "text file");
    for (std::string& line : split_on(content, "\n"))
      if (!line.empty()) texts.push_back(std::move(line));
    if (texts.empty()) throw_error("{}: no input: the file has no non-empty line", args.file);
    return texts;
  }
  for (const std::string& prompt : args.prompts) {
    const std::string text = args.escape ? process_escapes(prompt) : prompt;
    for (std::string& piece : args.embd_separator.empty() ? std::vector<std::string>{text}
                                                          : split_on(text, args.embd_separator)) {
      if (piece.empty())
        throw_error("input {} is empty (-p{}); every input needs some text", texts.size(),
                    text.empty() ? "" : ", split on --embd-separator");
      texts.push_back(std::move(piece));
    }
  }
  return texts;
}

// A short, printable label for an input in the similarity matrix.
std::string label_of(const std::string& text, size_t max_chars = 24) {
  std::string label = repair_utf8(text);
  for (char& c : label)
    if (c == '\n' || c == '\t' || c == '\r') c = ' ';
  size_t chars = 0, cut = 0;
  while (cut < label.size() && chars < max_chars) {
    const size_t n = std::max<size_t>(1, valid_utf8_length(label, cut));
    cut += n;
    ++chars;
  }
  return cut < label.size() ? label.substr(0, cut) + "…" : label;
}

std::string value_text(float v, int normalize) {
  return normalize == 0 ? fmt::format("{:.0f}", v) : fmt::format("{:.7f}", v);
}

struct Result {
  model::Pooling pooling;
  int64_t width = 0;  // values per vector
  std::vector<std::vector<float>> vectors;  // per input, or per token for Pooling::None
  std::vector<size_t> vector_input;         // the input of each vector
  std::vector<int64_t> vector_token;        // Pooling::None: the token's position in its input
};

// llama-embedding's --embd-output-format json / json+ / array, byte for byte.
std::string llama_json(const Result& r, const std::string& format, int normalize) {
  const bool not_array = format != "array";
  std::string out = not_array ? "{\n  \"object\": \"list\",\n  \"data\": [\n" : "[";
  for (size_t j = 0; j < r.vectors.size(); ++j) {
    if (not_array) out += fmt::format("    {{\n      \"object\": \"embedding\",\n      \"index\": {},\n      \"embedding\": ", j);
    out += "[";
    const std::vector<float>& v = r.vectors[j];
    for (size_t i = 0; i < v.size(); ++i) {
      out += i ? "," : "";
      out += value_text(v[i], normalize);
    }
    out += not_array ? "]\n    }" : "]";
    if (j + 1 < r.vectors.size()) out += not_array ? ",\n" : ",";
  }
  out += not_array ? "\n  ]" : "]\n";
  if (format == "json+" && r.vectors.size() > 1) {
    out += ",\n  \"cosineSimilarity\": [\n";
    for (size_t i = 0; i < r.vectors.size(); ++i) {
      out += "    [";
      for (size_t j = 0; j < r.vectors.size(); ++j)
        out += fmt::format("{}{:6.2f}", j ? ", " : "", runtime::cosine_similarity(r.vectors[i], r.vectors[j]));
      out += i + 1 < r.vectors.size() ? " ],\n" : " ]";
    }
    out += "\n  ]";
  }
  if (not_array) out += "\n}\n";
  return out;
}

// llama-embedding's raw format: one vector per line, values separated by spaces.
std::string raw_text(const Result& r, int normalize) {
  std::string out;
  for (const std::vector<float>& v : r.vectors) {
    for (size_t i = 0; i < v.size(); ++i) {
      out += i ? " " : "";
      out += value_text(v[i], normalize);
    }
    out += "\n";
  }
  return out;
}

// The default, for people: each vector's first values (all of them for one input), then the
// cosine-similarity matrix; rank pooling: the scores.
std::string readable_text(const Result& r, const std::vector<std::string>& texts,
                          const std::vector<std::vector<int32_t>>& tokens, const model::Model& model, int normalize) {
  std::string out;
  const auto fmt_value = [&](float v) { return normalize == 0 ? fmt::format("{:6.0f}", v) : fmt::format("{:9.6f}", v); };
  if (r.pooling == model::Pooling::Rank) {
    const std::vector<std::string>& labels = model.hparams().classifier_labels;
    for (size_t j = 0; j < r.vectors.size(); ++j) {
      for (size_t i = 0; i < r.vectors[j].size(); ++i) {
        const std::string label = i < labels.size() && !labels[i].empty() ? labels[i] : std::to_string(i);
        out += r.vectors[j].size() == 1 ? fmt::format("rerank score {}: {:8.3f}", j, r.vectors[j][i])
                                        : fmt::format("rerank score {}: {:8.3f} [{}]", j, r.vectors[j][i], label);
        out += i == 0 ? fmt::format("   {}\n", label_of(texts[j], 48)) : "\n";
      }
    }
    return out;
  }
  if (r.pooling == model::Pooling::None) {
    const int64_t shown = std::min<int64_t>(3, r.width);
    for (size_t j = 0; j < r.vectors.size(); ++j) {
      const std::vector<float>& v = r.vectors[j];
      const size_t input = r.vector_input[j];
      const auto token = static_cast<size_t>(r.vector_token[j]);
      out += fmt::format("input {} token {} (id {}):", input, token, tokens[input][token]);
      for (int64_t i = 0; i < shown; ++i) out += fmt::format(" {}", fmt_value(v[static_cast<size_t>(i)]));
      if (r.width > 2 * shown) out += " ...";
      for (int64_t i = std::max(shown, r.width - shown); i < r.width; ++i)
        out += fmt::format(" {}", fmt_value(v[static_cast<size_t>(i)]));
      out += "\n";
    }
    return out;
  }
  const size_t n = r.vectors.size();
  const auto shown = static_cast<size_t>(n > 1 ? std::min<int64_t>(16, r.width) : r.width);
  for (size_t j = 0; j < n; ++j) {
    out += fmt::format("embedding {} ({} tokens, {} values{}):", j, tokens[j].size(), r.width,
                       shown < static_cast<size_t>(r.width) ? fmt::format(", the first {}", shown) : "");
    for (size_t i = 0; i < shown; ++i) out += fmt::format("{}{}", i % 8 == 0 ? "\n  " : " ", fmt_value(r.vectors[j][i]));
    out += fmt::format("\n  input: {}\n", label_of(texts[j], 64));
  }
  if (n > 1) {
    out += "\ncosine similarity matrix:\n\n     ";
    for (size_t j = 0; j < n; ++j) out += fmt::format(" {:>6}", j);
    out += "\n";
    for (size_t i = 0; i < n; ++i) {
      out += fmt::format("{:>5}", i);
      for (size_t j = 0; j < n; ++j) out += fmt::format(" {:6.3f}", runtime::cosine_similarity(r.vectors[i], r.vectors[j]));
      out += fmt::format("   {}\n", label_of(texts[i]));
    }
  }
  return out;
}

int run(EmbedArgs args) {
  args.model = resolve_model_source(args.model, args.source);
  if (!args.output.empty()) {
    std::vector<NamedPath> inputs{{args.model, "-m"}};
    if (!args.file.empty()) inputs.push_back({args.file, "-f"});
    check_output_path({args.output, "-o"}, inputs);
  }
  std::optional<model::Pooling> pooling;
  if (!args.pooling.empty()) pooling = model::parse_pooling(args.pooling);
  const std::vector<std::string> texts = input_texts(args);  // before loading: bad input fails fast
  const auto engine = runtime::Engine::load(args.model, args.engine);
  runtime::EmbedderOptions options;
  options.pooling = pooling;
  options.batch_tokens = args.ubatch_size > 0 ? std::min(args.batch_size, args.ubatch_size) : args.batch_size;
  if (args.n_ctx != runtime::kContextNotGiven) options.max_input_tokens = engine->resolve_ctx(args.n_ctx);
  runtime::Embedder embedder(*engine, options);
  const model::Pooling used = embedder.pooling();
  // Rank scores are not vectors: they are normalized only when asked.
  const int normalize = used == model::Pooling::Rank && args.normalize_given ? args.normalize
                        : used == model::Pooling::Rank                    ? runtime::kNormalizeNone
                                                                          : args.normalize;

  std::vector<std::vector<int32_t>> tokens;
  tokens.reserve(texts.size());
  bool warned_end = false;
  for (size_t i = 0; i < texts.size(); ++i) {
    tokens.push_back(used == model::Pooling::Rank ? embedder.tokenize_rank_line(texts[i], args.cls_separator)
                                                  : embedder.tokenize(texts[i]));
    embedder.check_input(tokens.back(), i);
    if (!warned_end && !embedder.ends_with_sep_or_eos(tokens.back())) {
      warned_end = true;
      warn(fmt::format("input {} does not end with a SEP or EOS token: the model's tokenizer.ggml.add_eos_token "
                       "should probably be true",
                       i));
    }
    if (args.verbose_prompt) {
      std::fprintf(stderr, "embed: input %zu: '%s'\nembed: number of tokens in input = %zu\n", i,
                   repair_utf8(texts[i]).c_str(), tokens.back().size());
      for (const int32_t id : tokens.back())
        std::fprintf(stderr, "%6d -> '%s'\n", id, repair_utf8(engine->tokenizer().token_to_piece(id, true)).c_str());
      std::fprintf(stderr, "\n");
    }
  }

  const double start = runtime::now_seconds();
  std::vector<runtime::EmbeddingOutput> outputs = embedder.embed(tokens);
  const double seconds = runtime::now_seconds() - start;

  Result r;
  r.pooling = used;
  r.width = used == model::Pooling::None ? engine->hparams().n_embd : embedder.width();
  int64_t total_tokens = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    total_tokens += outputs[i].n_tokens;
    const auto width = static_cast<size_t>(r.width);
    const size_t rows = outputs[i].values.size() / width;
    for (size_t row = 0; row < rows; ++row) {
      std::vector<float> v(outputs[i].values.begin() + static_cast<std::ptrdiff_t>(row * width),
                           outputs[i].values.begin() + static_cast<std::ptrdiff_t>((row + 1) * width));
      runtime::normalize_embedding(v, normalize);
      r.vectors.push_back(std::move(v));
      r.vector_input.push_back(i);
      r.vector_token.push_back(static_cast<int64_t>(row));
    }
  }

  std::string text;
  if (args.format.empty()) {
    text = readable_text(r, texts, tokens, engine->model(), normalize);
  } else if (args.format == "raw") {
    text = raw_text(r, normalize);
  } else {
    text = llama_json(r, args.format, normalize);
  }
  if (args.output.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  } else {
    AtomicFileWriter writer(args.output);
    writer.write(text.data(), text.size());
    writer.commit();
  }
  std::fprintf(stderr,
               "okapi: embed: %zu inputs, %lld tokens in %.2f ms (%.1f tok/s), %s pooling, %d threads | load %.2f ms\n",
               texts.size(), static_cast<long long>(total_tokens), seconds * 1e3,
               seconds > 0 ? static_cast<double>(total_tokens) / seconds : 0.0,
               std::string(model::pooling_name(used)).c_str(), engine->threads(), engine->load_seconds() * 1e3);
  return 0;
}

}  // namespace

void register_embed(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<EmbedArgs>();
  auto* cmd = app.add_subcommand("embed", "one embedding vector per input, as llama-embedding computes them");
  add_model_source_flags(cmd, args->source, cmd->add_option("-m,--model", args->model, "GGUF embedding model")->check(non_empty()));
  auto* prompt = cmd->add_option("-p,--prompt", args->prompts,
                                 "input text (repeatable; each is also split on --embd-separator)")
                     ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  auto* file = cmd->add_option("-f,--file", args->file, "one input per line (empty lines are skipped)")->check(non_empty());
  prompt->excludes(file);
  file->excludes(prompt);
  cmd->add_option("--pooling", args->pooling, "none, mean, cls, last or rank (default: the model's pooling_type)")
      ->check(CLI::IsMember({"none", "mean", "cls", "last", "rank"}));
  auto* normalize = cmd->add_option("--embd-normalize", args->normalize,
                                    "normalization: -1 none, 0 max absolute (int16 range), 1 taxicab, 2 euclidean, "
                                    ">2 p-norm (rank scores: none unless given)")
                        ->capture_default_str()
                        ->check(in_range(-1, 2147483647.0));
  auto* format = cmd->add_option("--embd-output-format", args->format,
                                 "'' (readable), array, json (OpenAI style), json+ (json and the cosine-similarity "
                                 "matrix) or raw (one vector per line), as llama-embedding")
                     ->check(CLI::IsMember({"", "array", "json", "json+", "raw"}));
  auto* json = cmd->add_flag("--json", args->json, "the same as --embd-output-format json");
  json->excludes(format);
  format->excludes(json);
  cmd->add_option("--embd-separator", args->embd_separator, "splits each -p into inputs (default: a newline)");
  cmd->add_option("--cls-separator", args->cls_separator,
                  "rank pooling: splits an input into query and document (default: a tab)");
  cmd->add_flag("-e,--escape,!--no-escape", args->escape,
                "process escapes in -p as llama.cpp does (\\n, \\t, \\xHH, ...)");
  cmd->add_flag("--verbose-prompt", args->verbose_prompt, "print each input's tokens to stderr");
  add_ctx_flag(cmd, args->n_ctx,
               "the longest input in tokens (0: the model's trained context; default: that, at most 4096)");
  add_batch_flag(cmd, args->batch_size, "tokens per forward pass (inputs are packed into passes)");
  cmd->add_option("--ubatch-size", args->ubatch_size, "the same as -b (also -ub); the smaller of the two is used")
      ->check(in_range(1, 2147483647.0));
  add_threads_flag(cmd, args->engine.threads);
  add_cache_type_flags(cmd, args->engine.cache);
  cmd->add_option("-o,--output", args->output, "write the output to FILE (replaced whole, atomically)")
      ->check(non_empty());
  cmd->callback([args, prompt, file, normalize, &result] {
    if (prompt->count() == 0 && file->count() == 0)
      throw_usage_error("embed: no input; give the texts with -p TEXT (repeatable) or -f FILE");
    args->normalize_given = normalize->count() > 0;
    if (args->json) args->format = "json";
    require_model_source("embed", args->model, args->source);
    if (result.dry_run) return;
    result.exit_code = run(*args);
  });
}

}  // namespace okapi::cli
