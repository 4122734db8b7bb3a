// okapi bench -m MODEL [-p 64,128,512] [-n 64,128] [-pg 512,128] [-d 0,4096] [-t 1,2] [-r 5] [-b 512]
//             [-o md|csv|json|jsonl] [-ctk/-ctv] [--exact [--exact-attention ntt|direct]]
// Prefill (ppN), decode (tgN) and prompt-then-decode (ppN+tgM, -pg: (N + M) tokens / the time of
// both) throughput, mean ± sd over repetitions, in llama-bench's output
// formats: md (the table: model, size, params, backend, threads, type_k, type_v, test, t/s), csv (a header, then
// one row per test), json (one array of records), jsonl (one record per line). Records use
// llama-bench's field names (model_filename, n_threads, avg_ts, samples_ns, ...) plus okapi's
// `test` ("pp64") and `backend`. The KV cache is f16 unless told (-ctk/-ctv), as llama-bench's.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common_flags.hpp"
#include "core/error.hpp"
#include "core/json_output.hpp"
#include "eval/bench.hpp"
#include "exact_flags.hpp"
#include "runtime/cancel.hpp"
#include "runtime/engine.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct BenchArgs {
  std::string model;
  ModelSourceFlags source;  // --hf-repo / --model-url when -m is not given
  std::vector<int64_t> n_prompt{512};
  std::vector<int64_t> n_gen{128};
  std::vector<int64_t> n_depth{0};
  std::vector<std::string> n_pg;  // "PP,TG" pairs (-pg, repeatable)
  std::vector<int> threads{default_threads()};
  int repetitions = 5;
  int64_t batch_size = 512;
  // llama-bench's default: the numbers compare as they stand.
  kv::CacheTypes cache{kv::CacheType::f16(), kv::CacheType::f16()};
  bool exact = false;
  kv::ExactScores exact_attention = kv::ExactScores::Direct;
  backend::ExactRing exact_ring;
  std::string output = "md";
  bool json = false;  // --json: the older spelling of -o jsonl
};

std::string human_size(uint64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  return mib >= 1024.0 ? fmt::format("{:.2f} GiB", mib / 1024.0) : fmt::format("{:.2f} MiB", mib);
}

std::string human_count(uint64_t n) {
  const auto v = static_cast<double>(n);
  if (v >= 1e9) return fmt::format("{:.2f} B", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f} M", v / 1e6);
  return fmt::format("{:.2f} K", v / 1e3);
}

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// One test's result with llama-bench's field names.
nlohmann::ordered_json record(const BenchArgs& args, const runtime::Engine& engine, int threads,
                              const eval::BenchCase& test, const eval::BenchSample& s, const std::string& time) {
  const auto tokens = static_cast<double>(test.n_prompt + test.n_gen);
  std::vector<int64_t> samples_ns;
  for (const double ts : s.samples) samples_ns.push_back(static_cast<int64_t>(1e9 * tokens / ts));
  const double avg_ns = s.mean > 0 ? 1e9 * tokens / s.mean : 0.0;
  const double stddev_ns = s.mean > 0 ? avg_ns * s.stddev / s.mean : 0.0;
  const std::string exact_type = fmt::format("exact-{}", exact_attention_name(args.exact_attention));
  const std::string cache_k = args.exact ? exact_type : std::string(args.cache.k.name());
  const std::string cache_v = args.exact ? exact_type : std::string(args.cache.v.name());
  nlohmann::ordered_json j;
  j["model_filename"] = args.model;
  j["model_type"] = fmt::format("{} {}", engine.hparams().arch, human_count(engine.parameter_count()));
  j["model_size"] = engine.file_bytes();
  j["model_n_params"] = engine.parameter_count();
  j["backends"] = args.exact ? "CPU " + exact_type : "CPU";
  j["n_batch"] = args.batch_size;
  j["n_threads"] = threads;
  j["type_k"] = cache_k;
  j["type_v"] = cache_v;
  j["n_prompt"] = test.n_prompt;
  j["n_gen"] = test.n_gen;
  j["n_depth"] = test.n_depth;
  j["test"] = test.name();
  j["test_time"] = time;
  j["avg_ns"] = static_cast<int64_t>(avg_ns);
  j["stddev_ns"] = static_cast<int64_t>(stddev_ns);
  j["avg_ts"] = s.mean;
  j["stddev_ts"] = s.stddev;
  j["samples_ns"] = samples_ns;
  j["samples_ts"] = s.samples;
  return j;
}

// CSV as llama-bench writes it: every value quoted, arrays as space-separated numbers.
std::string csv_value(const nlohmann::ordered_json& v) {
  std::string text;
  if (v.is_string()) {
    text = v.get<std::string>();
  } else if (v.is_array()) {
    for (const auto& item : v) text += (text.empty() ? "" : " ") + item.dump();
  } else {
    text = v.dump();
  }
  std::string quoted = "\"";
  for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

class ResultPrinter {
 public:
  explicit ResultPrinter(std::string format) : format_(std::move(format)) {}
  // A failed test (an exception) still leaves a JSON array that parses, if one was begun.
  ~ResultPrinter() {
    if (begun_) finish();
  }
  ResultPrinter(const ResultPrinter&) = delete;
  ResultPrinter& operator=(const ResultPrinter&) = delete;

  void add(const nlohmann::ordered_json& r) {
    if (!begun_) begin();
    if (format_ == "md") {
      std::printf("| %s | %s | %s | %s | %d | %s | %s | %s | %.2f ± %.2f |\n",
                  std::filesystem::path(r["model_filename"].get<std::string>()).filename().string().c_str(),
                  human_size(r["model_size"].get<uint64_t>()).c_str(),
                  human_count(r["model_n_params"].get<uint64_t>()).c_str(), r["backends"].get<std::string>().c_str(),
                  r["n_threads"].get<int>(), r["type_k"].get<std::string>().c_str(),
                  r["type_v"].get<std::string>().c_str(), r["test"].get<std::string>().c_str(),
                  r["avg_ts"].get<double>(), r["stddev_ts"].get<double>());
    } else if (format_ == "csv") {
      std::string line;
      if (rows_ == 0) {
        for (const auto& item : r.items()) line += (line.empty() ? "" : ",") + item.key();
        std::printf("%s\n", line.c_str());
        line.clear();
      }
      for (const auto& item : r.items()) line += (line.empty() ? "" : ",") + csv_value(item.value());
      std::printf("%s\n", line.c_str());
    } else {
      const std::string text = dump_json(r, format_ == "json" ? 2 : -1);
      if (format_ == "json") {
        std::printf("%s\n%s", rows_ == 0 ? "" : ",", text.c_str());
      } else {
        std::printf("%s\n", text.c_str());
      }
    }
    ++rows_;
    std::fflush(stdout);
  }

  // Closes the JSON array (an empty one when interrupted before the first result).
  void finish() {
    if (finished_) return;
    finished_ = true;
    if (!begun_) begin();
    if (format_ == "json") std::printf("%s]\n", rows_ == 0 ? "" : "\n");
    std::fflush(stdout);
  }

 private:
  // The header goes out with the first result, so a model that fails to load leaves stdout empty.
  void begin() {
    begun_ = true;
    if (format_ == "md") {
      std::printf("| model | size | params | backend | threads | type_k | type_v | test | t/s |\n");
      std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
    } else if (format_ == "json") {
      std::printf("[");
    }
  }

  std::string format_;
  size_t rows_ = 0;
  bool begun_ = false;
  bool finished_ = false;
};

// -pg PP,TG: llama-bench's spelling, exactly two token counts. "" when `value` is one, else why not.
std::string check_pg(const std::string& value) {
  const size_t comma = value.find(',');
  const auto count = [](const std::string& text) {
    return !text.empty() && text.size() <= 10 && text.find_first_not_of("0123456789") == std::string::npos &&
           std::stoll(text) <= 2147483647;
  };
  if (comma == std::string::npos || !count(value.substr(0, comma)) || !count(value.substr(comma + 1)))
    return fmt::format("'{}' is not PP,TG (a prompt and a generation length in [0, 2147483647], e.g. 512,128)", value);
  return {};
}

std::pair<int64_t, int64_t> parse_pg(const std::string& value) {
  const size_t comma = value.find(',');
  return {std::stoll(value.substr(0, comma)), std::stoll(value.substr(comma + 1))};
}

int run(const BenchArgs& args) {
  std::vector<eval::BenchCase> cases;
  for (const auto d : args.n_depth) {
    for (const auto p : args.n_prompt)
      if (p > 0) cases.push_back({p, 0, d});
    for (const auto n : args.n_gen)
      if (n > 0) cases.push_back({0, n, d});
    for (const auto& pg : args.n_pg) {
      const auto [pp, tg] = parse_pg(pg);
      if (pp > 0 || tg > 0) cases.push_back({pp, tg, d});
    }
  }
  if (cases.empty()) throw_usage_error("bench: no tests (-p, -n and -pg are all 0)");
  runtime::install_interrupt_handler();
  ResultPrinter printer(args.json ? "jsonl" : args.output);
  for (const int t : args.threads) {
    runtime::EngineOptions options;
    options.threads = t;
    options.cache = args.cache;
    options.exact = args.exact;
    options.exact_attention = args.exact_attention;
    options.exact_ring = args.exact_ring;
    const auto engine = runtime::Engine::load(args.model, options);
    runtime::require_text_generation(*engine, "use `okapi embed -m MODEL` for its vectors");
    for (const auto& test : cases) {
      const std::string time = utc_now();
      const eval::BenchSample s = eval::run_bench_case(*engine, test, args.batch_size, args.repetitions);
      if (runtime::interrupt_requested()) {
        printer.finish();
        std::fprintf(stderr, "bench: interrupted\n");
        return 130;
      }
      printer.add(record(args, *engine, t, test, s, time));
    }
  }
  printer.finish();
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "prefill / decode throughput (llama-bench style table)");
  add_model_source_flags(cmd, args->source, cmd->add_option("-m,--model", args->model, "GGUF model")->check(non_empty()));
  // List flags: comma-separated, and a repeated flag adds to the list (as llama-bench).
  const auto list = CLI::MultiOptionPolicy::TakeAll;
  cmd->add_option("-p,--n-prompt", args->n_prompt, "prefill lengths, comma-separated (0: none)")->delimiter(',')
      ->multi_option_policy(list)->capture_default_str()->check(in_range(0, 2147483647.0));
  cmd->add_option("-n,--n-gen", args->n_gen, "decode lengths, comma-separated (0: none)")->delimiter(',')
      ->multi_option_policy(list)->capture_default_str()->check(in_range(0, 2147483647.0));
  cmd->add_option("-d,--n-depth", args->n_depth,
                  "tokens already in the cache when a test starts, comma-separated (prefilled once, untimed)")
      ->delimiter(',')->multi_option_policy(list)->capture_default_str()->check(in_range(0, 2147483647.0));
  cmd->add_option("--pg", args->n_pg,
                  "PP,TG: a test of a PP-token prompt then TG generated tokens, timed together "
                  "((PP + TG) / time; also -pg, repeatable, as llama-bench)")
      ->multi_option_policy(list)->check(CLI::Validator(check_pg, "PP,TG"));
  cmd->add_option("-t,--threads", args->threads, "thread counts, comma-separated (default: one per core)")
      ->delimiter(',')->multi_option_policy(list)->capture_default_str()->check(in_range(1, kMaxThreads));
  cmd->add_option("-r,--repetitions", args->repetitions, "timed runs per test")->capture_default_str()
      ->check(in_range(1, 1000000));
  add_batch_flag(cmd, args->batch_size, "prefill tokens per forward pass");
  add_cache_type_flags(cmd, args->cache);
  add_exact_flags(cmd, args->exact, args->exact_attention, args->exact_ring);
  auto* output = cmd->add_option("-o,--output", args->output, "output format: md, csv, json (one array) or jsonl")
                     ->capture_default_str()
                     ->check(CLI::IsMember({"md", "csv", "json", "jsonl"}));
  auto* json = cmd->add_flag("--json", args->json, "the same as -o jsonl");
  json->excludes(output);
  output->excludes(json);
  cmd->callback([args, cmd, &result] {
    check_exact_flags(cmd, args->exact);
    require_model_source("bench", args->model, args->source);
    if (result.dry_run) return;
    args->model = resolve_model_source(args->model, args->source);
    result.exit_code = run(*args);
  });
}

}  // namespace okapi::cli
