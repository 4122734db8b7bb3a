// Model::forward_sequences: several sequences in one forward pass. Each token's logits are the
// bits of running its sequence alone through forward() (memcmp), in a mixed batch (one sequence
// prefilling, others decoding at different positions, one with its two tokens apart, only some
// rows wanted), and the caches it leaves behind give the next step the same bits too. On
// stories260K (float with f32 / f16 / tbq4 caches, exact mode) and on tiny synthetic models of
// every architecture (float f32, exact). The attention drivers' several-store calls against one
// call per store at long context (split-K included). Plus the input errors, that a batch of
// several sequences grows the workspace no more than one sequence of as many tokens, and that a
// decode step of several sequences allocates nothing outside attention once warm.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "alloc/allocation_counter.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "kv/exact_store.hpp"
#include "kv/kv_store.hpp"
#include "backend/attention_driver.hpp"
#include "backend/cpu_ops.hpp"
#include "backend/exact_ops.hpp"
#include "model/model.hpp"
#include "support/paths.hpp"
#include "support/tiny_models.hpp"
#include "support/cache_types.hpp"

namespace okapi::test {
namespace {

constexpr int64_t kCtx = 32;

std::unique_ptr<model::Model> stories() {
  return model::Model::load(gguf::File::open(repo_dir() / "models/stories260K.gguf"));
}

kv::KvShape shape_of(const model::Model& m, int64_t n_ctx = kCtx) {
  const model::HParams& hp = m.hparams();
  return {hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, n_ctx};
}

// One sequence: the tokens already in its cache (prefilled with forward()), then the tokens it
// has in each of two batched steps.
struct Sequence {
  std::vector<int32_t> prefix;
  std::vector<int32_t> step1;  // in the mixed batch
  int32_t step2 = 0;           // one decode token in the following batch
};

int32_t token(const model::Model& m, int seed) { return static_cast<int32_t>((seed * 37 + 11) % m.n_vocab()); }

std::vector<int32_t> tokens(const model::Model& m, int seed, size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = token(m, seed + static_cast<int>(i));
  return t;
}

std::vector<float> forward(const model::Model& m, model::Ops& ops, kv::KvStore& kv, std::span<const int32_t> toks,
                           int32_t first_position, model::LogitRows rows = model::LogitRows::All) {
  std::vector<int32_t> positions(toks.size());
  std::iota(positions.begin(), positions.end(), first_position);
  const size_t n_rows = rows == model::LogitRows::All ? toks.size() : 1;
  std::vector<float> logits(n_rows * static_cast<size_t>(m.n_vocab()));
  m.forward(ops, kv, toks, positions, rows, logits.data());
  return logits;
}

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// The mixed batch, token order:
//   A0 A1 A2 A3 A4 (A prefills at 0..4; logits for A2 and A4)
//   B  (decode at 7, wanted)   C  (decode at 3, not wanted)   D D' (two tokens at 10, 11, both wanted)
//   C' (C's second token at 4, apart from C; wanted)
// then a second batch with one decode token per sequence, all wanted.
void check_mixed_batch(const model::Model& m, model::Ops& ops, const std::function<std::unique_ptr<kv::KvStore>()>& make_kv,
                       const std::string& label) {
  SCOPED_TRACE(label);
  const int64_t n_vocab = m.n_vocab();
  std::vector<Sequence> seqs = {
      {{}, tokens(m, 1, 5), token(m, 90)},
      {tokens(m, 20, 7), tokens(m, 30, 1), token(m, 91)},
      {tokens(m, 40, 3), tokens(m, 50, 2), token(m, 92)},
      {tokens(m, 60, 10), tokens(m, 70, 2), token(m, 93)},
  };
  // Reference: each sequence alone through forward(); batched: the same prefixes in other stores.
  std::vector<std::unique_ptr<kv::KvStore>> ref_kv, batch_kv;
  std::vector<std::vector<float>> ref_step1, ref_step2;
  for (const Sequence& s : seqs) {
    ref_kv.push_back(make_kv());
    batch_kv.push_back(make_kv());
    if (!s.prefix.empty()) {
      (void)forward(m, ops, *ref_kv.back(), s.prefix, 0, model::LogitRows::Last);
      (void)forward(m, ops, *batch_kv.back(), s.prefix, 0, model::LogitRows::Last);
    }
    const auto p = static_cast<int32_t>(s.prefix.size());
    ref_step1.push_back(forward(m, ops, *ref_kv.back(), s.step1, p));
    ref_step2.push_back(forward(m, ops, *ref_kv.back(), std::span<const int32_t>(&s.step2, 1),
                                p + static_cast<int32_t>(s.step1.size())));
  }

  // (sequence, index within its step1, wanted)
  struct Slot {
    size_t seq, i;
    bool wanted;
  };
  const std::vector<Slot> order = {{0, 0, false}, {0, 1, false}, {0, 2, true}, {0, 3, false}, {0, 4, true},
                                   {1, 0, true},  {2, 0, false}, {3, 0, true}, {3, 1, true},  {2, 1, true}};
  std::vector<kv::KvStore*> stores;
  std::vector<int32_t> toks, positions;
  std::vector<uint8_t> want;
  for (const Slot& slot : order) {
    const Sequence& s = seqs[slot.seq];
    stores.push_back(batch_kv[slot.seq].get());
    toks.push_back(s.step1[slot.i]);
    positions.push_back(static_cast<int32_t>(s.prefix.size() + slot.i));
    want.push_back(slot.wanted ? 1 : 0);
  }
  const int64_t n_wanted = std::accumulate(want.begin(), want.end(), int64_t{0});
  // One extra row of sentinels: nothing past n_wanted rows is written.
  std::vector<float> logits(static_cast<size_t>((n_wanted + 1) * n_vocab), -12345.0f);
  m.forward_sequences(ops, stores, toks, positions, want, logits.data());
  int64_t row = 0;
  for (size_t t = 0; t < order.size(); ++t) {
    if (!order[t].wanted) continue;
    const float* expected = ref_step1[order[t].seq].data() + static_cast<int64_t>(order[t].i) * n_vocab;
    EXPECT_TRUE(same_bits(logits.data() + row * n_vocab, expected, n_vocab))
        << "token index " << t << " (sequence " << order[t].seq << ", token " << order[t].i << ")";
    ++row;
  }
  for (int64_t i = n_wanted * n_vocab; i < (n_wanted + 1) * n_vocab; ++i)
    ASSERT_EQ(logits[static_cast<size_t>(i)], -12345.0f) << "written past the wanted rows";

  // Step 2: one token per sequence, in reverse order, on the caches the mixed batch left.
  stores.clear();
  toks.clear();
  positions.clear();
  for (size_t k = seqs.size(); k-- > 0;) {
    stores.push_back(batch_kv[k].get());
    toks.push_back(seqs[k].step2);
    positions.push_back(static_cast<int32_t>(seqs[k].prefix.size() + seqs[k].step1.size()));
  }
  want.assign(seqs.size(), 1);
  logits.assign(seqs.size() * static_cast<size_t>(n_vocab), 0.0f);
  m.forward_sequences(ops, stores, toks, positions, want, logits.data());
  for (size_t t = 0; t < seqs.size(); ++t) {
    const size_t k = seqs.size() - 1 - t;
    EXPECT_TRUE(same_bits(logits.data() + static_cast<int64_t>(t) * n_vocab, ref_step2[k].data(), n_vocab))
        << "step 2, sequence " << k;
  }
}

std::function<std::unique_ptr<kv::KvStore>()> float_kv(model::Ops& ops, const kv::KvShape& shape, const char* k,
                                                       const char* v) {
  return [&ops, shape, k, v] {
    model::KvTypes types;
    types.cache = test::cache_types(k, v);
    return ops.make_kv(shape, types);
  };
}

std::function<std::unique_ptr<kv::KvStore>()> exact_kv(model::Ops& ops, const kv::KvShape& shape,
                                                       kv::ExactScores scores) {
  return [&ops, shape, scores] {
    model::KvTypes types;
    types.exact_scores = scores;
    return ops.make_kv(shape, types);
  };
}

TEST(ForwardSequences, Stories260KFloatMatchesSeparateForwards) {
  const auto m = stories();
  ThreadPool pool(2);
  backend::CpuOps ops(&pool);
  ops.prepare(m->weights());
  for (const auto& [k, v] : std::vector<std::pair<const char*, const char*>>{{"f32", "f32"}, {"f16", "f16"}, {"tbq4", "tbq4"}})
    check_mixed_batch(*m, ops, float_kv(ops, shape_of(*m), k, v), std::string("cache ") + k + "/" + v);
}

TEST(ForwardSequences, Stories260KExactMatchesSeparateForwards) {
  const auto m = stories();
  ThreadPool pool(2);
  backend::ExactOps ops(&pool);
  ops.prepare(m->weights());
  check_mixed_batch(*m, ops, exact_kv(ops, shape_of(*m), kv::ExactScores::Direct), "exact direct");
  check_mixed_batch(*m, ops, exact_kv(ops, shape_of(*m), kv::ExactScores::Ntt), "exact ntt");
}

TEST(ForwardSequences, EveryArchitectureMatchesSeparateForwards) {
  ThreadPool pool(2);
  for (const std::string& arch : tiny_model_archs()) {
    const std::vector<uint8_t> bytes = tiny_model(arch);  // the File views these bytes
    const auto m = model::Model::load(gguf::File::parse(bytes, arch));
    {
      backend::CpuOps ops(&pool);
      ops.prepare(m->weights());
      check_mixed_batch(*m, ops, float_kv(ops, shape_of(*m), "f32", "f32"), arch + " float f32");
    }
    {
      backend::ExactOps ops(&pool);
      ops.prepare(m->weights());
      check_mixed_batch(*m, ops, exact_kv(ops, shape_of(*m), kv::ExactScores::Direct), arch + " exact");
    }
  }
}

TEST(ForwardSequences, AllTokensOfOneStoreMatchForward) {
  // One store for the whole batch, every row wanted: forward()'s own case.
  const auto m = stories();
  backend::CpuOps ops;
  auto a = kv::make_f32_store(shape_of(*m), isa());
  auto b = kv::make_f32_store(shape_of(*m), isa());
  const auto toks = tokens(*m, 3, 9);
  const std::vector<float> expected = forward(*m, ops, *a, toks, 0);
  std::vector<kv::KvStore*> stores(toks.size(), b.get());
  std::vector<int32_t> positions(toks.size());
  std::iota(positions.begin(), positions.end(), 0);
  const std::vector<uint8_t> want(toks.size(), 1);
  std::vector<float> logits(expected.size());
  m->forward_sequences(ops, stores, toks, positions, want, logits.data());
  EXPECT_TRUE(same_bits(logits.data(), expected.data(), static_cast<int64_t>(expected.size())));
}

TEST(ForwardSequences, NoLogitsWantedWritesNone) {
  const auto m = stories();
  backend::CpuOps ops;
  auto a = kv::make_f32_store(shape_of(*m), isa());
  auto b = kv::make_f32_store(shape_of(*m), isa());
  const std::vector<kv::KvStore*> stores = {a.get(), a.get(), b.get()};
  const std::vector<int32_t> toks = {5, 6, 7}, positions = {0, 1, 0};
  const std::vector<uint8_t> want = {0, 0, 0};
  EXPECT_NO_THROW(m->forward_sequences(ops, stores, toks, positions, want, nullptr));
}

TEST(ForwardSequences, BatchGrowsTheWorkspaceNoMoreThanOneSequence) {
  const auto m = stories();
  backend::CpuOps ops;
  constexpr size_t kSeqs = 8;
  std::vector<std::unique_ptr<kv::KvStore>> kvs;
  for (size_t i = 0; i < kSeqs + 1; ++i) kvs.push_back(kv::make_f32_store(shape_of(*m), isa()));
  // One sequence of kSeqs tokens, all rows wanted: the workspace forward() needs for that batch.
  (void)forward(*m, ops, *kvs[kSeqs], tokens(*m, 1, kSeqs), 0);
  const size_t after_forward = ops.workspace().bytes();
  std::vector<kv::KvStore*> stores;
  std::vector<int32_t> toks, positions;
  for (size_t i = 0; i < kSeqs; ++i) {
    stores.push_back(kvs[i].get());
    toks.push_back(token(*m, static_cast<int>(i)));
    positions.push_back(static_cast<int32_t>(i));
  }
  const std::vector<uint8_t> want(kSeqs, 1);
  std::vector<float> logits(kSeqs * static_cast<size_t>(m->n_vocab()));
  for (int step = 0; step < 3; ++step) {
    m->forward_sequences(ops, stores, toks, positions, want, logits.data());
    for (int32_t& p : positions) ++p;
  }
  EXPECT_EQ(ops.workspace().bytes(), after_forward);
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
  void attention_runs(std::span<const model::AttentionRun> runs, const model::AttentionConfig& config) override {
    const bool counting = g_counting.exchange(false);
    CpuOps::attention_runs(runs, config);
    g_counting = counting;
  }
};

TEST(ForwardSequences, DecodeOfSeveralSequencesAllocatesNothingOutsideAttention) {
  const auto m = stories();
  constexpr size_t kSeqs = 4;
  for (const int threads : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    ThreadPool pool(threads);
    CountingOutsideAttention ops(&pool);
    ops.prepare(m->weights());
    std::vector<std::unique_ptr<kv::KvStore>> kvs;
    std::vector<kv::KvStore*> stores;
    std::vector<int32_t> toks, positions;
    for (size_t i = 0; i < kSeqs; ++i) {
      kvs.push_back(ops.make_kv(shape_of(*m), {}));
      stores.push_back(kvs.back().get());
      (void)forward(*m, ops, *kvs.back(), tokens(*m, static_cast<int>(i), i + 1), 0, model::LogitRows::Last);
      toks.push_back(token(*m, static_cast<int>(10 + i)));
      positions.push_back(static_cast<int32_t>(i + 1));
    }
    std::vector<uint8_t> want(kSeqs, 1);
    want[1] = 0;
    std::vector<float> logits(kSeqs * static_cast<size_t>(m->n_vocab()));
    backend::CpuOps single_thread;  // a worker warms its scratch with the kernels on one thread
    single_thread.prepare(m->weights());
    for (int step = 0; step < 6; ++step) {
      if (step == 1) {
        run_on_each_worker(pool, [&] { m->forward_sequences(single_thread, stores, toks, positions, want, logits.data()); });
      }
      g_allocations = 0;
      g_counting = step >= 1;  // the first step (and the workers' pass above) is the warm-up
      m->forward_sequences(ops, stores, toks, positions, want, logits.data());
      g_counting = false;
      EXPECT_EQ(g_allocations.load(), 0) << "step " << step;
      for (int32_t& p : positions) ++p;
    }
  }
}

// Several stores with random K/V over 700 cells (three attention tiles), 2 kv heads of 64, 4 heads.
struct LongStores {
  static constexpr int64_t kLongCtx = 700;
  model::AttentionConfig c;
  std::vector<std::unique_ptr<kv::KvStore>> stores;
  LongStores(size_t n, bool exact, int64_t window, float softcap) {
    c.layer = 1;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.head_dim_k = c.head_dim_v = 64;
    c.scale = 0.125f;
    c.sliding_window = window;
    c.softcap = softcap;
    const kv::KvShape shape{2, 2, 64, 64, kLongCtx};
    std::mt19937 rng(7);
    std::normal_distribution<float> g(0.0f, 2.0f);
    std::vector<float> k(128), v(128);
    for (size_t i = 0; i < n; ++i) {
      stores.push_back(exact ? kv::make_exact_store(shape, kv::ExactScores::Direct, isa()) : kv::make_f32_store(shape, isa()));
      for (int64_t layer = 0; layer < 2; ++layer)
        for (int64_t pos = 0; pos < kLongCtx; ++pos) {
          for (float& x : k) x = g(rng);
          for (float& x : v) x = g(rng);
          stores.back()->append(layer, pos, k.data(), v.data());
        }
    }
  }
};

TEST(ForwardSequences, AttentionRunsMatchOneCallPerStore) {
  // Run i over store i: one token at the last cell, one mid-way, ten short prefill rows (two
  // blocks), one at a tile edge. With the first two alone, 2 threads take the split-K path.
  const std::vector<std::vector<int32_t>> positions = {
      {699}, {300}, {10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, {256}};
  for (const bool exact : {false, true}) {
    for (const auto& [window, softcap] : std::vector<std::pair<int64_t, float>>{{0, 0.0f}, {300, 0.0f}, {0, 30.0f}}) {
      const LongStores s(positions.size(), exact, window, softcap);
      std::mt19937 rng(11);
      std::normal_distribution<float> g(0.0f, 2.0f);
      std::vector<std::vector<float>> q(positions.size());
      for (size_t r = 0; r < positions.size(); ++r) {
        q[r].resize(positions[r].size() * 4 * 64);
        for (float& x : q[r]) x = g(rng);
      }
      for (const int threads : {1, 2}) {
        for (const size_t n_runs : {size_t{2}, positions.size()}) {
          SCOPED_TRACE(::testing::Message() << (exact ? "exact" : "f32") << " window " << window << " softcap "
                                            << softcap << " threads " << threads << " runs " << n_runs);
          ThreadPool pool(threads);
          std::vector<std::vector<float>> alone(n_runs), together(n_runs);
          std::vector<model::AttentionRun> runs;
          for (size_t r = 0; r < n_runs; ++r) {
            alone[r].resize(positions[r].size() * 4 * 64);
            together[r].resize(alone[r].size());
            if (exact)
              backend::exact_attention(*s.stores[r], s.c, q[r].data(), positions[r], alone[r].data(), isa(), &pool);
            else
              backend::tiled_attention(*s.stores[r], s.c, q[r].data(), positions[r], alone[r].data(), isa(), &pool);
            runs.push_back({s.stores[r].get(), q[r].data(), positions[r], together[r].data()});
          }
          if (exact)
            backend::exact_attention(runs, s.c, isa(), &pool);
          else
            backend::tiled_attention(runs, s.c, isa(), &pool);
          for (size_t r = 0; r < n_runs; ++r)
            EXPECT_TRUE(same_bits(alone[r].data(), together[r].data(), static_cast<int64_t>(alone[r].size())))
                << "run " << r;
        }
      }
    }
  }
}

// The message of the okapi::Error that `fn` throws (a test failure when it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an okapi::Error";
  return {};
}

TEST(ForwardSequences, InputErrors) {
  const auto m = stories();
  backend::CpuOps ops;
  const kv::KvShape shape = shape_of(*m);
  auto a = kv::make_f32_store(shape, isa());
  auto b = kv::make_f32_store(shape, isa());
  auto small = kv::make_f32_store(shape_of(*m, 4), isa());
  kv::KvShape wrong = shape;
  wrong.head_dim_k *= 2;
  auto misshapen = kv::make_f32_store(wrong, isa());
  std::vector<float> logits(4 * static_cast<size_t>(m->n_vocab()));
  using Stores = std::vector<kv::KvStore*>;
  using Ints = std::vector<int32_t>;
  using Flags = std::vector<uint8_t>;
  const auto run = [&](const Stores& s, const Ints& t, const Ints& p, const Flags& w, float* out) {
    return error_of([&] { m->forward_sequences(ops, s, t, p, w, out); });
  };
  const auto contains = [](const std::string& msg, const char* part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << msg << "' lacks '" << part << "'";
  };
  float* out = logits.data();
  contains(run({}, {}, {}, {}, out), "no tokens");
  contains(run({a.get(), b.get()}, {1, 2}, {0}, {1, 1}, out), "2 tokens but 1 positions, 2 stores and 2 logit flags");
  contains(run({a.get()}, {1, 2}, {0, 0}, {1, 1}, out), "2 tokens but 2 positions, 1 stores");
  contains(run({a.get(), b.get()}, {1, 2}, {0, 0}, {1}, out), "1 logit flags");
  contains(run({a.get(), nullptr}, {1, 2}, {0, 0}, {1, 1}, out), "token index 1 is null");
  contains(run({a.get(), misshapen.get()}, {1, 2}, {0, 0}, {1, 1}, out), "token index 1: KV store shape");
  contains(run({a.get(), small.get()}, {1, 2}, {0, 4}, {1, 1}, out), "position 4 (token index 1) does not fit");
  contains(run({a.get(), b.get()}, {1, 2}, {-1, 0}, {1, 1}, out), "position -1 (token index 0)");
  contains(run({a.get(), b.get()}, {1, static_cast<int32_t>(m->n_vocab())}, {0, 0}, {1, 1}, out),
           "token id 512 at index 1 is out of range");
  contains(run({a.get(), b.get(), a.get()}, {1, 2, 3}, {3, 0, 3}, {1, 1, 1}, out),
           "token index 2 at position 3 comes after token index 0 at position 3");
  contains(run({a.get(), a.get()}, {1, 2}, {5, 4}, {1, 1}, out), "increasing position order");
  contains(run({a.get(), b.get()}, {1, 2}, {0, 0}, {0, 1}, nullptr), "output buffer is null");
}

}  // namespace
}  // namespace okapi::test
