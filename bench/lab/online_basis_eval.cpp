// Seed 003's online basis, measured (lab/online_basis.hpp): greedy speculative decoding of
// a target with its own compressed self-drafter, with the drafter's bases static or updated by
// Oja's rule from the rejections, over sets of prompts (the bases carry over from prompt to
// prompt within a set, as over a session, and start afresh for each set).
//
// Both models run through ObservingOps, which shows every projection's input: at a rejection
// (the target's argmax differs from the draft) the target's verification pass and the drafter's
// pass read the same tokens at the same position, and x = target input − drafter input per
// basis is the seed's sample. Greedy verification keeps the target's tokens, so every mode must
// give the same text; the tool checks it.
//
//   okapi_online_basis_eval TARGET.gguf COMPRESSED.gguf [-n 128] [--draft 4] [-t 2]
//       [--eta0 0.01] [--normalize] [--min-rejections 4] [--sample difference|target]
//       --set NAME FILE... [--set NAME FILE...]
// --sample target feeds the target's input itself rather than the seed's difference (a control:
// Oja then tracks the inputs' leading directions at the rejections).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/make_backend.hpp"
#include "compress/calibration.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "eval/perplexity.hpp"
#include "format/gguf.hpp"
#include "kv/kv_store.hpp"
#include "lab/online_basis.hpp"
#include "runtime/engine.hpp"

namespace {

using namespace okapi;
using Clock = std::chrono::steady_clock;

// Keeps each watched weight's input from the latest mat-mul (all its rows).
class LastInputs : public compress::ObservingOps::Observer {
 public:
  explicit LastInputs(const lab::OnlineBasis& basis) {
    for (size_t u = 0; u < basis.units().size(); ++u) unit_of_[basis.input_name(u)] = u;
    inputs_.resize(basis.units().size());
  }
  void matmul_input(std::span<const std::string_view> weights, const float* x, int64_t n_tokens, int64_t n) override {
    for (const std::string_view w : weights) {
      const auto it = unit_of_.find(w);
      if (it == unit_of_.end()) continue;
      inputs_[it->second].assign(x, x + n_tokens * n);
    }
  }
  void norm_input(std::string_view, const float*, int64_t, int64_t) override {}
  // Row `row` of unit u's latest input (n values).
  std::vector<float> row(size_t u, int64_t row, int64_t n) const {
    const std::vector<float>& in = inputs_[u];
    if (static_cast<int64_t>(in.size()) < (row + 1) * n) throw_error("no input row {} recorded for basis {}", row, u);
    return {in.begin() + row * n, in.begin() + (row + 1) * n};
  }

 private:
  std::map<std::string, size_t, std::less<>> unit_of_;
  std::vector<std::vector<float>> inputs_;
};

struct Options {
  std::string target, compressed;
  int n_predict = 128, draft = 4, threads = 2, min_rejections = 4;
  double eta0 = 0.01;
  bool normalize = false;
  bool sample_target = false;  // --sample target: x = the target's input alone (not the seed's rule)
  std::vector<std::pair<std::string, std::vector<std::string>>> sets;
};

struct SetResult {
  int64_t drafted = 0, accepted = 0, rounds = 0, tokens = 0;
  double seconds = 0, update_seconds = 0;
  uint64_t updates = 0, samples = 0;
  std::vector<std::vector<int32_t>> outputs;
};

int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

SetResult run_set(runtime::Engine& engine, const gguf::File& compressed, const std::vector<std::string>& files,
                  const Options& o, bool online, ThreadPool& pool) {
  const model::Model& model = engine.model();
  lab::OnlineBasisOptions bo;
  bo.eta0 = o.eta0;
  bo.min_rejections = o.min_rejections;
  lab::OnlineBasis basis(compressed, model, bo);
  LastInputs target_inputs(basis), draft_inputs(basis);
  backend::BackendOptions cpu_options;
  cpu_options.pool = &pool;
  const std::unique_ptr<model::Ops> target_cpu = backend::make_backend(cpu_options);
  const std::unique_ptr<model::Ops> draft_cpu = backend::make_backend(cpu_options);
  compress::ObservingOps target_ops(*target_cpu, target_inputs), draft_ops(*draft_cpu, draft_inputs);
  target_ops.prepare(model.weights());
  draft_ops.prepare(model.weights());
  draft_ops.set_replacements(&basis.replacements());
  const model::HParams& hp = model.hparams();
  const int64_t n_vocab = model.n_vocab();
  SetResult result;
  for (const std::string& file : files) {
    tokenizer::EncodeOptions encode;
    std::vector<int32_t> context = engine.tokenizer().encode(okapi::read_text_file(file), encode);
    const int64_t n_ctx = static_cast<int64_t>(context.size()) + o.n_predict + o.draft + 2;
    const kv::KvShape shape{hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, n_ctx};
    const auto target_kv = target_ops.make_kv(shape, {});
    const auto draft_kv = draft_ops.make_kv(shape, {});
    std::vector<float> logits(static_cast<size_t>((o.draft + 1) * n_vocab));
    const auto run = [&](model::Ops& ops, kv::KvStore& kv, std::span<const int32_t> tokens, int64_t first,
                         model::LogitRows rows) {
      std::vector<int32_t> positions(tokens.size());
      std::iota(positions.begin(), positions.end(), static_cast<int32_t>(first));
      model.forward(ops, kv, tokens, positions, rows, logits.data());
    };
    const auto start = Clock::now();
    // Both caches hold every context token but the last.
    const std::span<const int32_t> prefix(context.data(), context.size() - 1);
    if (!prefix.empty()) {
      run(target_ops, *target_kv, prefix, 0, model::LogitRows::Last);
      run(draft_ops, *draft_kv, prefix, 0, model::LogitRows::Last);
    }
    const size_t prompt_size = context.size();
    while (static_cast<int64_t>(context.size() - prompt_size) < o.n_predict) {
      const auto p = static_cast<int64_t>(context.size());
      const int k = static_cast<int>(std::min<int64_t>(o.draft, o.n_predict - (p - static_cast<int64_t>(prompt_size))));
      // Draft k tokens; draft_rows[i] holds the drafter's inputs at the row that predicted draft i.
      std::vector<int32_t> drafts;
      std::vector<std::vector<std::vector<float>>> draft_rows;
      int32_t token = context.back();
      for (int i = 0; i < k; ++i) {
        run(draft_ops, *draft_kv, std::span<const int32_t>(&token, 1), p - 1 + i, model::LogitRows::Last);
        std::vector<std::vector<float>> rows;
        for (size_t u = 0; u < basis.units().size(); ++u) rows.push_back(draft_inputs.row(u, 0, basis.units()[u].n_in));
        draft_rows.push_back(std::move(rows));
        token = argmax(logits.data(), n_vocab);
        drafts.push_back(token);
      }
      // Verify: the last context token and the drafts, every row's logits.
      std::vector<int32_t> batch = {context.back()};
      batch.insert(batch.end(), drafts.begin(), drafts.end());
      run(target_ops, *target_kv, batch, p - 1, model::LogitRows::All);
      int a = 0;
      while (a < k && argmax(logits.data() + a * n_vocab, n_vocab) == drafts[static_cast<size_t>(a)]) ++a;
      const int32_t next = argmax(logits.data() + a * n_vocab, n_vocab);
      if (a < k && online) {
        std::vector<std::vector<float>> samples;
        for (size_t u = 0; u < basis.units().size(); ++u) {
          std::vector<float> x = target_inputs.row(u, a, basis.units()[u].n_in);
          const std::vector<float>& d = draft_rows[static_cast<size_t>(a)][u];
          double norm = 0;
          for (size_t c = 0; c < x.size(); ++c) {
            if (!o.sample_target) x[c] -= d[c];
            norm += double{x[c]} * x[c];
          }
          if (o.normalize && norm > 0) {
            for (float& v : x) v = static_cast<float>(v / std::sqrt(norm));
          }
          samples.push_back(std::move(x));
        }
        basis.queue_rejection(std::move(samples));
      }
      context.insert(context.end(), drafts.begin(), drafts.begin() + a);
      context.push_back(next);
      result.drafted += k;
      result.accepted += a;
      ++result.rounds;
      // Cells kept: through the last accepted draft (the new last token is run next round).
      target_kv->truncate(p + a);
      draft_kv->truncate(std::min<int64_t>(p + a, p - 1 + k));
      if (a == k) {
        // The drafter never ran its last draft: run it so its cache holds every token but the last.
        run(draft_ops, *draft_kv, std::span<const int32_t>(&drafts.back(), 1), p - 1 + k, model::LogitRows::Last);
      }
      if (online) basis.apply_pending();  // between steps, as the seed applies them
    }
    result.seconds += std::chrono::duration<double>(Clock::now() - start).count();
    // The last round may overshoot by its bonus token, by how much depends on the drafts.
    context.resize(prompt_size + static_cast<size_t>(o.n_predict));
    result.tokens += o.n_predict;
    result.outputs.emplace_back(context.begin() + static_cast<std::ptrdiff_t>(prompt_size), context.end());
  }
  result.update_seconds = basis.stats().update_seconds;
  result.updates = basis.stats().batches;
  result.samples = basis.stats().applied;
  return result;
}

// A flag's number, or okapi::Error naming the flag (std::stoi would say only "stoi").
template <typename T>
T number(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const T v = std::is_same_v<T, double> ? static_cast<T>(std::stod(text, &used)) : static_cast<T>(std::stoi(text, &used));
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw_error("{}: '{}' is not a number", flag, text);
}

Options parse(int argc, char** argv) {
  Options o;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) throw_error("{} needs a value", a);
      return std::string(argv[++i]);
    };
    if (a == "-n") o.n_predict = number<int>(a, value());
    else if (a == "--draft") o.draft = number<int>(a, value());
    else if (a == "-t") o.threads = number<int>(a, value());
    else if (a == "--eta0") o.eta0 = number<double>(a, value());
    else if (a == "--min-rejections") o.min_rejections = number<int>(a, value());
    else if (a == "--normalize") o.normalize = true;
    else if (a == "--sample") {
      const std::string v = value();
      if (v != "difference" && v != "target") throw_error("--sample: difference or target, not '{}'", v);
      o.sample_target = v == "target";
    }
    else if (a == "--set") {
      o.sets.emplace_back(value(), std::vector<std::string>{});
      while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) o.sets.back().second.push_back(argv[++i]);
    } else positional.push_back(a);
  }
  if (positional.size() != 2 || o.sets.empty() || o.draft < 1 || o.n_predict < 1 || o.threads < 1 || !(o.eta0 > 0) ||
      o.min_rejections < 1)
    throw_error("usage: okapi_online_basis_eval TARGET COMPRESSED [-n N] [--draft K] [-t T] [--eta0 E] [--normalize] "
                "[--min-rejections M] [--sample difference|target] --set NAME FILE... [--set ...]");
  o.target = positional[0];
  o.compressed = positional[1];
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    runtime::EngineOptions eo;
    eo.threads = 1;
    const auto engine = runtime::Engine::load(o.target, eo);
    const auto compressed = gguf::File::open(o.compressed);
    ThreadPool pool(o.threads);
    std::printf("| set | basis | prompts | drafted | accepted | acceptance | tok/s | updates | samples | update ms | same text |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (const auto& [name, files] : o.sets) {
      const SetResult fixed = run_set(*engine, compressed, files, o, false, pool);
      const SetResult online = run_set(*engine, compressed, files, o, true, pool);
      const bool same = fixed.outputs == online.outputs;
      for (const auto* r : {&fixed, &online}) {
        std::printf("| %s | %s | %zu | %lld | %lld | %.1f%% | %.1f | %llu | %llu | %.1f | %s |\n", name.c_str(),
                    r == &fixed ? "static" : "online (Oja)", files.size(), static_cast<long long>(r->drafted),
                    static_cast<long long>(r->accepted), 100.0 * static_cast<double>(r->accepted) / static_cast<double>(r->drafted),
                    static_cast<double>(r->tokens) / r->seconds, static_cast<unsigned long long>(r->updates),
                    static_cast<unsigned long long>(r->samples), 1e3 * r->update_seconds, same ? "yes" : "NO");
      }
      if (!same) return 2;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "okapi: error: %s\n", e.what());
    return 1;
  }
}
