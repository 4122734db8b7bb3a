// Weights repacked for the format table's row-group kernels (quant.hpp RowGroupKernels). A
// backend packs each weight it prepares (backend::CpuOps::prepare: a model's matmul weights) into
// a PackedWeight it owns, and hands it to matmul with the weight; a weight without one (tests,
// tools that build weights in memory) is packed on the fly, on each call, into a scratch buffer.
//
// Memory: a packed copy is as large as the original (Q8_0, Q4_0, Q6_K; Q4_K +3%), padded to whole
// row groups. With `release_original`, the weight lies in a read-only private file mapping (made
// ready by avoid_huge_pages): the pages that hold nothing but it are dropped from the process as
// it is packed, 1 MiB at a time (madvise MADV_DONTNEED; reading them again maps them back from
// the file), and the mapping gets no huge pages (MADV_NOHUGEPAGE: a 2 MiB mapping would come back
// whole), so the resident size stays about one copy of the weights (stories110M Q8_0 with
// `okapi run`: peak RSS +1 MiB over not repacking). A tensor that is also read in place keeps
// what it reads resident: a tied embedding (smollm2) is packed as the output head and read row by
// row by get_rows, whose page faults map 64 KiB around each row, so most of it comes back.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include "core/cpu.hpp"
#include "core/dtype.hpp"

namespace okapi {
class ThreadPool;
}

namespace okapi::kernels {

// The packed row groups of one weight for the kernels of one tier. Empty (false) when nothing
// was packed: its format has no row-group kernels on that tier.
class PackedWeight {
 public:
  PackedWeight() = default;
  explicit operator bool() const { return groups_ != nullptr; }

  // True when this holds the weight `w` (its address, shape and format) packed for `tier`.
  bool holds(Isa tier, DType type, const void* w, int64_t n_in, int64_t n_out) const {
    return groups_ != nullptr && original_ == w && tier_ == tier && type_ == type && n_in_ == n_in && n_out_ == n_out;
  }
  const void* original() const { return original_; }
  const uint8_t* groups() const { return groups_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  friend PackedWeight pack_weight(Isa tier, DType type, const void* w, int64_t n_in, int64_t n_out, ThreadPool* pool,
                                  bool release_original);
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  const void* original_ = nullptr;
  Isa tier_ = Isa::scalar;
  DType type_ = DType::F32;
  int64_t n_in_ = 0, n_out_ = 0;
  std::unique_ptr<uint8_t, Free> groups_;  // 64-byte aligned
  size_t bytes_ = 0;
};

// Packs the weight `w` (n_out rows of n_in elements of `type`, as stored) for the row-group
// kernels of its format on `tier`; an empty PackedWeight when there are none. `pool` (may be null)
// packs in parallel. With `release_original`, the pages that hold nothing but `w` are dropped as
// it is packed (see above). Throws okapi::Error for a shape the format cannot hold.
PackedWeight pack_weight(Isa tier, DType type, const void* w, int64_t n_in, int64_t n_out, ThreadPool* pool,
                         bool release_original);

// Asks that the read-only file mapping `bytes` get no huge pages, before weights in it are packed
// with release_original (a hint: on failure only memory is lost, never data).
void avoid_huge_pages(std::span<const uint8_t> bytes);

namespace detail {

// The packed groups of the weight `w` (row bytes w_row in storage layout) for the row-group
// kernels of `type` on `tier`: those of `packed` when it holds that weight for that tier, else a
// copy packed into the calling thread's scratch buffer (valid until that thread's next call).
// `pool` (may be null) packs in parallel.
const uint8_t* packed_groups(const PackedWeight* packed, Isa tier, DType type, const void* w, int64_t n_in,
                             int64_t n_out, size_t w_row, ThreadPool* pool);

}  // namespace detail

}  // namespace okapi::kernels
