#include "eval/kv_eval.hpp"

#include <fmt/format.h>

#include <atomic>
#include <unistd.h>

#include "core/error.hpp"
#include "eval/bench.hpp"
#include "eval/perplexity.hpp"
#include "kv/kv_store.hpp"
#include "runtime/engine.hpp"

namespace okapi::eval {

namespace {

// The reference run's log-probs, removed when the evaluation ends however it ends.
struct TempFile {
  std::filesystem::path path;
  TempFile() {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           fmt::format("okapi-kv-eval-{}-{}.logits", static_cast<long>(::getpid()), counter++);
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
};

// Per-head calibration (sp) is amortized over the evaluated context.
double row_bits(const kv::CacheTypes& t, int64_t dim_k, int64_t dim_v, int64_t n_ctx) {
  const double k = t.k.bits_per_value(dim_k, "K", n_ctx) * static_cast<double>(dim_k);
  const double v = t.v.bits_per_value(dim_v, "V", n_ctx) * static_cast<double>(dim_v);
  return (k + v) / static_cast<double>(dim_k + dim_v);
}

}  // namespace

kv::CacheTypes parse_kv_eval_type(std::string_view spec) {
  kv::CacheTypes t;
  const size_t plus = spec.find('+');
  if (plus != std::string_view::npos) {
    t.rotation = kv::parse_kv_rotation(spec.substr(plus + 1));
    spec = spec.substr(0, plus);
  }
  const size_t slash = spec.find('/');
  t.k = kv::CacheType::parse(spec.substr(0, slash));
  t.v = slash == std::string_view::npos ? t.k : kv::CacheType::parse(spec.substr(slash + 1));
  return t;
}

std::vector<kv::CacheTypes> all_kv_eval_types() {
  std::vector<kv::CacheTypes> types;
  for (const kv::CacheType type : kv::CacheType::all()) types.push_back({type, type});
  for (const kv::CacheType type : kv::CacheType::all()) {
    // The block formats once more rotated (the tbq types always are; the float ones gain nothing).
    if (type.is_quantized_block()) types.push_back({type, type, kv::KvRotation::Hadamard});
  }
  return types;
}

std::vector<kv::CacheTypes> parse_kv_eval_types(std::string_view list) {
  if (list == "all") return all_kv_eval_types();
  std::vector<kv::CacheTypes> types;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string_view item = list.substr(start, comma - start);
    if (item.empty()) throw_error_for(Setting::KvEvalTypes, "the list of cache types '{}' has an empty entry", list);
    types.push_back(parse_kv_eval_type(item));
    start = comma + 1;
  }
  return types;
}

KvEvalReport evaluate_kv_types(const std::filesystem::path& model, const std::string& text,
                               const std::vector<kv::CacheTypes>& types, const KvEvalOptions& options,
                               const std::function<void(const KvEvalRow&)>& on_row) {
  if (types.empty()) throw_error("kv-eval: no cache types to evaluate");
  TempFile reference_logits;
  PerplexityOptions ppl;
  ppl.n_ctx = options.n_ctx;
  ppl.n_chunks = options.n_chunks;
  ppl.batch_size = options.batch_size;
  KvEvalReport report;
  int64_t dim_k = 0, dim_v = 0;
  {
    ppl.save_logits = reference_logits.path;
    const auto engine = runtime::Engine::load(model, {options.threads});
    const PerplexityResult r = compute_perplexity(*engine, text, ppl);
    report.ppl_f32 = r.ppl;
    report.scored = r.scored;
    report.n_ctx = r.n_ctx;
    dim_k = engine->hparams().head_dim_k;
    dim_v = engine->hparams().head_dim_v;
    ppl.save_logits.clear();
  }
  ppl.kl_divergence = reference_logits.path;
  for (const kv::CacheTypes& type : types) {
    KvEvalRow row;
    row.type = type;
    try {
      row.bits_per_value = row_bits(type, dim_k, dim_v, report.n_ctx);
    } catch (const Error& e) {
      row.error = e.what();
      if (on_row) on_row(row);
      report.rows.push_back(std::move(row));
      continue;
    }
    const auto engine = runtime::Engine::load(model, {options.threads, type});
    const PerplexityResult r = compute_perplexity(*engine, text, ppl);
    row.ratio_vs_f16 = 16.0 / row.bits_per_value;
    row.kld_mean = r.kl->kld_mean;
    row.kld_p99 = r.kl->kld_p99;
    row.top1 = r.kl->same_top_fraction;
    row.ppl = r.ppl;
    row.ppl_delta_rel = r.ppl / report.ppl_f32 - 1.0;
    for (const int64_t depth : options.speed_depths) {
      if (!options.speed) {
        row.tg.emplace_back();
        continue;
      }
      const BenchSample s = run_bench_case(*engine, {0, options.n_gen, depth}, options.batch_size, options.repetitions);
      row.tg.emplace_back(s.mean);
    }
    if (on_row) on_row(row);
    report.rows.push_back(std::move(row));
  }
  return report;
}

}  // namespace okapi::eval
