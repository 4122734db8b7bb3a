// Sliding-window layers keep a ring of cells (kv/kv_store.hpp): on a tiny gemma2 (even layers
// local, window 8) a store whose local layers keep 256 cells gives the bits of a store that keeps
// every cell, over a prompt far longer than the ring (it wraps), incremental decode and rolled-back
// drafts, in every KV cache type; it allocates less; a rollback past what the ring holds is refused
// (kept_prefix says so); a batch longer than the ring takes runs in chunks; the exact store keeps
// every cell.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu_ops.hpp"
#include "backend/exact_ops.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "kv/cache_type.hpp"
#include "model/memory_estimate.hpp"
#include "model/model.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"

namespace okapi::test {
namespace {

constexpr int64_t kWindow = 8, kBatch = 8, kCtx = 600, kPrompt = 330;

const std::filesystem::path& ring_model() {
  static const std::filesystem::path path = [] {
    synth::Preset p = tiny_preset("gemma2-2b");
    p.head_dim = 128;  // every cache type's blocks divide it
    p.sliding_window = kWindow;
    p.attn_softcap = 2.0f;
    p.final_softcap = 3.0f;
    return write_synth_model(p, "", "F32", 2, make_temp_dir("ring-kv") / "gemma2.gguf");
  }();
  return path;
}

std::vector<int32_t> tokens_of(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 11) % 500);
  return t;
}

// The prompt in batches of 5, then decode steps; every third step runs a draft of 4 tokens and
// rolls 3 of them back. Returns every logit row computed, in order.
std::vector<float> script(const model::Model& m, model::Ops& ops, kv::KvStore& kv) {
  const int64_t n_vocab = m.n_vocab();
  const std::vector<int32_t> tokens = tokens_of(kPrompt + 200);
  std::vector<float> out, rows;
  const auto run = [&](int64_t p0, int64_t n) {
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(p0 + i);
    rows.resize(static_cast<size_t>(n * n_vocab));
    m.forward(ops, kv, std::span<const int32_t>(tokens).subspan(static_cast<size_t>(p0), static_cast<size_t>(n)), pos,
              model::LogitRows::All, rows.data());
    out.insert(out.end(), rows.begin(), rows.end());
  };
  int64_t p = 0;
  for (; p + 5 <= kPrompt; p += 5) run(p, 5);
  for (int step = 0; step < 60; ++step) {
    if (step % 3 == 2) {
      run(p, 4);
      kv.truncate(p + 1);
      p += 1;
    } else {
      run(p, 1);
      p += 1;
    }
  }
  return out;
}

kv::KvShape full_shape(const model::Model& m) {
  kv::KvShape s = m.kv_shape(kCtx, kBatch);
  s.window.clear();
  return s;
}

TEST(RingKv, RingStoreGivesTheBitsOfTheFullStoreInEveryCacheType) {
  const auto m = model::Model::load(gguf::File::open(ring_model()));
  ThreadPool pool(2);
  backend::CpuOps ops(&pool);
  ops.prepare(m->weights());
  const kv::KvShape ring_shape = m->kv_shape(kCtx, kBatch);
  ASSERT_EQ(ring_shape.cells(0), 256);  // local: 8 - 1 + 8 rounded up to kRingAlign
  ASSERT_EQ(ring_shape.cells(1), kCtx);  // global
  std::vector<kv::CacheTypes> types;
  for (const kv::CacheType t : kv::CacheType::all()) types.push_back({t, t, kv::KvRotation::None});
  types.push_back({kv::CacheType::parse("q8_0"), kv::CacheType::parse("q4_0"), kv::KvRotation::Hadamard});
  for (const kv::CacheTypes& t : types) {
    SCOPED_TRACE(t.name());
    const auto full = ops.make_kv(full_shape(*m), {t});
    const auto ring = ops.make_kv(ring_shape, {t});
    EXPECT_LT(ring->bytes(), full->bytes());
    EXPECT_NEAR(static_cast<double>(ring->bytes()), t.bytes(ring_shape), 1.0);
    EXPECT_EQ(script(*m, ops, *ring), script(*m, ops, *full));
  }
}

TEST(RingKv, RollbackPastTheRingIsRefusedAndLongBatchesRunInChunks) {
  const auto m = model::Model::load(gguf::File::open(ring_model()));
  backend::CpuOps ops;
  ops.prepare(m->weights());
  const auto ring = ops.make_kv(m->kv_shape(kCtx, kBatch), {});
  const auto full = ops.make_kv(full_shape(*m), {});
  EXPECT_EQ(ring->max_batch(), 256 - kWindow + 1);
  const std::vector<int32_t> tokens = tokens_of(kPrompt);
  std::vector<int32_t> pos(tokens.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  std::vector<float> a(tokens.size() * static_cast<size_t>(m->n_vocab())), b(a.size());
  m->forward(ops, *ring, tokens, pos, model::LogitRows::All, a.data());  // 330 > 249: two chunks
  m->forward(ops, *full, tokens, pos, model::LogitRows::All, b.data());
  EXPECT_EQ(a, b);
  m->forward(ops, *ring, tokens, pos, model::LogitRows::Last, a.data());
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + m->n_vocab(), b.end() - m->n_vocab()));

  EXPECT_EQ(ring->kept_prefix(kPrompt - 4), kPrompt - 4);  // the last batch's rollback
  EXPECT_EQ(ring->kept_prefix(100), 100);  // the ring holds positions 74..329
  EXPECT_EQ(ring->kept_prefix(50), 0);    // a reused prefix the ring has overwritten
  EXPECT_EQ(full->kept_prefix(100), 100);
  EXPECT_THROW(ring->truncate(50), Error);
  ring->truncate(0);  // a new prompt from the start always works
}

TEST(RingKv, MemoryEstimateCountsTheRings) {
  const auto m = model::Model::load(gguf::File::open(ring_model()));
  model::RunShape run;
  run.n_ctx = 32768;
  run.batch = 512;
  const model::MemoryEstimate full = model::estimate_memory(m->file(), m->hparams(), run);
  run.layer_windows.assign(m->layer_windows().begin(), m->layer_windows().end());
  const model::MemoryEstimate ring = model::estimate_memory(m->file(), m->hparams(), run);
  // One global layer of 32768 cells and one local layer of 768 (8 - 1 + 512 rounded up).
  EXPECT_DOUBLE_EQ(ring.kv, full.kv * (32768.0 + 768.0) / (2 * 32768.0));
}

TEST(RingKv, TheExactStoreKeepsEveryCell) {
  const auto m = model::Model::load(gguf::File::open(ring_model()));
  backend::ExactOps ops;
  ops.prepare(m->weights());
  const auto kv = ops.make_kv(m->kv_shape(kCtx, kBatch), {});
  EXPECT_EQ(kv->shape().cells(0), kCtx);
  const std::vector<int32_t> tokens = tokens_of(20);
  std::vector<int32_t> pos(tokens.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  std::vector<float> logits(static_cast<size_t>(m->n_vocab()));
  m->forward(ops, *kv, tokens, pos, model::LogitRows::Last, logits.data());
  EXPECT_EQ(kv->kept_prefix(3), 3);
}

}  // namespace
}  // namespace okapi::test
