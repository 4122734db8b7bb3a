// okapi kv-eval: how much each KV cache type costs in quality and speed, against an f32 cache.
// For a model and a text: one llama-perplexity run with an f32 cache saves its log-probs, then
// each type runs the same chunks with --kl-divergence against them (eval/perplexity.hpp):
// mean and 99th-percentile KL divergence, top-1 agreement, perplexity and its change, and decode
// speed at two context depths (tg N @ d512 and @ d8192, eval/bench.hpp).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kv/cache_type.hpp"

namespace okapi::eval {

// A cache configuration as kv::CacheTypes::name() spells it: "q4_0" (K and V), "q8_0/q4_0" (K/V),
// "+hadamard" to rotate: "q4_0+hadamard". Throws okapi::Error for an unknown cache type or rotation.
kv::CacheTypes parse_kv_eval_type(std::string_view spec);
// "all": every cache type for K and V alike, then the q* block formats again with +hadamard.
std::vector<kv::CacheTypes> all_kv_eval_types();
// A comma-separated list, or "all".
std::vector<kv::CacheTypes> parse_kv_eval_types(std::string_view list);

struct KvEvalOptions {
  int threads = 1;
  int64_t n_ctx = 512;
  int64_t n_chunks = -1;  // all the text holds
  int64_t batch_size = 512;
  bool speed = true;      // measure decode at speed_depths
  std::vector<int64_t> speed_depths{512, 8192};
  int64_t n_gen = 32;
  int repetitions = 2;
};

struct KvEvalRow {
  kv::CacheTypes type;
  double bits_per_value = 0;  // K and V together, block scales included
  double ratio_vs_f16 = 0;
  double kld_mean = 0, kld_p99 = 0;
  double top1 = 0;            // fraction of scored positions whose argmax equals the f32 cache's
  double ppl = 0, ppl_delta_rel = 0;
  std::vector<std::optional<double>> tg;  // tok/s per speed depth (nullopt: not measured)
  std::string error;  // non-empty: the type cannot serve this model (e.g. its head width); nothing measured
};

struct KvEvalReport {
  double ppl_f32 = 0;
  int64_t scored = 0;  // tokens scored per type
  int64_t n_ctx = 0;
  std::vector<KvEvalRow> rows;
};

// Runs the evaluation; `on_row` sees each type's row as soon as it is measured.
KvEvalReport evaluate_kv_types(const std::filesystem::path& model, const std::string& text,
                               const std::vector<kv::CacheTypes>& types, const KvEvalOptions& options,
                               const std::function<void(const KvEvalRow&)>& on_row = {});

}  // namespace okapi::eval
