// Seed 003's online basis (lab/online_basis.hpp): Oja's rule turns a basis toward the
// dominant direction of its samples and keeps it orthonormal; a sample orthogonal to the basis
// moves nothing (so the residual the basis drops cannot be the sample); the seed's gate and
// bounded queue; and, from a file made by `okapi compress`, replacements whose product is the
// stored factors' product, which the dense model then runs as the compressed one.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "compress/low_rank.hpp"
#include "core/error.hpp"
#include "format/gguf.hpp"
#include "kernels/format_table.hpp"
#include "lab/online_basis.hpp"
#include "model/model.hpp"
#include "support/paths.hpp"

namespace okapi::lab {
namespace {

namespace fs = std::filesystem;

double max_off_identity(const std::vector<float>& basis, int64_t rank, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < rank; ++i) {
    for (int64_t j = 0; j < rank; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < n; ++c) dot += double{basis[static_cast<size_t>(i * n + c)]} * basis[static_cast<size_t>(j * n + c)];
      worst = std::max(worst, std::abs(dot - (i == j ? 1.0 : 0.0)));
    }
  }
  return worst;
}

// |P u|: how much of the unit vector u the basis's span holds.
double captured(const std::vector<float>& basis, int64_t rank, int64_t n, const std::vector<double>& u) {
  double sum = 0;
  for (int64_t i = 0; i < rank; ++i) {
    double dot = 0;
    for (int64_t c = 0; c < n; ++c) dot += basis[static_cast<size_t>(i * n + c)] * u[static_cast<size_t>(c)];
    sum += dot * dot;
  }
  return std::sqrt(sum);
}

std::vector<float> unit_rows(int64_t rank, int64_t n) {  // e_0 .. e_{rank-1}
  std::vector<float> b(static_cast<size_t>(rank * n), 0.0f);
  for (int64_t i = 0; i < rank; ++i) b[static_cast<size_t>(i * n + i)] = 1.0f;
  return b;
}

TEST(OnlineBasis, OjaTurnsTheBasisToTheDominantDirection) {
  constexpr int64_t n = 16, rank = 2;
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  std::vector<double> u(n);
  double norm = 0;
  for (auto& v : u) {
    v = normal(rng);
    norm += v * v;
  }
  for (auto& v : u) v /= std::sqrt(norm);
  std::vector<float> basis = unit_rows(rank, n);
  const double before = captured(basis, rank, n, u);
  for (int t = 1; t <= 3000; ++t) {
    const double a = 3.0 * normal(rng);
    std::vector<float> x(n);
    for (int64_t c = 0; c < n; ++c) x[static_cast<size_t>(c)] = static_cast<float>(a * u[static_cast<size_t>(c)] + 0.1 * normal(rng));
    oja_step(basis, rank, n, x, 0.05 / std::sqrt(t));
  }
  EXPECT_LT(before, 0.9);
  EXPECT_GT(captured(basis, rank, n, u), 0.99);
  EXPECT_LT(max_off_identity(basis, rank, n), 1e-5);
}

TEST(OnlineBasis, ASampleOrthogonalToTheBasisMovesNothing) {
  constexpr int64_t n = 8, rank = 3;
  std::vector<float> basis = unit_rows(rank, n);
  const std::vector<float> before = basis;
  std::vector<float> x(n, 0.0f);
  x[5] = 7.0f;  // outside span(e0, e1, e2): every xᵀv is 0
  oja_step(basis, rank, n, x, 0.5);
  EXPECT_EQ(basis, before);
  x[1] = 1.0f;  // now it has a component inside
  oja_step(basis, rank, n, x, 0.5);
  EXPECT_NE(basis, before);
  EXPECT_LT(max_off_identity(basis, rank, n), 1e-6);
}

TEST(OnlineBasis, OrthonormalizeReplacesDependentRows) {
  constexpr int64_t n = 4, rank = 3;
  std::vector<float> rows = {2, 0, 0, 0,  //
                             4, 0, 0, 0,  // a multiple of the first: replaced
                             1, 3, 0, 0};
  orthonormalize_rows(rows, rank, n);
  EXPECT_LT(max_off_identity(rows, rank, n), 1e-6);
  EXPECT_FLOAT_EQ(rows[0], 1.0f);
  EXPECT_THROW(orthonormalize_rows(rows, 5, n), Error);
}

OnlineBasisUnit small_unit() {
  OnlineBasisUnit u;
  u.weights = {"w"};
  u.n_in = 6;
  u.rank = 2;
  u.basis = unit_rows(2, 6);
  u.dense = {std::vector<float>(3 * 6)};
  for (size_t i = 0; i < u.dense[0].size(); ++i) u.dense[0][i] = static_cast<float>(i % 5) - 2.0f;
  return u;
}

TEST(OnlineBasis, GateQueueAndRecomputedFactors) {
  OnlineBasisOptions options;
  options.min_rejections = 4;
  options.queue_capacity = 5;
  OnlineBasis ob({small_unit()}, options);
  std::vector<float> x = {1, 1, 1, 0, 0, 0};
  for (int i = 0; i < 3; ++i) ob.queue_rejection({x});
  EXPECT_EQ(ob.apply_pending(), 0u);  // below the gate
  EXPECT_EQ(ob.units()[0].version, 0u);
  for (int i = 0; i < 3; ++i) ob.queue_rejection({x});  // 6 into a queue of 5
  EXPECT_EQ(ob.stats().dropped, 1u);
  EXPECT_EQ(ob.apply_pending(), 5u);
  EXPECT_EQ(ob.units()[0].version, 1u);
  EXPECT_EQ(ob.units()[0].samples, 5u);
  EXPECT_EQ(ob.apply_pending(), 0u);  // the queue is empty again
  // The replacement is (W·Vᵀ, V) for the moved basis.
  const OnlineBasisUnit& unit = ob.units()[0];
  const compress::ObservingOps::Replacement& r = ob.replacements().at("w");
  EXPECT_EQ(r.in, unit.basis);
  for (int64_t o = 0; o < 3; ++o) {
    for (int64_t k = 0; k < 2; ++k) {
      double want = 0;
      for (int64_t c = 0; c < 6; ++c) want += double{unit.dense[0][static_cast<size_t>(o * 6 + c)]} * unit.basis[static_cast<size_t>(k * 6 + c)];
      EXPECT_NEAR(r.out[static_cast<size_t>(o * 2 + k)], want, 1e-5);
    }
  }
  EXPECT_THROW(ob.queue_rejection({}), Error);
  EXPECT_THROW(ob.queue_rejection({std::vector<float>(5)}), Error);
  EXPECT_THROW(OnlineBasis({}, options), Error);
}

std::vector<float> tensor_values(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo& t = f.tensor(name);
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  quant::dequantize_tensor(t.type, t.bytes(), t.shape, v.data());
  return v;
}

// For svd (metric I) the replacement (W·Vᵀ)·V is the file's out·in, for every factored weight,
// shared bases (grc) included.
TEST(OnlineBasis, FromACompressedFileReplacesEachWeightByTheStoredProduct) {
  const fs::path dir = fs::temp_directory_path() / ("okapi-online-basis-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path original = test::repo_dir() / "models/stories260K.gguf";
  const auto dense_file = gguf::File::open(original);
  const auto dense = model::Model::load(gguf::File::open(original));
  for (const std::string method : {"svd", "grc"}) {
    SCOPED_TRACE(method);
    compress::CompressOptions options;
    options.method = method;
    options.ratio = 0.1;
    compress::compress_model(dense_file, dir / (method + ".gguf"), options);
    const auto compressed = gguf::File::open(dir / (method + ".gguf"));
    const OnlineBasis ob(compressed, *dense);
    size_t factored = 0;
    for (const auto& t : compressed.tensors()) factored += t.name.ends_with(".lr_out.weight");
    ASSERT_GT(factored, 0u);
    EXPECT_EQ(ob.replacements().size(), factored);
    if (method == "grc") {
      EXPECT_LT(ob.units().size(), factored);  // Q/K/V share a basis
    }
    for (const auto& [name, r] : ob.replacements()) {
      const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
      const std::vector<float> out = tensor_values(compressed, prefix + ".lr_out.weight");
      const gguf::TensorInfo& w = dense_file.tensor(name);
      const int64_t n_in = w.shape[0], n_out = w.shape[1], rank = static_cast<int64_t>(out.size()) / n_out;
      std::string in_name = prefix + ".lr_in.weight";
      if (const gguf::Value* shared = compressed.find("okapi.lr_in." + prefix); shared) in_name = shared->as_string();
      const std::vector<float> in = tensor_values(compressed, in_name);
      ASSERT_EQ(r.rank, rank) << name;
      double worst = 0, scale = 0;
      for (int64_t o = 0; o < n_out; ++o) {
        for (int64_t c = 0; c < n_in; ++c) {
          double stored = 0, replaced = 0;
          for (int64_t k = 0; k < rank; ++k) {
            stored += double{out[static_cast<size_t>(o * rank + k)]} * in[static_cast<size_t>(k * n_in + c)];
            replaced += double{r.out[static_cast<size_t>(o * rank + k)]} * r.in[static_cast<size_t>(k * n_in + c)];
          }
          worst = std::max(worst, std::abs(stored - replaced));
          scale = std::max(scale, std::abs(stored));
        }
      }
      EXPECT_LT(worst, 1e-4 * scale) << name;
    }
  }
  // A file without factors.
  EXPECT_THROW(OnlineBasis(dense_file, *dense), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::lab
