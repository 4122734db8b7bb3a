// KvStore::save_cells / load_cells: a store's rows of positions [0, n) as bytes, for slot files.
// Layout, layer by layer: the first position kept (int64; 0 for a full layer, a ring layer's
// oldest position still held), then each kv head's K rows of the kept positions, then its V rows.
#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "kv/kv_store.hpp"

namespace okapi::kv {

void KvStore::copy_row_out(bool, int64_t, char*) const {
  throw_error("KV store {}: its cells cannot be saved (slot files need an f32 or f16 cache)", type_name());
}

void KvStore::copy_row_in(bool, int64_t, const char*) {
  throw_error("KV store {}: its cells cannot be restored (slot files need an f32 or f16 cache)", type_name());
}

namespace {

// The oldest position of [0, n) a layer still holds: 0 for a full layer.
int64_t first_kept(const KvShape& shape, int64_t layer, int64_t n, int64_t lost_below) {
  const int64_t cells = shape.cells(layer);
  if (cells >= shape.n_ctx) return 0;
  return std::clamp(std::max(lost_below, n - cells), int64_t{0}, n);
}

}  // namespace

void KvStore::save_cells(int64_t n, std::string& out) const {
  const size_t k_bytes = saved_row_bytes(false), v_bytes = saved_row_bytes(true);
  if (k_bytes == 0 || v_bytes == 0)
    throw_error("KV store {}: its cells cannot be saved (slot files need an f32 or f16 cache)", type_name());
  if (n < 0 || n > shape_.n_ctx) throw_error("KV store: cannot save {} positions of a context of {}", n, shape_.n_ctx);
  for (int64_t l = 0; l < shape_.n_layer; ++l) {
    const int64_t first = first_kept(shape_, l, n, lost_below_[static_cast<size_t>(l)]);
    out.append(reinterpret_cast<const char*>(&first), sizeof(first));
    const size_t start = out.size();
    const auto rows = static_cast<size_t>((n - first) * shape_.n_head_kv);
    out.resize(start + rows * (k_bytes + v_bytes));
    char* at = out.data() + start;
    for (const bool value : {false, true}) {
      const size_t bytes = value ? v_bytes : k_bytes;
      for (int64_t h = 0; h < shape_.n_head_kv; ++h)
        for (int64_t p = first; p < n; ++p, at += bytes) copy_row_out(value, row(l, h, p), at);
    }
  }
}

void KvStore::load_cells(int64_t n, std::string_view in) {
  const size_t k_bytes = saved_row_bytes(false), v_bytes = saved_row_bytes(true);
  if (k_bytes == 0 || v_bytes == 0)
    throw_error("KV store {}: its cells cannot be restored (slot files need an f32 or f16 cache)", type_name());
  if (n < 0 || n > shape_.n_ctx)
    throw_error("the saved slot holds {} positions, this slot's context holds {}", n, shape_.n_ctx);
  // Every layer's header and size is checked before a row is copied: a bad file leaves the store as it was.
  std::vector<int64_t> firsts;
  size_t at = 0;
  for (int64_t l = 0; l < shape_.n_layer; ++l) {
    int64_t first = 0;
    if (in.size() - at < sizeof(first)) throw_error("the saved KV cells end early (layer {} of {})", l, shape_.n_layer);
    std::memcpy(&first, in.data() + at, sizeof(first));
    at += sizeof(first);
    const int64_t cells = shape_.cells(l);
    const int64_t lowest = cells >= shape_.n_ctx ? 0 : std::max<int64_t>(0, n - cells);
    const int64_t highest = cells >= shape_.n_ctx ? 0 : n;
    if (first < lowest || first > highest)
      throw_error("the saved KV cells of layer {} start at position {}, outside [{}, {}]", l, first, lowest, highest);
    const auto rows = static_cast<size_t>((n - first) * shape_.n_head_kv);
    const size_t bytes = rows * (k_bytes + v_bytes);
    if (in.size() - at < bytes) throw_error("the saved KV cells end early (layer {} of {})", l, shape_.n_layer);
    at += bytes;
    firsts.push_back(first);
  }
  if (at != in.size()) throw_error("the saved KV cells have {} bytes more than {} positions hold", in.size() - at, n);
  at = 0;
  for (int64_t l = 0; l < shape_.n_layer; ++l) {
    const int64_t first = firsts[static_cast<size_t>(l)];
    at += sizeof(first);
    for (const bool value : {false, true}) {
      const size_t bytes = value ? v_bytes : k_bytes;
      for (int64_t h = 0; h < shape_.n_head_kv; ++h)
        for (int64_t p = first; p < n; ++p, at += bytes) copy_row_in(value, row(l, h, p), in.data() + at);
    }
    lost_below_[static_cast<size_t>(l)] = first;
  }
}

}  // namespace okapi::kv
