// Weights repacked for the format table's row-group kernels (quant.hpp RowGroupKernels). A
// backend that prepares a set of weights (model::CpuOps::prepare: a model's mapped GGUF file)
// registers their bytes with a WeightPacks object it owns, for as long as they stay unchanged, and
// packs each weight at load (kernels::prepare_weight); a matmul with a weight inside a registered
// range uses its copy (packing it then if it was not prepared). Weights outside every registered range are packed on the fly, on
// each call, into a scratch buffer (tests, tools that build weights in memory).
//
// Memory: a packed copy is as large as the original (Q8_0, Q4_0, Q6_K; Q4_K +3%), padded to whole
// row groups. With `release_originals`, the registered bytes are a read-only private file
// mapping: the pages of a tensor that hold nothing but it are dropped from the process as it is
// packed, 1 MiB at a time (madvise MADV_DONTNEED; reading them again maps them back from the
// file), and the mapping gets no huge pages (MADV_NOHUGEPAGE: a 2 MiB mapping would come back
// whole), so the resident size stays about one copy of the weights (stories110M Q8_0 with
// `okapi run`: peak RSS +1 MiB over not repacking). A tensor that is also read in place keeps
// what it reads resident: a tied embedding (smollm2) is packed as the output head and read row by
// row by get_rows, whose page faults map 64 KiB around each row, so most of it comes back.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/cpu.hpp"
#include "core/dtype.hpp"

namespace okapi {
class ThreadPool;
}

namespace okapi::kernels {

class WeightPacks {
 public:
  WeightPacks(std::span<const uint8_t> bytes, bool release_originals);
  ~WeightPacks();
  WeightPacks(const WeightPacks&) = delete;
  WeightPacks& operator=(const WeightPacks&) = delete;

  size_t packed_bytes() const;  // memory held by the packed copies
  size_t packed_tensors() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

namespace detail {

// What identifies a packed copy: the weight and the kernels it was packed for.
struct PackKey {
  const void* w = nullptr;
  Isa tier = Isa::scalar;
  DType type = DType::F32;
  int64_t n_in = 0, n_out = 0;
  bool operator==(const PackKey&) const = default;
};

// The packed groups of the weight `key` (row bytes w_row in storage layout) for the row-group
// kernels of its tier's format table: the registered copy (packed now if it is the first call),
// or, for a weight outside every registered range, a copy packed into the calling thread's
// scratch buffer (valid until that thread's next call). `pool` (may be null) packs in parallel.
const uint8_t* packed_weight(const PackKey& key, size_t w_row, ThreadPool* pool);
// The registered copy only (packed now if it is the first call); null for a weight outside every
// registered range.
const uint8_t* registered_packed_weight(const PackKey& key, size_t w_row, ThreadPool* pool);

}  // namespace detail

}  // namespace okapi::kernels
