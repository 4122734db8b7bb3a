// okapi analyze -m MODEL [--spectra] [--filter TEXT] [-f TEXT --intrinsic-dim --gtc] [--svg DIR] [--json]
// The geometry of a model's weights: per 2-D weight matrix its singular-value spectrum, effective
// rank, stable rank and the ranks keeping 90% / 99% of the energy (compress/spectra.hpp). A
// markdown table, or with --json one object per matrix and line (with every singular value);
// --svg DIR writes spectra-KIND.svg per matrix kind and effective-rank.svg.
// And the geometry of its hidden states over a text: the intrinsic dimension of the residual
// stream per layer (TwoNN and PCA, eval/intrinsic_dim.hpp) and how well a cache of stored
// trajectories with a linear correction predicts the next layer and the logits (seed 003's GTC,
// eval/trajectory_cache.hpp); --svg adds intrinsic-dimension.svg, gtc-hit-rate.svg and
// gtc-logits.svg.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "common_flags.hpp"
#include "compress/spectra.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_output.hpp"
#include "core/output_paths.hpp"
#include "core/svg_chart.hpp"
#include "eval/hidden_states.hpp"
#include "eval/intrinsic_dim.hpp"
#include "eval/perplexity.hpp"
#include "eval/trajectory_cache.hpp"
#include "format/model_file.hpp"
#include "model/model.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

namespace fs = std::filesystem;

struct AnalyzeArgs {
  std::string model;
  bool spectra = false;  // also the analysis run when none is asked for
  std::string filter;
  std::string svg_dir;
  bool json = false;
  bool intrinsic_dim = false, gtc = false;
  std::string text;
  int64_t tokens = 2048;
  int64_t n_ctx = 256;
  int threads = 0;
  eval::GtcOptions gtc_options;
  // Flags given that only the hidden-state analyses read, to refuse them without one.
  std::vector<std::string> state_flags_given;
  bool gtc_flags_given = false;

  bool hidden_states() const { return intrinsic_dim || gtc; }
  bool run_spectra() const { return spectra || !hidden_states(); }
};

void write_file(const fs::path& path, const std::string& text) {
  AtomicFileWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

// The SVG files --svg writes for the matrices of `file` that pass `filter`, by kind.
std::vector<NamedPath> planned_svgs(const gguf::File& file, const AnalyzeArgs& args) {
  std::vector<NamedPath> out;
  if (args.intrinsic_dim) out.push_back({fs::path(args.svg_dir) / "intrinsic-dimension.svg", "--svg"});
  if (args.gtc) {
    out.push_back({fs::path(args.svg_dir) / "gtc-hit-rate.svg", "--svg"});
    out.push_back({fs::path(args.svg_dir) / "gtc-logits.svg", "--svg"});
  }
  if (!args.run_spectra()) return out;
  std::set<std::string> kinds;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (!compress::is_weight_matrix(t, args.filter)) continue;
    const std::string kind = compress::layer_and_kind(t.name).second;
    if (kinds.insert(kind).second) out.push_back({fs::path(args.svg_dir) / fmt::format("spectra-{}.svg", kind), "--svg"});
  }
  out.push_back({fs::path(args.svg_dir) / "effective-rank.svg", "--svg"});
  return out;
}

void print_row(const compress::MatrixSpectrum& m, bool json) {
  if (json) {
    nlohmann::ordered_json j;
    j["tensor"] = m.name;
    j["layer"] = m.layer;
    j["kind"] = m.kind;
    j["rows"] = m.rows;
    j["cols"] = m.cols;
    j["type"] = m.type;
    j["sigma_max"] = m.sigma.empty() ? 0.0 : m.sigma[0];
    j["effective_rank"] = m.effective_rank;
    j["stable_rank"] = m.stable_rank;
    j["rank_90"] = m.rank_90;
    j["rank_99"] = m.rank_99;
    j["singular_values"] = m.sigma;
    std::printf("%s\n", dump_json(j).c_str());
  } else {
    const double full = static_cast<double>(std::min(m.rows, m.cols));
    std::printf("| %-28s | %5lld x %-5lld | %-6s | %10.4g | %8.1f (%4.1f%%) | %8.1f | %6lld | %6lld |\n", m.name.c_str(),
                static_cast<long long>(m.rows), static_cast<long long>(m.cols), m.type.c_str(),
                m.sigma.empty() ? 0.0 : m.sigma[0], m.effective_rank, 100.0 * m.effective_rank / full, m.stable_rank,
                static_cast<long long>(m.rank_90), static_cast<long long>(m.rank_99));
  }
  std::fflush(stdout);
}

void check_flag_combinations(const AnalyzeArgs& args) {
  if (args.hidden_states() && args.text.empty()) {
    throw_usage_error("analyze: --intrinsic-dim and --gtc run the model over a text: give it with -f TEXT");
  }
  if (!args.hidden_states() && !args.text.empty()) {
    throw_usage_error("analyze: -f TEXT is read only by --intrinsic-dim and --gtc; add one of them");
  }
  if (!args.hidden_states() && !args.state_flags_given.empty()) {
    throw_usage_error("analyze: {} applies to --intrinsic-dim and --gtc; add one of them", args.state_flags_given.front());
  }
  if (!args.gtc && args.gtc_flags_given) throw_usage_error("analyze: --gtc-tolerance, --gtc-stored and --gtc-neighbours apply to --gtc; add it");
  if (!args.filter.empty() && !args.run_spectra()) {
    throw_usage_error("analyze: --filter selects weight matrices for --spectra; add --spectra or leave out --filter");
  }
}

void run_spectra(const gguf::File& file, const AnalyzeArgs& args) {
  bool header = args.json;
  const auto spectra = compress::weight_spectra(file, args.filter, [&](const compress::MatrixSpectrum& m) {
    if (!header) {
      std::printf("| tensor                       | rows x cols   | type   |  sigma max | effective rank  | stable r | r(90%%) | r(99%%) |\n");
      std::printf("|------------------------------|---------------|--------|-----------:|----------------:|---------:|-------:|-------:|\n");
      header = true;
    }
    print_row(m, args.json);
  });
  if (!args.svg_dir.empty()) {
    const std::string model_name = fs::path(args.model).filename().string();
    for (const auto& [kind, svg] : compress::spectra_svgs(spectra, model_name)) {
      write_file(fs::path(args.svg_dir) / fmt::format("spectra-{}.svg", kind), svg);
    }
    write_file(fs::path(args.svg_dir) / "effective-rank.svg", compress::effective_rank_svg(spectra, model_name));
  }
}

// Layer ℓ < L is the residual entering block ℓ; ℓ = L the final residual.
std::string layer_label(int64_t l, int64_t n_layer) { return l == n_layer ? "final" : std::to_string(l); }

void print_intrinsic_dims(const std::vector<eval::IntrinsicDimension>& dims, const eval::HiddenStates& states,
                          bool json) {
  if (!json) {
    std::printf("\n## Intrinsic dimension of the residual stream (%lld tokens, width %lld; layer N = entering block N)\n\n",
                static_cast<long long>(states.n_tokens), static_cast<long long>(states.n_embd));
    std::printf("| layer | distinct points | TwoNN | TwoNN on 1/4 | PCA 90%% | PCA 99%% | participation ratio |\n");
    std::printf("|-------|----------------:|------:|-------------:|--------:|--------:|--------------------:|\n");
  }
  for (size_t l = 0; l < dims.size(); ++l) {
    const eval::IntrinsicDimension& d = dims[l];
    if (json) {
      nlohmann::ordered_json j;
      j["analysis"] = "intrinsic_dim";
      j["layer"] = static_cast<int64_t>(l);
      j["final"] = static_cast<int64_t>(l) == states.n_layer;
      j["n_embd"] = states.n_embd;
      j["tokens"] = states.n_tokens;
      j["distinct_points"] = d.points;
      j["two_nn"] = d.two_nn;
      j["two_nn_quarter"] = d.two_nn_quarter;
      j["pca_90"] = d.pca_90;
      j["pca_99"] = d.pca_99;
      j["participation_ratio"] = d.participation_ratio;
      std::printf("%s\n", dump_json(j).c_str());
    } else {
      std::printf("| %-5s | %15lld | %5.1f | %12.1f | %7lld | %7lld | %19.1f |\n",
                  layer_label(static_cast<int64_t>(l), states.n_layer).c_str(), static_cast<long long>(d.points), d.two_nn,
                  d.two_nn_quarter, static_cast<long long>(d.pca_90),
                  static_cast<long long>(d.pca_99), d.participation_ratio);
    }
  }
  std::fflush(stdout);
}

constexpr eval::Predictor kPredictorList[] = {eval::Predictor::Skip, eval::Predictor::Linear,
                                                  eval::Predictor::Nearest, eval::Predictor::NearestDelta,
                                                  eval::Predictor::NearestJacobi, eval::Predictor::NearestLocalJacobi};

// The share of one block's compute a query saves on average when every query pays the lookup and
// J, and a hit of nearest+J skips the block (a miss runs it as well).
double net_saving(const eval::Transition& t, const eval::GtcReport& r, double block_flops) {
  return t.score(eval::Predictor::NearestJacobi).hit_rate - (r.lookup_flops + r.jacobi_flops) / block_flops;
}

nlohmann::ordered_json transition_json(const char* analysis, const eval::Transition& t, bool logits) {
  nlohmann::ordered_json j;
  j["analysis"] = analysis;
  j["from"] = t.from;
  j["to"] = t.to;
  j["coverage"] = t.coverage;
  j["mean_anchor_distance"] = t.mean_anchor_distance;
  nlohmann::ordered_json predictors;
  for (const eval::Predictor p : kPredictorList) {
    const eval::PredictionScore& sc = t.score(p);
    nlohmann::ordered_json e;
    e["hit_rate"] = sc.hit_rate;
    e["mean_relative_error"] = sc.mean_relative_error;
    e["median_relative_error"] = sc.median_relative_error;
    if (logits) {
      e["top1"] = sc.top1;
      e["kl"] = sc.kl;
    }
    predictors[std::string(eval::predictor_name(p))] = e;
  }
  j["predictors"] = predictors;
  return j;
}

void print_gtc(const eval::GtcReport& r, double block_flops, bool json) {
  if (json) {
    nlohmann::ordered_json j;
    j["analysis"] = "gtc";
    j["stored"] = r.stored;
    j["queries"] = r.queries;
    j["tolerance"] = r.tolerance;
    j["n_layer"] = r.n_layer;
    j["n_embd"] = r.n_embd;
    j["block_flops"] = block_flops;
    j["lookup_flops"] = r.lookup_flops;
    j["jacobi_flops"] = r.jacobi_flops;
    j["logits_measured"] = !r.logits.empty();
    std::printf("%s\n", dump_json(j).c_str());
    for (const eval::Transition& t : r.steps) {
      nlohmann::ordered_json out = transition_json("gtc_step", t, t.to == r.n_layer && !r.logits.empty());
      out["net_saving"] = net_saving(t, r, block_flops);
      std::printf("%s\n", dump_json(out).c_str());
    }
    for (const eval::Transition& t : r.logits) {
      nlohmann::ordered_json out = transition_json("gtc_logits", t, true);
      out["blocks_skipped"] = r.n_layer - t.from;
      std::printf("%s\n", dump_json(out).c_str());
    }
    std::fflush(stdout);
    return;
  }
  std::printf("\n## GTC: %lld stored trajectories (first tokens), %lld queries (the rest); hit = relative error < %g\n\n",
              static_cast<long long>(r.stored), static_cast<long long>(r.queries), r.tolerance);
  std::printf("Next block: h(N+1) predicted from h(N). Hit rate (mean relative error) per predictor; coverage = queries\n"
              "whose nearest stored h(N) lies within the tolerance; net saving = nearest+J hit rate minus the lookup\n"
              "and J (%.3g flops) over the block (%.3g flops).\n\n",
              r.lookup_flops + r.jacobi_flops, block_flops);
  std::printf("| block | coverage | skip            | linear          | nearest         | nearest+delta   | nearest+J       | nearest+localJ  | net saving |\n");
  std::printf("|-------|---------:|-----------------|-----------------|-----------------|-----------------|-----------------|-----------------|-----------:|\n");
  for (const eval::Transition& t : r.steps) {
    std::printf("| %5lld | %7.1f%% |", static_cast<long long>(t.from), 100 * t.coverage);
    for (const eval::Predictor p : kPredictorList) {
      std::printf(" %5.1f%% (%6.3f) |", 100 * t.score(p).hit_rate, t.score(p).mean_relative_error);
    }
    std::printf(" %9.1f%% |\n", 100 * net_saving(t, r, block_flops));
  }
  if (r.logits.empty()) {
    std::fflush(stdout);
    return;
  }
  std::printf("\nLogits from h(N), blocks N..%lld skipped: top-1 agreement with the model (mean KL in nats) per predictor;\n"
              "skip is the logit lens.\n\n",
              static_cast<long long>(r.n_layer - 1));
  std::printf("| from | skipped | skip            | linear          | nearest         | nearest+delta   | nearest+J       | nearest+localJ  |\n");
  std::printf("|------|--------:|-----------------|-----------------|-----------------|-----------------|-----------------|-----------------|\n");
  for (const eval::Transition& t : r.logits) {
    std::printf("| %4lld | %7lld |", static_cast<long long>(t.from), static_cast<long long>(r.n_layer - t.from));
    for (const eval::Predictor p : kPredictorList) std::printf(" %5.1f%% (%6.3f) |", 100 * t.score(p).top1, t.score(p).kl);
    std::printf("\n");
  }
  std::fflush(stdout);
}

std::string intrinsic_dim_svg(const std::vector<eval::IntrinsicDimension>& dims, const std::string& model_name,
                              int64_t n_embd) {
  svg::Chart chart{fmt::format("{}: intrinsic dimension of the residual stream (width {})", model_name, n_embd),
                   "layer (residual entering the block; last = final)", "dimension", {}, false};
  const char* names[] = {"TwoNN", "TwoNN on every 4th point", "PCA 90% variance", "PCA 99% variance"};
  for (size_t k = 0; k < std::size(names); ++k) {
    svg::Series s;
    s.label = names[k];
    s.color = svg::ramp_color(k, std::size(names));
    s.markers = true;
    for (size_t l = 0; l < dims.size(); ++l) {
      const eval::IntrinsicDimension& d = dims[l];
      const double v = k == 0 ? d.two_nn : k == 1 ? d.two_nn_quarter : static_cast<double>(k == 2 ? d.pca_90 : d.pca_99);
      s.points.emplace_back(static_cast<double>(l), v);
    }
    chart.series.push_back(std::move(s));
  }
  return svg::line_chart(chart);
}

std::string gtc_svg(const std::vector<eval::Transition>& rows, const std::string& title, const std::string& y_label,
                    bool top1) {
  svg::Chart chart{title, "layer N", y_label, {}, false};
  for (size_t k = 0; k < std::size(kPredictorList); ++k) {
    svg::Series s;
    s.label = std::string(eval::predictor_name(kPredictorList[k]));
    s.color = svg::ramp_color(k, std::size(kPredictorList));
    for (const eval::Transition& t : rows) {
      const eval::PredictionScore& sc = t.score(kPredictorList[k]);
      s.points.emplace_back(static_cast<double>(t.from), 100 * (top1 ? sc.top1 : sc.hit_rate));
    }
    chart.series.push_back(std::move(s));
  }
  return svg::line_chart(chart);
}

void run_hidden_states(const AnalyzeArgs& args) {
  const std::string text = okapi::read_text_file(args.text);
  if (text.empty()) throw_error("analyze: the text file '{}' is empty", args.text);
  const auto start = std::chrono::steady_clock::now();
  const std::unique_ptr<model::Model> model = model::Model::load(gguf::open_model(args.model));
  eval::HiddenStateOptions options;
  options.max_tokens = args.tokens;
  options.n_ctx = args.n_ctx;
  options.threads = args.threads > 0 ? args.threads : default_threads();
  const eval::HiddenStates states = eval::capture_hidden_states(*model, text, options);
  std::fprintf(stderr, "analyze: hidden states of %lld tokens (context %lld) at %lld layers of width %lld in %.1f s\n",
               static_cast<long long>(states.n_tokens), static_cast<long long>(states.n_ctx),
               static_cast<long long>(states.n_layer + 1), static_cast<long long>(states.n_embd),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  const std::string model_name = fs::path(args.model).filename().string();

  if (args.intrinsic_dim) {
    std::vector<eval::IntrinsicDimension> dims;
    for (int64_t l = 0; l <= states.n_layer; ++l) dims.push_back(eval::intrinsic_dimension(states.layer(l), states.n_tokens, states.n_embd));
    print_intrinsic_dims(dims, states, args.json);
    if (!args.svg_dir.empty()) write_file(fs::path(args.svg_dir) / "intrinsic-dimension.svg", intrinsic_dim_svg(dims, model_name, states.n_embd));
  }
  if (args.gtc) {
    // The head is checked against the engine's own logits; an architecture that ends in more
    // than a norm and a matrix gets no logits rather than wrong ones.
    std::unique_ptr<eval::OutputHead> head;
    try {
      head = std::make_unique<eval::OutputHead>(*model);
    } catch (const Error& e) {
      std::fprintf(stderr, "analyze: GTC logits not measured: %s\n", e.what());
    }
    if (head && !states.last_row_logits.empty()) {
      std::vector<float> mine(static_cast<size_t>(head->n_vocab()));
      head->logits(states.row(states.n_layer, states.n_tokens - 1), mine.data());
      double scale = 0, worst = 0;
      for (size_t v = 0; v < mine.size(); ++v) {
        scale = std::max(scale, static_cast<double>(std::fabs(states.last_row_logits[v])));
        worst = std::max(worst, static_cast<double>(std::fabs(mine[v] - states.last_row_logits[v])));
      }
      if (!(worst <= 1e-3 * std::max(1.0, scale))) {
        std::fprintf(stderr, "analyze: GTC logits not measured: norm and output matrix give logits %.3g away from the %s forward pass\n",
                     worst, model->hparams().arch.c_str());
        head.reset();
      }
    }
    const eval::GtcReport report = eval::measure_trajectory_cache(states, head.get(), args.gtc_options);
    const double block_flops = eval::block_flops_per_token(model->hparams(), states.n_ctx / 2);
    print_gtc(report, block_flops, args.json);
    if (!args.svg_dir.empty()) {
      write_file(fs::path(args.svg_dir) / "gtc-hit-rate.svg",
                 gtc_svg(report.steps, fmt::format("{}: GTC, next block predicted within {:g} (hit rate)", model_name, report.tolerance),
                         "hit rate %", false));
      write_file(fs::path(args.svg_dir) / "gtc-logits.svg",
                 gtc_svg(report.logits, fmt::format("{}: GTC, logits predicted from layer N (top-1 agreement)", model_name),
                         "top-1 agreement %", true));
    }
  }
}

int run(const AnalyzeArgs& args) {
  check_flag_combinations(args);
  require_input_file(args.model, "--model");
  if (!args.text.empty()) require_input_file(args.text, "text file");
  const gguf::File file = gguf::open_model(args.model);
  std::vector<NamedPath> svgs;
  if (!args.svg_dir.empty()) {
    OutputPlan plan;
    plan.inputs = {{args.model, "--model"}};
    if (!args.text.empty()) plan.inputs.push_back({args.text, "-f"});
    plan.directories = {{args.svg_dir, "--svg"}};
    plan.outputs = svgs = planned_svgs(file, args);
    check_output_plan(plan);
    fs::create_directories(args.svg_dir);
  }
  if (args.run_spectra()) run_spectra(file, args);
  if (args.hidden_states()) run_hidden_states(args);
  if (!args.svg_dir.empty()) std::fprintf(stderr, "analyze: wrote %zu plots to %s\n", svgs.size(), args.svg_dir.c_str());
  return 0;
}

}  // namespace

void register_analyze(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<AnalyzeArgs>();
  auto* cmd = app.add_subcommand("analyze",
                                 "geometry of a model: singular-value spectra of its weights; intrinsic dimension and "
                                 "trajectory-cache (GTC) predictability of its hidden states over a text");
  cmd->add_option("-m,--model", args->model, "GGUF model")->required()->check(non_empty());
  cmd->add_flag("--spectra", args->spectra,
                "singular values and effective rank of every 2-D weight matrix (the default when no other analysis is asked)");
  cmd->add_option("--filter", args->filter, "--spectra: only the matrices whose tensor name contains TEXT (e.g. attn_q, blk.0.)");
  cmd->add_flag("--intrinsic-dim", args->intrinsic_dim,
                "intrinsic dimension of the residual stream per layer over -f TEXT (TwoNN, PCA 90%/99%)");
  cmd->add_flag("--gtc", args->gtc,
                "trajectory cache: how often the nearest stored token's next hidden state / logits, linearly corrected, "
                "predict a new token's within --gtc-tolerance");
  cmd->add_option("-f,--file", args->text, "text the model runs over for --intrinsic-dim and --gtc")->check(non_empty());
  cmd->add_option("--tokens", args->tokens, "tokens of the text whose hidden states are kept")
      ->capture_default_str()
      ->check(in_range(64, 65536));
  add_ctx_flag(cmd, args->n_ctx, "tokens per chunk the text runs in (0: the model's trained context; default 256)");
  add_threads_flag(cmd, args->threads);
  cmd->add_option("--gtc-tolerance", args->gtc_options.tolerance, "relative error ||pred - true|| / ||true|| of a GTC hit")
      ->capture_default_str()
      ->check(in_range(1e-9, 10));
  cmd->add_option("--gtc-stored", args->gtc_options.stored_fraction,
                  "share of the tokens (the first, in text order) stored as trajectories; the rest are queries")
      ->capture_default_str()
      ->check(in_range(0.01, 0.99));
  cmd->add_option("--gtc-neighbours", args->gtc_options.local_neighbours,
                  "stored neighbours of the anchor that nearest+localJ's linear map is fitted on")
      ->capture_default_str()
      ->check(in_range(1, 65536));
  cmd->add_option("--svg", args->svg_dir,
                  "write plots into DIR: spectra-KIND.svg, effective-rank.svg; intrinsic-dimension.svg; gtc-hit-rate.svg, "
                  "gtc-logits.svg")
      ->check(non_empty());
  cmd->add_flag("--json", args->json, "one JSON object per line: per matrix, per layer, per GTC transition");
  cmd->callback([args, cmd, &result] {
    for (const char* flag : {"--tokens", "--ctx-size", "--threads"}) {
      if (cmd->count(flag) > 0) args->state_flags_given.emplace_back(flag);
    }
    args->gtc_flags_given =
        cmd->count("--gtc-tolerance") > 0 || cmd->count("--gtc-stored") > 0 || cmd->count("--gtc-neighbours") > 0;
    if (result.dry_run) return;
    result.exit_code = run(*args);
  });
}

}  // namespace okapi::cli
