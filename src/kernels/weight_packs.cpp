#include "kernels/weight_packs.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "kernels/format_table.hpp"

namespace okapi::kernels {
namespace {

uint8_t* aligned_bytes(size_t n) {
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, n));
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

size_t rounded_to_cache_lines(size_t n) { return (n + 63) / 64 * 64; }

size_t packed_size(const quant::RowGroupKernels& k, int64_t n_in, int64_t n_out) {
  const int64_t groups = (n_out + k.rows - 1) / k.rows;
  return static_cast<size_t>(groups) * k.group_bytes(n_in);
}

// Packs every row group of w into `out`, a slice of about kSliceBytes of the original at a time
// (its groups split over the pool), calling done(first byte, bytes) of the original after each
// slice: the caller can drop those pages before the next slice is packed.
constexpr size_t kSliceBytes = size_t{1} << 20;

template <typename Done>
void pack_into(const quant::RowGroupKernels& k, const void* w, int64_t n_in, int64_t n_out, size_t w_row, uint8_t* out,
               ThreadPool* pool, Done done) {
  const int64_t groups = (n_out + k.rows - 1) / k.rows;
  const size_t group_bytes = k.group_bytes(n_in);
  const auto* bytes = static_cast<const uint8_t*>(w);
  const int64_t per_slice = std::max<int64_t>(1, static_cast<int64_t>(kSliceBytes / (static_cast<size_t>(k.rows) * w_row)));
  for (int64_t g0 = 0; g0 < groups; g0 += per_slice) {
    const int64_t g1 = std::min(groups, g0 + per_slice);
    const auto body = [&](int64_t begin, int64_t end, int) {
      for (int64_t g = g0 + begin; g < g0 + end; ++g) {
        k.pack(bytes + static_cast<size_t>(g * k.rows) * w_row, w_row, std::min(k.rows, n_out - g * k.rows), n_in,
               out + static_cast<size_t>(g) * group_bytes);
      }
    };
    if (pool != nullptr && g1 - g0 > 1) {
      pool->parallel_for(g1 - g0, body);
    } else {
      body(0, g1 - g0, 0);
    }
    const int64_t row_end = std::min(n_out, g1 * k.rows);
    done(bytes + static_cast<size_t>(g0 * k.rows) * w_row, static_cast<size_t>(row_end - g0 * k.rows) * w_row);
  }
}

// Drops the pages that lie entirely inside [p, p + bytes) (see the header).
void release_pages(const void* p, size_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto b = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (b + page - 1) / page * page, last = (b + bytes) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);  // a hint
}

size_t checked_row_bytes(DType type, int64_t n_in) {
  const auto row = row_bytes(type, n_in);
  if (!row) throw_error("n_in {} is not a multiple of {}'s block size {}", n_in, dtype_name(type), layout(type).block_size);
  return *row;
}

}  // namespace

PackedWeight pack_weight(Isa tier, DType type, const void* w, int64_t n_in, int64_t n_out, ThreadPool* pool,
                         bool release_original) {
  const quant::RowGroupKernels& k = quant::format(type, tier).row_groups;
  PackedWeight packed;
  if (k.rows == 0 || n_out <= 0 || quant::format(type, tier).vec_dot == nullptr) return packed;
  const size_t w_row = checked_row_bytes(type, n_in);
  packed.original_ = w;
  packed.tier_ = tier;
  packed.type_ = type;
  packed.n_in_ = n_in;
  packed.n_out_ = n_out;
  packed.bytes_ = rounded_to_cache_lines(packed_size(k, n_in, n_out));
  packed.groups_.reset(aligned_bytes(packed.bytes_));
  if (!release_original) {
    pack_into(k, w, n_in, n_out, w_row, packed.groups_.get(), pool, [](const void*, size_t) {});
    return packed;
  }
  // Pages of the original are dropped slice by slice as they are packed (then once more for the
  // whole range, for the pages two slices shared): about one copy stays resident.
  pack_into(k, w, n_in, n_out, w_row, packed.groups_.get(), pool, release_pages);
  release_pages(w, static_cast<size_t>(n_out) * w_row);
  return packed;
}

void avoid_huge_pages(std::span<const uint8_t> bytes) {
  // A 2 MiB mapping comes back whole (khugepaged collapses a region around any page still mapped,
  // a norm weight between two packed tensors say), which would undo the page-sized drops.
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto b = reinterpret_cast<uintptr_t>(bytes.data()) / page * page;
  madvise(reinterpret_cast<void*>(b), reinterpret_cast<uintptr_t>(bytes.data() + bytes.size()) - b, MADV_NOHUGEPAGE);
}

namespace detail {

const uint8_t* packed_groups(const PackedWeight* packed, Isa tier, DType type, const void* w, int64_t n_in,
                             int64_t n_out, size_t w_row, ThreadPool* pool) {
  if (packed != nullptr && packed->holds(tier, type, w, n_in, n_out)) return packed->groups();
  struct Scratch {
    std::unique_ptr<uint8_t, void (*)(void*)> data{nullptr, std::free};
    size_t size = 0;
  };
  thread_local Scratch scratch;
  const quant::RowGroupKernels& k = quant::format(type, tier).row_groups;
  const size_t need = rounded_to_cache_lines(packed_size(k, n_in, n_out));
  if (scratch.size < need) {
    scratch.data.reset(aligned_bytes(need));
    scratch.size = need;
  }
  pack_into(k, w, n_in, n_out, w_row, scratch.data.get(), pool, [](const void*, size_t) {});
  return scratch.data.get();
}

}  // namespace detail

}  // namespace okapi::kernels
