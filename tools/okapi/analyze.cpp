// okapi analyze -m MODEL [--spectra] [--filter TEXT] [--svg DIR] [--json]
// The geometry of a model's weights: per 2-D weight matrix its singular-value spectrum, effective
// rank, stable rank and the ranks keeping 90% / 99% of the energy (compress/spectra.hpp). A
// markdown table, or with --json one object per matrix and line (with every singular value);
// --svg DIR writes spectra-KIND.svg per matrix kind and effective-rank.svg.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "common_flags.hpp"
#include "compress/spectra.hpp"
#include "core/atomic_file.hpp"
#include "core/input_file.hpp"
#include "core/json_output.hpp"
#include "core/output_paths.hpp"
#include "format/model_file.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

namespace fs = std::filesystem;

struct AnalyzeArgs {
  std::string model;
  bool spectra = false;  // the only analysis so far, run whether or not it is asked for
  std::string filter;
  std::string svg_dir;
  bool json = false;
};

void write_file(const fs::path& path, const std::string& text) {
  AtomicFileWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

// The SVG files --svg writes for the matrices of `file` that pass `filter`, by kind.
std::vector<NamedPath> planned_svgs(const gguf::File& file, const AnalyzeArgs& args) {
  std::vector<NamedPath> out;
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

int run(const AnalyzeArgs& args) {
  require_input_file(args.model, "--model");
  const gguf::File file = gguf::open_model(args.model);
  std::vector<NamedPath> svgs;
  if (!args.svg_dir.empty()) {
    OutputPlan plan;
    plan.inputs = {{args.model, "--model"}};
    plan.directories = {{args.svg_dir, "--svg"}};
    plan.outputs = svgs = planned_svgs(file, args);
    check_output_plan(plan);
  }
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
    fs::create_directories(args.svg_dir);
    const std::string model_name = fs::path(args.model).filename().string();
    for (const auto& [kind, svg] : compress::spectra_svgs(spectra, model_name)) {
      write_file(fs::path(args.svg_dir) / fmt::format("spectra-{}.svg", kind), svg);
    }
    write_file(fs::path(args.svg_dir) / "effective-rank.svg", compress::effective_rank_svg(spectra, model_name));
    std::fprintf(stderr, "analyze: wrote %zu plots to %s\n", svgs.size(), args.svg_dir.c_str());
  }
  return 0;
}

}  // namespace

void register_analyze(CLI::App& app, VerbResult& result) {
  auto args = std::make_shared<AnalyzeArgs>();
  auto* cmd = app.add_subcommand("analyze", "geometry of a model's weights: singular-value spectra and effective ranks");
  cmd->add_option("-m,--model", args->model, "GGUF model")->required()->check(non_empty());
  cmd->add_flag("--spectra", args->spectra, "singular values and effective rank of every 2-D weight matrix (default)");
  cmd->add_option("--filter", args->filter, "only the matrices whose tensor name contains TEXT (e.g. attn_q, blk.0.)");
  cmd->add_option("--svg", args->svg_dir, "write plots into DIR: spectra-KIND.svg per matrix kind, effective-rank.svg")
      ->check(non_empty());
  cmd->add_flag("--json", args->json, "one JSON object per matrix and line, with every singular value");
  cmd->callback([args, &result] {
    if (result.dry_run) return;
    result.exit_code = run(*args);
  });
}

}  // namespace okapi::cli
