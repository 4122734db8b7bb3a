// okapi bench -m MODEL [-p 64,128,512] [-n 64,128] [-t 1,2] [-r 5] [-b 512] [--json] [-ctk/-ctv]
//             [--exact [--exact-attention ntt|direct]]
// Prefill (ppN) and decode (tgN) throughput, mean ± sd over repetitions, as a markdown table in
// llama-bench's layout (model, size, params, backend, threads, test, t/s); --json: one record per
// line instead.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/json_output.hpp"
#include "runtime/bench.hpp"
#include "runtime/cancel.hpp"
#include "exact_flags.hpp"
#include "runtime/engine.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::vector<int64_t> n_prompt{512};
  std::vector<int64_t> n_gen{128};
  std::vector<int> threads{1};
  int repetitions = 5;
  int64_t batch_size = 512;
  std::string cache_type_k = "f32";
  std::string cache_type_v = "f32";
  bool exact = false;
  std::string exact_attention = "direct";
  bool json = false;
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

int run(const BenchArgs& args) {
  std::vector<runtime::BenchCase> cases;
  for (const auto p : args.n_prompt)
    if (p > 0) cases.push_back({p, 0});
  for (const auto n : args.n_gen)
    if (n > 0) cases.push_back({0, n});
  if (cases.empty()) throw_error("bench: no tests (-p and -n are all 0)");
  runtime::install_interrupt_handler();
  const std::string name = std::filesystem::path(args.model).filename().string();
  if (!args.json) {
    std::printf("| model | size | params | backend | threads | test | t/s |\n");
    std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
  }
  for (const int t : args.threads) {
    runtime::EngineOptions options;
    options.threads = t;
    options.cache_type_k = args.cache_type_k;
    options.cache_type_v = args.cache_type_v;
    options.exact = args.exact;
    options.exact_attention = args.exact_attention;
    const auto engine = runtime::Engine::load(args.model, options);
    const std::string backend = args.exact ? "CPU exact-" + args.exact_attention : "CPU";
    for (const auto& test : cases) {
      const runtime::BenchSample s = runtime::run_bench_case(*engine, test, args.batch_size, args.repetitions);
      if (runtime::interrupt_requested()) {
        std::fprintf(stderr, "bench: interrupted\n");
        return 130;
      }
      if (args.json) {
        nlohmann::ordered_json j;
        j["model"] = name;
        j["model_bytes"] = engine->file_bytes();
        j["params"] = engine->parameter_count();
        j["threads"] = t;
        j["test"] = test.name();
        j["n_prompt"] = test.n_prompt;
        j["n_gen"] = test.n_gen;
        j["cache_type_k"] = args.exact ? "exact-" + args.exact_attention : args.cache_type_k;
        j["cache_type_v"] = args.exact ? "exact-" + args.exact_attention : args.cache_type_v;
        j["backend"] = backend;
        j["avg_ts"] = s.mean;
        j["stddev_ts"] = s.stddev;
        j["samples_ts"] = s.samples;
        std::printf("%s\n", dump_json(std::move(j)).c_str());
      } else {
        std::printf("| %s | %s | %s | %s | %d | %s | %.2f ± %.2f |\n", name.c_str(),
                    human_size(engine->file_bytes()).c_str(), human_count(engine->parameter_count()).c_str(),
                    backend.c_str(), t,
                    test.name().c_str(), s.mean, s.stddev);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "prefill / decode throughput (llama-bench style table)");
  cmd->add_option("-m,--model", args->model, "GGUF model")->required();
  cmd->add_option("-p,--n-prompt", args->n_prompt, "prefill lengths, comma-separated")->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", args->n_gen, "decode lengths, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "thread counts, comma-separated")->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", args->repetitions, "timed runs per test")->capture_default_str();
  cmd->add_option("-b,--batch-size", args->batch_size, "prefill tokens per forward pass")->capture_default_str();
  cmd->add_option("--cache-type-k", args->cache_type_k, "K cache type: f32 or f16 (also -ctk)")->capture_default_str();
  cmd->add_option("--cache-type-v", args->cache_type_v, "V cache type: f32 or f16 (also -ctv)")->capture_default_str();
  add_exact_flags(cmd, args->exact, args->exact_attention);
  cmd->add_flag("--json", args->json, "one JSON record per test instead of the table");
  cmd->callback([args, cmd, &result] {
    check_exact_flags(cmd, args->exact);
    result.exit_code = run(*args);
  });
}

}  // namespace okapi::cli
