// libFuzzer target for the hyper-parameter loader: input bytes -> GGUF -> HParams::from_gguf and
// Model::load (every hyper-parameter and tensor check of every architecture) -> memory estimates,
// without allocating a model or a KV cache. Anything but okapi::Error from the loaders, a crash, a
// sanitizer report or a broken promise below aborts:
//  - an accepted file's hyper-parameters agree with its tensors: n_vocab and n_embd are
//    token_embd's shape, the block count is the number of blk.N groups and at most the tensor
//    count, the attention and FFN widths are those of blk.0's tensors;
//  - estimates are finite and non-negative for any context (1 .. 2^62), batch and cache type;
//  - for a model that loads, a one-token run's estimate is bounded by the file's size: metadata
//    alone cannot claim memory that the tensors do not hold.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "model/hparams.hpp"
#include "model/memory_estimate.hpp"
#include "model/model.hpp"

namespace {

using okapi::gguf::File;
using okapi::model::HParams;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "hparams_fuzz: %s\n", what.c_str());
  std::abort();
}

// Width a x b must be dimension `dim` of `name` when that tensor exists.
void expect_dim(const File& file, const char* name, size_t dim, int64_t a, int64_t b = 1) {
  int64_t value = 0;
  if (__builtin_mul_overflow(a, b, &value)) fail("accepted attention widths overflow");
  const okapi::gguf::TensorInfo* t = file.find_tensor(name);
  if (t && (t->shape.size() <= dim || t->shape[dim] != value))
    fail(std::string("accepted hyper-parameters disagree with ") + name);
}

void check_agreement(const File& file, const HParams& hp) {
  const okapi::gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (!embd || embd->shape.size() != 2 || embd->shape[0] != hp.n_embd || embd->shape[1] != hp.n_vocab)
    fail("n_embd / n_vocab are not token_embd's shape");
  if (hp.n_layer <= 0 || hp.n_layer > static_cast<int64_t>(file.tensors().size()))
    fail("block count not bounded by the tensors");
  const std::string last = "blk." + std::to_string(hp.n_layer - 1) + ".";
  bool last_exists = false;
  for (const auto& t : file.tensors()) last_exists |= t.name.rfind(last, 0) == 0;
  if (!last_exists) fail("block count beyond the last blk.N group");
  expect_dim(file, "blk.0.attn_q.weight", 1, hp.n_head, hp.head_dim_k);
  expect_dim(file, "blk.0.attn_k.weight", 1, hp.n_head_kv, hp.head_dim_k);
  expect_dim(file, "blk.0.attn_v.weight", 1, hp.n_head_kv, hp.head_dim_v);
  expect_dim(file, "blk.0.attn_output.weight", 0, hp.n_head, hp.head_dim_v);
  if (hp.n_ff > 0) expect_dim(file, "blk.0.ffn_down.weight", 0, hp.n_ff);
}

// Estimates over contexts, batches and cache kinds; returns the one-token f32 and exact totals.
double check_estimates(const File& file, const HParams& hp) {
  okapi::model::RunShape run;
  double one_token = 0;
  for (const int64_t n_ctx : {int64_t{1}, hp.n_ctx_train, int64_t{1} << 31, int64_t{1} << 62}) {
    if (n_ctx <= 0) continue;
    for (const bool exact : {false, true}) {
      run.n_ctx = n_ctx;
      run.batch = n_ctx == 1 ? 1 : 512;
      run.logit_rows = n_ctx == 1 ? 1 : n_ctx;
      run.exact = exact;
      run.exact_scores = exact && n_ctx > 1 ? okapi::kv::ExactScores::Ntt : okapi::kv::ExactScores::Direct;
      run.cache = {okapi::kv::CacheType::f32(), n_ctx == 1 ? okapi::kv::CacheType::f32() : okapi::kv::CacheType::f16()};
      const okapi::model::MemoryEstimate m = okapi::model::estimate_memory(file, hp, run);
      for (const double part : {m.mapped, m.weights, m.kv, m.scratch})
        if (!std::isfinite(part) || part < 0) fail("estimate not finite and non-negative");
      if (n_ctx == 1) one_token = std::max(one_token, m.total());
    }
  }
  return one_token;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<File> file;
  try {
    file = File::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  } catch (const okapi::Error&) {
    return 0;
  }
  try {
    // Any architecture name: the generic checks alone.
    const HParams hp = HParams::from_gguf(*file);
    check_agreement(*file, hp);
    (void)check_estimates(*file, hp);
  } catch (const okapi::Error&) {
  }
  try {
    const std::unique_ptr<okapi::model::Model> model = okapi::model::Model::load(*file);
    check_agreement(model->file(), model->hparams());
    const double one_token = check_estimates(model->file(), model->hparams());
    // Every width is a dimension of a tensor whose data is in the file (at least ~1.5 bits per
    // element), and each estimated byte is a small multiple of such a width.
    if (one_token > 256.0 * static_cast<double>(size) + 1048576.0) fail("one-token estimate not bounded by the file");
  } catch (const okapi::Error&) {
  }
  return 0;
}
