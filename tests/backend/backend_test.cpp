// The backend seam (model/ops.hpp) on a quantized model (okapi synth's stories15M shapes, Q8_0,
// 2 layers): prepare() makes the repacked copies at load, and a prepared backend (grouped Q/K/V and
// gate/up mat-muls over them) gives the same bits as an unprepared one (per-weight mat-muls,
// packed per call), in a batch and token by token; make_kv makes each backend's own stores; and
// once a decode step has run, later decode steps allocate nothing outside attention (the
// workspace and the kernels' buffers are reused).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "alloc/allocation_counter.hpp"
#include "backend/cpu_ops.hpp"
#include "backend/exact_ops.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "kernels/format_table.hpp"
#include "model/model.hpp"
#include "support/cache_types.hpp"
#include "support/paths.hpp"
#include "synth/synth.hpp"

namespace okapi::test {
namespace {

const std::filesystem::path& quantized_model() {
  static const std::filesystem::path path = [] {
    const auto file = make_temp_dir("backend") / "stories15M-q8_0.gguf";
    synth::SynthOptions options;
    options.preset = "stories15M";
    options.type = "Q8_0";
    options.layers = 2;
    options.vocab = 512;
    synth::write_synth(options, file);
    return file;
  }();
  return path;
}

kv::KvShape kv_shape(const model::HParams& hp, int64_t n_ctx) {
  return {hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, n_ctx};
}

const std::vector<int32_t> kTokens = {1, 17, 300, 42, 99, 7, 250, 3, 128, 64, 5, 411};

// Logits of every token: the first `batch` as one batch, the rest token by token.
std::vector<float> logits(const model::Model& m, model::Ops& ops, int64_t batch) {
  const auto kv = ops.make_kv(kv_shape(m.hparams(), 32), {});
  const int64_t n_vocab = m.n_vocab();
  std::vector<float> out(kTokens.size() * static_cast<size_t>(n_vocab));
  std::vector<int32_t> positions(kTokens.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  const std::span<const int32_t> tokens(kTokens), pos(positions);
  m.forward(ops, *kv, tokens.first(static_cast<size_t>(batch)), pos.first(static_cast<size_t>(batch)),
            model::LogitRows::All, out.data());
  for (size_t t = static_cast<size_t>(batch); t < kTokens.size(); ++t)
    m.forward(ops, *kv, tokens.subspan(t, 1), pos.subspan(t, 1), model::LogitRows::All,
              out.data() + t * static_cast<size_t>(n_vocab));
  return out;
}

TEST(Backend, PreparedWeightsGiveTheSameBitsAsUnprepared) {
  const auto m = model::Model::load(gguf::File::open(quantized_model()));
  ThreadPool pool(2);
  backend::CpuOps unprepared(&pool);
  const std::vector<float> expected = logits(*m, unprepared, 8);
  backend::CpuOps prepared(&pool);
  prepared.prepare(m->weights());
  if (quant::format(DType::Q8_0).row_groups.rows > 0) {
    size_t original = 0;
    for (const model::Weight& w : m->weights().matmul) original += static_cast<size_t>(*row_bytes(w.type, w.n_in) * w.n_out);
    EXPECT_GE(prepared.prepared_bytes(), original);  // every weight repacked at load, none left for later
  } else {
    EXPECT_EQ(prepared.prepared_bytes(), 0u);  // this tier has no row-group kernels for Q8_0
  }
  EXPECT_EQ(logits(*m, prepared, 8), expected);
  EXPECT_EQ(logits(*m, prepared, 1), expected);  // token by token: a batched token equals it alone
  EXPECT_EQ(logits(*m, prepared, static_cast<int64_t>(kTokens.size())), expected);
}

TEST(Backend, EachBackendMakesItsOwnKvStores) {
  const auto m = model::Model::load(gguf::File::open(quantized_model()));
  const kv::KvShape shape = kv_shape(m->hparams(), 8);
  backend::CpuOps cpu;
  EXPECT_EQ(cpu.make_kv(shape, {test::cache_types("f16", "f32"), kv::ExactScores::Direct})->type_name(), "k f16 / v f32");
  EXPECT_EQ(cpu.make_kv(shape, {})->type_name(), "k f32 / v f32");
  EXPECT_THROW((void)kv::CacheType::parse("q4_k"), Error);  // an unknown type is refused where its name comes in
  backend::ExactOps exact;
  EXPECT_EQ(exact.make_kv(shape, {test::cache_types("f16", "f16"), kv::ExactScores::Ntt})->type_name(), "exact-ntt");
  EXPECT_EQ(exact.make_kv(shape, {})->type_name(), "exact-direct");
}

// CpuOps whose attention is left out of the count: its body belongs to the attention driver.
class CountingOutsideAttention : public backend::CpuOps {
 public:
  using CpuOps::CpuOps;
  void attention(const kv::KvStore& kv, const model::AttentionConfig& config, const float* q,
                 std::span<const int32_t> positions, float* out) override {
    const bool counting = g_counting.exchange(false);
    CpuOps::attention(kv, config, q, positions, out);
    g_counting = counting;
  }
};

TEST(Backend, DecodeAfterWarmUpAllocatesNothingOutsideAttention) {
  const auto m = model::Model::load(gguf::File::open(quantized_model()));
  for (const int threads : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    ThreadPool pool(threads);
    CountingOutsideAttention ops(&pool);
    ops.prepare(m->weights());
    const auto kv = ops.make_kv(kv_shape(m->hparams(), 32), {});
    std::vector<float> out(static_cast<size_t>(m->n_vocab()));
    const std::vector<int32_t> prompt = {1, 2, 3, 4};
    const std::vector<int32_t> prompt_positions = {0, 1, 2, 3};
    m->forward(ops, *kv, prompt, prompt_positions, model::LogitRows::Last, out.data());
    backend::CpuOps single_thread;  // a worker warms its scratch with the kernels on one thread
    single_thread.prepare(m->weights());
    for (int32_t pos = 4; pos < 12; ++pos) {
      const int32_t token = 5 + pos;
      if (pos == 5) {
        run_on_each_worker(pool, [&] {
          m->forward(single_thread, *kv, std::span<const int32_t>(&token, 1), std::span<const int32_t>(&pos, 1),
                     model::LogitRows::Last, out.data());
        });
      }
      g_allocations = 0;
      g_counting = pos >= 5;  // the first decode step (and the workers' pass above) is the warm-up
      m->forward(ops, *kv, std::span<const int32_t>(&token, 1), std::span<const int32_t>(&pos, 1),
                 model::LogitRows::Last, out.data());
      g_counting = false;
      EXPECT_EQ(g_allocations.load(), 0) << "decode at position " << pos;
    }
  }
}

}  // namespace
}  // namespace okapi::test
