// What the exact stores will allocate, computed before they allocate it (the float stores' is
// CacheTypes::bytes), and the check that refuses a store the machine cannot hold (instead of
// std::bad_alloc or the OOM killer). The layouts are those of exact_store.cpp;
// tests/kv/store_bytes_test.cpp checks that they agree with KvStore::bytes() of real stores.
#include <bit>
#include <cstdint>

#include "core/error.hpp"
#include "core/system_memory.hpp"
#include "kv/exact_store.hpp"
#include "kv/kv_store.hpp"

namespace okapi::kv {

namespace {

// Rows (layer, cell, kv head) of a store, as a double: see CacheTypes::bytes().
double row_count(const KvShape& s) {
  return static_cast<double>(s.n_layer) * static_cast<double>(s.n_ctx) * static_cast<double>(s.n_head_kv);
}

// exact_store.cpp: int16 rows padded to a multiple of 16; NTT keys as N = bit_ceil(head_dim) (at
// least 2) uint64 residues; one float scale per row for K and for V.
double padded16(int64_t n) { return static_cast<double>((n + 15) / 16 * 16); }
double ntt_size(int64_t head_dim) {
  if (head_dim <= 2) return 2.0;
  if (head_dim > (int64_t{1} << 62)) return static_cast<double>(head_dim) * 2.0;
  return static_cast<double>(std::bit_ceil(static_cast<uint64_t>(head_dim)));
}

}  // namespace

double exact_store_bytes(const KvShape& shape, ExactScores scores) {
  const double k_row = scores == ExactScores::Ntt      ? ntt_size(shape.head_dim_k) * 8.0
                       : scores == ExactScores::NttCrt ? 2.0 * ntt_size(shape.head_dim_k) * 8.0
                                                       : padded16(shape.head_dim_k) * 2.0;
  const double v_row = padded16(shape.head_dim_v) * 2.0;
  return row_count(shape) * (k_row + v_row + 2.0 * sizeof(float));
}

void check_store_fits(double bytes, const KvShape& shape) {
  const MemoryBudget budget = available_memory();
  if (bytes <= static_cast<double>(budget.bytes)) return;
  throw_error_for(
      Setting::ContextLength,
      "the KV cache for a context of {} tokens needs {} ({} layers x {} KV heads x head dims {}/{}), this machine "
      "has {} available ({}); use a smaller context",
      shape.n_ctx, format_bytes(bytes), shape.n_layer, shape.n_head_kv, shape.head_dim_k, shape.head_dim_v,
      format_bytes(static_cast<double>(budget.bytes)), budget.source);
}

}  // namespace okapi::kv
