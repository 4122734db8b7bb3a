#include "kv/cache_type.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "kernels/format_table.hpp"
#include "kv/codec_store.hpp"
#include "kv/lloyd_max.hpp"
#include "kv/sp_codec.hpp"

namespace okapi::kv {

namespace {

struct Entry {
  std::string_view name;
  DType dtype = DType::F32;
  const TbqSpec* tbq = nullptr;
  const SpSpec* sp = nullptr;
};

// llama.cpp's -ctk / -ctv names; f32 and f16 first (CacheType::f32() and f16() are indices 0, 1).
constexpr std::array<Entry, 9> kBlockTypes = {{
    {"f32", DType::F32},   {"f16", DType::F16},   {"bf16", DType::BF16},  {"q8_0", DType::Q8_0},   {"q4_0", DType::Q4_0},
    {"q4_1", DType::Q4_1}, {"q5_0", DType::Q5_0}, {"q5_1", DType::Q5_1}, {"iq4_nl", DType::IQ4_NL},
}};

const std::vector<Entry>& table() {
  static const std::vector<Entry> entries = [] {
    std::vector<Entry> e(kBlockTypes.begin(), kBlockTypes.end());
    for (const TbqSpec& t : tbq_specs()) e.push_back({t.name, DType::F32, &t, nullptr});
    for (const SpSpec& t : sp_specs()) e.push_back({t.name, DType::F32, nullptr, &t});
    return e;
  }();
  return entries;
}

}  // namespace

CacheType CacheType::parse(std::string_view name) {
  const std::vector<Entry>& entries = table();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].name == name) return CacheType(static_cast<uint8_t>(i));
  }
  std::string names;
  for (const Entry& e : entries) names += (names.empty() ? "" : ", ") + std::string(e.name);
  throw_error("unsupported KV cache type '{}' (supported: {})", name, names);
}

std::span<const CacheType> CacheType::all() {
  static const std::vector<CacheType> types = [] {
    std::vector<CacheType> t;
    for (size_t i = 0; i < table().size(); ++i) t.push_back(CacheType(static_cast<uint8_t>(i)));
    return t;
  }();
  return types;
}

bool CacheType::is_quantized_block() const { return index_ >= 3 && index_ < kBlockTypes.size(); }

std::string_view CacheType::name() const { return table()[index_].name; }
const TbqSpec* CacheType::tbq() const { return table()[index_].tbq; }
const SpSpec* CacheType::sp() const { return table()[index_].sp; }
DType CacheType::dtype() const { return table()[index_].dtype; }

double CacheType::bits_per_value(int64_t dim, std::string_view which, int64_t n_ctx) const {
  if (const SpSpec* s = sp()) {
    if (dim <= 0) return 62.0 * 8.0 / 128.0;  // the seed's width
    const double row = static_cast<double>(row_codec(which, *this, dim).row_bytes) * 8.0;
    const double metadata = n_ctx > 0 ? sp_metadata_bits(*s, dim) / static_cast<double>(n_ctx) : 0.0;
    return (row + metadata) / static_cast<double>(dim);
  }
  if (const TbqSpec* t = tbq()) {
    if (dim <= 0) return (t->bits_hi + t->bits_lo) / 2.0;
    return static_cast<double>(row_codec(which, *this, dim).row_bytes) * 8.0 / static_cast<double>(dim);
  }
  const DTypeLayout l = layout(dtype());
  if (dim > 0 && dim % l.block_size != 0) (void)row_codec(which, *this, dim);  // the clear error
  return static_cast<double>(l.block_bytes) * 8.0 / static_cast<double>(l.block_size);
}

KvRotation parse_kv_rotation(std::string_view name) {
  if (name == "none") return KvRotation::None;
  if (name == "hadamard") return KvRotation::Hadamard;
  throw_error("unknown KV rotation '{}' (expected none or hadamard)", name);
}

std::string_view kv_rotation_name(KvRotation rotation) {
  return rotation == KvRotation::Hadamard ? "hadamard" : "none";
}

std::string CacheTypes::name() const {
  std::string out(k.name());
  if (v != k) out += fmt::format("/{}", v.name());
  if (rotation != KvRotation::None) out += fmt::format("+{}", kv_rotation_name(rotation));
  return out;
}

double CacheTypes::bytes(const KvShape& shape) const {
  // Bits per value of a whole row, exact for the block formats (row_codec in codec_store.cpp).
  // Sliding-window layers keep their ring's cells (KvShape::cells); sp's calibration is per
  // (layer, kv head), whatever the cells.
  const double k_bits = k.bits_per_value(shape.head_dim_k, "K"), v_bits = v.bits_per_value(shape.head_dim_v, "V");
  const double rows = shape.total_cells() * static_cast<double>(shape.n_head_kv);
  double bytes =
      rows * (static_cast<double>(shape.head_dim_k) * k_bits + static_cast<double>(shape.head_dim_v) * v_bits) / 8.0;
  const double heads = static_cast<double>(shape.n_layer) * static_cast<double>(shape.n_head_kv);
  if (const SpSpec* s = k.sp(); s && shape.head_dim_k > 0)
    bytes += heads * std::floor(sp_metadata_bits(*s, shape.head_dim_k) / 8.0);
  if (const SpSpec* s = v.sp(); s && shape.head_dim_v > 0)
    bytes += heads * std::floor(sp_metadata_bits(*s, shape.head_dim_v) / 8.0);
  return bytes;
}

std::unique_ptr<KvStore> make_store(const KvShape& shape, const CacheTypes& types, Isa tier, uint64_t seed) {
  check_store_fits(types.bytes(shape), shape);
  if (!types.k.is_dense() || !types.v.is_dense() || types.rotation != KvRotation::None) {
    return std::make_unique<CodecStore>(shape, types, seed, tier);
  }
  const bool k16 = types.k == CacheType::f16(), v16 = types.v == CacheType::f16();
  if (!k16 && !v16) return make_f32_store(shape, tier);
  return make_f16_store(shape, k16, v16, tier);
}

}  // namespace okapi::kv
