// The attention tile kernels of the dense stores: every tier against the scalar reference, a
// query's results independent of the other queries of the call (bit-identical), and the stores'
// tile methods against KvStore's defaults (the per-head methods).
#include "kv/tile_kernels.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/cpu.hpp"
#include "core/half.hpp"
#include "kv/kv_store.hpp"
#include "support/cache_types.hpp"

namespace okapi::kv {
namespace {

const tile::Kernels& tier_kernels(Isa tier) {
  switch (tier) {
    case Isa::avx512: return tile::avx512_kernels();
    case Isa::avx2: return tile::avx2_kernels();
    default: return tile::scalar_kernels();
  }
}

struct Fixture {
  int64_t dim, cells = 300, stride;
  std::vector<float> k32, v32, q;
  std::vector<uint16_t> k16, v16;
  std::vector<const float*> qrows;
  std::vector<int64_t> begin, end;
  Fixture(int64_t d, int n_q) : dim(d), stride(d + 8) {
    std::mt19937 rng(static_cast<uint32_t>(d * 31 + n_q));
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::uniform_int_distribution<int64_t> cell(0, cells);
    for (int64_t i = 0; i < cells * stride; ++i) {
      k32.push_back(fp16_to_fp32(fp32_to_fp16(g(rng))));  // representable in fp16: same K in both stores
      v32.push_back(fp16_to_fp32(fp32_to_fp16(g(rng))));
      k16.push_back(fp32_to_fp16(k32.back()));
      v16.push_back(fp32_to_fp16(v32.back()));
    }
    q.resize(static_cast<size_t>(n_q * dim));
    for (float& x : q) x = g(rng);
    for (int r = 0; r < n_q; ++r) {
      qrows.push_back(q.data() + r * dim);
      int64_t a = cell(rng), b = cell(rng);
      if (a > b) std::swap(a, b);
      if (r == 0) a = 0, b = cells;  // one query sees everything
      if (r == 1) a = b = 0;        // one sees nothing
      begin.push_back(a);
      end.push_back(b);
    }
  }
  tile::Queries all() const { return {qrows.data(), static_cast<int>(qrows.size()), begin.data(), end.data()}; }
  tile::Queries only(int r) const { return {&qrows[static_cast<size_t>(r)], 1, &begin[static_cast<size_t>(r)], &end[static_cast<size_t>(r)]}; }
  template <typename Elem>
  tile::Rows<Elem> rows(const std::vector<Elem>& data) const { return {data.data(), stride, dim}; }
};

template <typename Elem>
void run(const tile::Kernels& k, const Fixture& f, const tile::Queries& qs, const std::vector<Elem>& keys,
         const std::vector<Elem>& values, std::vector<float>* scores, std::vector<float>* acc) {
  scores->assign(static_cast<size_t>(qs.n * f.cells), 0.0f);
  acc->assign(static_cast<size_t>(qs.n * f.dim), 0.0f);
  if constexpr (sizeof(Elem) == 4) {
    k.scores_f32(qs, f.rows(keys), 0, scores->data(), f.cells);
    for (float& s : *scores) s = std::tanh(s * 0.1f);  // a bounded weight per cell
    k.accumulate_f32(qs, f.rows(values), 0, scores->data(), f.cells, acc->data());
  } else {
    k.scores_f16(qs, f.rows(keys), 0, scores->data(), f.cells);
    for (float& s : *scores) s = std::tanh(s * 0.1f);
    k.accumulate_f16(qs, f.rows(values), 0, scores->data(), f.cells, acc->data());
  }
}

template <typename Elem>
void check_tiers(const Fixture& f, const std::vector<Elem>& keys, const std::vector<Elem>& values) {
  std::vector<float> ref_scores, ref_acc;
  run(tile::scalar_kernels(), f, f.all(), keys, values, &ref_scores, &ref_acc);
  for (Isa tier : available_isas()) {
    SCOPED_TRACE(std::string(isa_name(tier)) + " dim " + std::to_string(f.dim));
    std::vector<float> scores, acc;
    run(tier_kernels(tier), f, f.all(), keys, values, &scores, &acc);
    for (size_t i = 0; i < scores.size(); ++i) ASSERT_NEAR(scores[i], ref_scores[i], 1e-5f) << i;
    for (size_t i = 0; i < acc.size(); ++i) ASSERT_NEAR(acc[i], ref_acc[i], 1e-3f * (1.0f + std::fabs(ref_acc[i]))) << i;
    // Each query alone gives the bits it got among the others.
    for (int r = 0; r < f.all().n; ++r) {
      std::vector<float> s1, a1;
      run(tier_kernels(tier), f, f.only(r), keys, values, &s1, &a1);
      for (int64_t j = 0; j < f.cells; ++j) ASSERT_EQ(s1[static_cast<size_t>(j)], scores[static_cast<size_t>(r * f.cells + j)]);
      for (int64_t d = 0; d < f.dim; ++d) ASSERT_EQ(a1[static_cast<size_t>(d)], acc[static_cast<size_t>(r * f.dim + d)]);
    }
  }
}

TEST(TileKernels, EveryTierMatchesScalarAndIsIndependentOfTheOtherQueries) {
  for (int64_t dim : {64, 72, 5, 128, 200}) {  // 200: the AVX-512 value pass in two chunks
    const Fixture f(dim, 6);
    check_tiers(f, f.k32, f.v32);
    check_tiers(f, f.k16, f.v16);
  }
}

// A decoder that reads the fixture's f32 rows, as a compressed store's decoder would produce them.
struct CopyRows {
  const Fixture* f;
  const std::vector<float>* data;
  static void decode(const void* ctx, int64_t j0, int64_t n, float* out, int64_t stride) {
    const auto* c = static_cast<const CopyRows*>(ctx);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = c->data->data() + (j0 + i) * c->f->stride;
      std::copy(row, row + c->f->dim, out + i * stride);
    }
  }
};

TEST(TileKernels, DecodedRowsGiveTheBitsOfTheDenseKernels) {
  for (int64_t dim : {64, 72, 5, 128, 200}) {
    const Fixture f(dim, 6);
    const CopyRows keys{&f, &f.k32}, values{&f, &f.v32};
    for (Isa tier : available_isas()) {
      SCOPED_TRACE(std::string(isa_name(tier)) + " dim " + std::to_string(f.dim));
      const tile::Kernels& k = tier_kernels(tier);
      std::vector<float> want_scores, want_acc;
      run(k, f, f.all(), f.k32, f.v32, &want_scores, &want_acc);
      std::vector<float> scores(want_scores.size(), 0.0f), acc(want_acc.size(), 0.0f);
      k.scores_decoded(f.all(), {CopyRows::decode, &keys, f.dim}, 0, scores.data(), f.cells);
      for (float& x : scores) x = std::tanh(x * 0.1f);
      k.accumulate_decoded(f.all(), {CopyRows::decode, &values, f.dim}, 0, scores.data(), f.cells, acc.data());
      for (size_t i = 0; i < scores.size(); ++i) ASSERT_EQ(scores[i], want_scores[i]) << i;
      for (size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(acc[i], want_acc[i]) << i;
    }
  }
}

// Forwards only the per-head methods, so the tile methods are KvStore's defaults.
class PerHeadOnly final : public KvStore {
 public:
  explicit PerHeadOnly(const KvStore& inner) : KvStore(inner.shape()), inner_(inner) {}
  std::string_view type_name() const override { return "per-head"; }
  void append(int64_t, int64_t, const float*, const float*) override {}
  void scores(int64_t layer, int64_t head, const float* q, int64_t first, int64_t last, float* out) const override {
    inner_.scores(layer, head, q, first, last, out);
  }
  void accumulate_values(int64_t layer, int64_t head, const float* probs, int64_t first, int64_t last,
                         float* out) const override {
    inner_.accumulate_values(layer, head, probs, first, last, out);
  }

 private:
  const KvStore& inner_;
};

TEST(TileKernels, StoreTileMethodsMatchThePerHeadDefaults) {
  for (const char* type : {"f32", "f16"}) {
    SCOPED_TRACE(type);
    const KvShape shape{2, 2, 64, 64, 400};
    auto store = make_store(shape, test::cache_types(type, type), isa());
    std::mt19937 rng(7);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> k(128), v(128);
    for (int64_t layer = 0; layer < 2; ++layer)
      for (int64_t pos = 0; pos < 400; ++pos) {
        for (float& x : k) x = g(rng);
        for (float& x : v) x = g(rng);
        store->append(layer, pos, k.data(), v.data());
      }
    const PerHeadOnly defaults(*store);
    std::vector<float> q(3 * 64);
    for (float& x : q) x = g(rng);
    const float* rows[3] = {q.data(), q.data() + 64, q.data() + 128};
    const int64_t begin[3] = {256, 300, 256}, end[3] = {400, 301, 256};
    const tile::Queries qs{rows, 3, begin, end};
    std::vector<float> s_fast(3 * 256, 0.0f), s_ref(3 * 256, 0.0f);
    store->tile_scores(1, 1, qs, 256, s_fast.data(), 256);
    defaults.tile_scores(1, 1, qs, 256, s_ref.data(), 256);
    for (size_t i = 0; i < s_fast.size(); ++i) ASSERT_NEAR(s_fast[i], s_ref[i], 1e-4f) << i;
    std::vector<float> probs(3 * 256);
    for (size_t i = 0; i < probs.size(); ++i) probs[i] = 1.0f / (1.0f + static_cast<float>(i % 37));
    std::vector<float> a_fast(3 * 64, 0.5f), a_ref(3 * 64, 0.5f);
    store->tile_accumulate(1, 1, qs, 256, probs.data(), 256, a_fast.data());
    defaults.tile_accumulate(1, 1, qs, 256, probs.data(), 256, a_ref.data());
    for (size_t i = 0; i < a_fast.size(); ++i) ASSERT_NEAR(a_fast[i], a_ref[i], 1e-4f * (1.0f + std::fabs(a_ref[i]))) << i;
    EXPECT_EQ(a_fast[2 * 64], 0.5f);  // the query that sees no cell keeps its accumulator
  }
}

}  // namespace
}  // namespace okapi::kv
