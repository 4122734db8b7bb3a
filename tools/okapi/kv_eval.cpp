// okapi kv-eval -m MODEL -f TEXT [-c CTX] [--chunks N] [--types LIST|all] [-t T] [--no-speed] [--json]
// Each KV cache type against an f32 cache on the same model and text (eval/kv_eval.hpp): bits
// per value, ratio vs f16, mean / p99 KL divergence, top-1 agreement, perplexity and its change,
// decode tok/s at 512 and 8192 tokens of context. A markdown table, or with --json one object per
// type and line.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "common_flags.hpp"
#include "eval/kv_eval.hpp"
#include "eval/perplexity.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

struct KvEvalArgs {
  std::string model;
  std::string text_file;
  std::string types = "f16,q8_0,q4_0,q4_0+hadamard";
  eval::KvEvalOptions options;
  bool no_speed = false;
  bool json = false;
};

std::string speed(const std::optional<double>& tg) { return tg ? fmt::format("{:.1f}", *tg) : "-"; }

void print_row(const eval::KvEvalRow& r, bool json) {
  if (!r.error.empty()) {
    if (json) {
      std::printf("%s\n", nlohmann::json{{"type", r.type.name()}, {"error", r.error}}.dump().c_str());
    } else {
      std::printf("| %-16s | %s |\n", r.type.name().c_str(), r.error.c_str());
    }
    std::fflush(stdout);
    return;
  }
  if (json) {
    nlohmann::json j;
    j["type"] = r.type.name();
    j["bits_per_value"] = r.bits_per_value;
    j["ratio_vs_f16"] = r.ratio_vs_f16;
    j["kld_mean"] = r.kld_mean;
    j["kld_p99"] = r.kld_p99;
    j["top1"] = r.top1;
    j["ppl"] = r.ppl;
    j["ppl_delta_rel"] = r.ppl_delta_rel;
    j["tg_512"] = r.tg.size() > 0 && r.tg[0] ? nlohmann::json(*r.tg[0]) : nlohmann::json(nullptr);
    j["tg_8192"] = r.tg.size() > 1 && r.tg[1] ? nlohmann::json(*r.tg[1]) : nlohmann::json(nullptr);
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("| %-16s | %6.2f | %5.2fx | %.6f | %.6f | %6.2f%% | %9.4f | %+7.3f%% | %8s | %8s |\n",
                r.type.name().c_str(), r.bits_per_value, r.ratio_vs_f16, r.kld_mean, r.kld_p99, 100.0 * r.top1, r.ppl,
                100.0 * r.ppl_delta_rel, speed(r.tg.size() > 0 ? r.tg[0] : std::nullopt).c_str(),
                speed(r.tg.size() > 1 ? r.tg[1] : std::nullopt).c_str());
  }
  std::fflush(stdout);
}

int run(KvEvalArgs args) {
  const auto types = eval::parse_kv_eval_types(args.types);
  args.options.speed = !args.no_speed;
  const std::string text = okapi::read_text_file(args.text_file);
  // The header waits for the first row: nothing reaches stdout before the model and text have
  // loaded and run (a bad file is one error line, as in every verb).
  bool header = args.json;
  const auto report = eval::evaluate_kv_types(args.model, text, types, args.options, [&](const eval::KvEvalRow& r) {
    if (!header) {
      std::printf("| type             |    bpv | vs f16 | KLD mean | KLD p99  |   top-1 |       PPL |    ΔPPL  | tg @ 512 | tg @ 8192 |\n");
      std::printf("|------------------|-------:|-------:|---------:|---------:|--------:|----------:|---------:|---------:|----------:|\n");
      header = true;
    }
    print_row(r, args.json);
  });
  std::fprintf(stderr, "kv-eval: f32 cache PPL %.4f, %lld tokens scored per type (chunks of %lld)\n", report.ppl_f32,
               static_cast<long long>(report.scored), static_cast<long long>(report.n_ctx));
  return 0;
}

}  // namespace

void register_kv_eval(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<KvEvalArgs>();
  auto& o = args->options;
  o.threads = default_threads();
  auto* cmd = app.add_subcommand("kv-eval", "quality and speed of KV cache types against an f32 cache");
  cmd->add_option("-m,--model", args->model, "GGUF model")->required()->check(non_empty());
  cmd->add_option("-f,--file", args->text_file, "text file (held out from the model's training)")
      ->required()
      ->check(non_empty());
  add_ctx_flag(cmd, o.n_ctx, "tokens per chunk (default 512)");
  cmd->add_option("--chunks", o.n_chunks, "chunks to evaluate (-1: all)")->capture_default_str()
      ->check(in_range(-1, kUnbounded));
  cmd->add_option("--types", args->types,
                  "comma-separated cache types: TYPE (K and V), K/V, TYPE+hadamard (rotated); or all")
      ->capture_default_str()
      ->check(non_empty());
  add_batch_flag(cmd, o.batch_size, "tokens per forward pass");
  add_threads_flag(cmd, o.threads);
  cmd->add_option("--n-gen", o.n_gen, "tokens decoded per speed measurement")->capture_default_str()
      ->check(in_range(1, 100000));
  cmd->add_option("-r,--repetitions", o.repetitions, "timed runs per speed measurement")->capture_default_str()
      ->check(in_range(1, 1000));
  cmd->add_flag("--no-speed", args->no_speed, "skip the decode speed measurements");
  cmd->add_flag("--json", args->json, "one JSON object per type and line");
  cmd->callback([args, &result] {
    if (result.dry_run) return;
    result.exit_code = run(*args);
  });
}

}  // namespace okapi::cli
