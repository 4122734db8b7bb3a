#include "kernels/weight_packs.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/format_table.hpp"

namespace okapi::kernels {
namespace {

struct Free {
  void operator()(uint8_t* p) const { std::free(p); }
};

// 64-byte aligned bytes (whole cache lines for the kernels' loads).
struct AlignedBytes {
  std::unique_ptr<uint8_t, Free> data;
  size_t size = 0;

  void reserve(size_t n) {
    if (n <= size) return;
    const size_t rounded = (n + 63) / 64 * 64;
    data.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
    if (!data) throw std::bad_alloc();
    size = rounded;
  }
};

struct Pack {
  detail::PackKey key;
  AlignedBytes bytes;
};

// Every registered range, and the lock that guards them and their packs.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<WeightPacks::Impl*>& registry() {
  static std::vector<WeightPacks::Impl*> r;
  return r;
}

const quant::RowGroupKernels& kernels_of(const detail::PackKey& key) {
  return quant::format(key.type, key.tier).row_groups;
}

size_t packed_size(const detail::PackKey& key) {
  const quant::RowGroupKernels& k = kernels_of(key);
  const int64_t groups = (key.n_out + k.rows - 1) / k.rows;
  return static_cast<size_t>(groups) * k.group_bytes(key.n_in);
}

// Packs every row group of `key` into `out`, a slice of about kSliceBytes of the original at a
// time (its groups split over the pool), calling done(first byte, bytes) of the original after
// each slice: the caller can drop those pages before the next slice is packed.
constexpr size_t kSliceBytes = size_t{1} << 20;

template <typename Done>
void pack_into(const detail::PackKey& key, size_t w_row, uint8_t* out, ThreadPool* pool, Done done) {
  const quant::RowGroupKernels& k = kernels_of(key);
  const int64_t groups = (key.n_out + k.rows - 1) / k.rows;
  const size_t group_bytes = k.group_bytes(key.n_in);
  const auto* w = static_cast<const uint8_t*>(key.w);
  const int64_t per_slice = std::max<int64_t>(1, static_cast<int64_t>(kSliceBytes / (static_cast<size_t>(k.rows) * w_row)));
  for (int64_t g0 = 0; g0 < groups; g0 += per_slice) {
    const int64_t g1 = std::min(groups, g0 + per_slice);
    const auto body = [&](int64_t begin, int64_t end, int) {
      for (int64_t g = g0 + begin; g < g0 + end; ++g) {
        k.pack(w + static_cast<size_t>(g * k.rows) * w_row, w_row, std::min(k.rows, key.n_out - g * k.rows), key.n_in,
               out + static_cast<size_t>(g) * group_bytes);
      }
    };
    if (pool != nullptr && g1 - g0 > 1) {
      pool->parallel_for(g1 - g0, body);
    } else {
      body(0, g1 - g0, 0);
    }
    const int64_t row_end = std::min(key.n_out, g1 * k.rows);
    done(w + static_cast<size_t>(g0 * k.rows) * w_row, static_cast<size_t>(row_end - g0 * k.rows) * w_row);
  }
}

}  // namespace

struct WeightPacks::Impl {
  const uint8_t* begin = nullptr;
  const uint8_t* end = nullptr;
  bool release_originals = false;
  std::vector<Pack> packs;

  bool holds(const void* p, size_t bytes) const {
    const auto* b = static_cast<const uint8_t*>(p);
    return b >= begin && b <= end && bytes <= static_cast<size_t>(end - b);
  }

  // Drops the pages that lie entirely inside [p, p + bytes) (see the header).
  void release(const void* p, size_t bytes) const {
    if (!release_originals) return;
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto b = reinterpret_cast<uintptr_t>(p);
    const uintptr_t first = (b + page - 1) / page * page, last = (b + bytes) / page * page;
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);  // a hint
  }
};

WeightPacks::WeightPacks(std::span<const uint8_t> bytes, bool release_originals) : impl_(std::make_unique<Impl>()) {
  impl_->begin = bytes.data();
  impl_->end = bytes.data() + bytes.size();
  impl_->release_originals = release_originals;
  if (release_originals) {
    // No huge-page mappings of the file: a 2 MiB mapping comes back whole (khugepaged collapses a
    // region around any page still mapped, a norm weight between two packed tensors say), which
    // would undo the page-sized drops. (A hint: on failure only memory is lost, never data.)
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto b = reinterpret_cast<uintptr_t>(bytes.data()) / page * page;
    madvise(reinterpret_cast<void*>(b), reinterpret_cast<uintptr_t>(impl_->end) - b, MADV_NOHUGEPAGE);
  }
  const std::lock_guard lock(registry_mutex());
  registry().push_back(impl_.get());
}

WeightPacks::~WeightPacks() {
  const std::lock_guard lock(registry_mutex());
  auto& r = registry();
  r.erase(std::remove(r.begin(), r.end(), impl_.get()), r.end());
}

size_t WeightPacks::packed_bytes() const {
  const std::lock_guard lock(registry_mutex());
  size_t total = 0;
  for (const Pack& p : impl_->packs) total += p.bytes.size;
  return total;
}

size_t WeightPacks::packed_tensors() const {
  const std::lock_guard lock(registry_mutex());
  return impl_->packs.size();
}

namespace detail {

const uint8_t* registered_packed_weight(const PackKey& key, size_t w_row, ThreadPool* pool) {
  const size_t original_bytes = static_cast<size_t>(key.n_out) * w_row;
  const std::lock_guard lock(registry_mutex());
  for (WeightPacks::Impl* impl : registry()) {
    if (!impl->holds(key.w, original_bytes)) continue;
    for (const Pack& p : impl->packs) {
      if (p.key == key) return p.bytes.data.get();
    }
    Pack pack{key, {}};
    pack.bytes.reserve(packed_size(key));
    // Pages of the original are dropped slice by slice as they are packed (then once more for
    // the whole range, for the pages two slices shared): about one copy stays resident.
    pack_into(key, w_row, pack.bytes.data.get(), pool, [&](const uint8_t* p, size_t n) { impl->release(p, n); });
    impl->release(key.w, original_bytes);
    impl->packs.push_back(std::move(pack));
    return impl->packs.back().bytes.data.get();
  }
  return nullptr;
}

const uint8_t* packed_weight(const PackKey& key, size_t w_row, ThreadPool* pool) {
  if (const uint8_t* packed = registered_packed_weight(key, w_row, pool)) return packed;
  thread_local AlignedBytes scratch;
  scratch.reserve(packed_size(key));
  pack_into(key, w_row, scratch.data.get(), pool, [](const uint8_t*, size_t) {});
  return scratch.data.get();
}

}  // namespace detail

}  // namespace okapi::kernels
