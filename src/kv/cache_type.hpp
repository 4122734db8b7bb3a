// KV cache types as llama.cpp's --cache-type-k/-v (-ctk/-ctv) and okapi's --kv-rotate name them,
// parsed once where a name comes in (the CLI flags, kv-eval's lists) and passed typed below: the
// one table of names, what each type stores per value, what a store of it allocates, and the
// factory that picks the store.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.hpp"
#include "kv/kv_store.hpp"

namespace okapi::kv {

struct TbqSpec;
struct SpSpec;

// One side's (K or V) type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl (the quant
// table's formats), okapi's tbq2.5 / tbq3 / tbq3.5 / tbq4 (kv/lloyd_max.hpp, always rotated) and
// seed 000's sp / sp-full (kv/sp_codec.hpp).
class CacheType {
 public:
  constexpr CacheType() = default;  // f32
  static CacheType f32() { return CacheType(0); }
  static CacheType f16() { return CacheType(1); }
  // Throws okapi::Error "unsupported KV cache type 'x' (supported: f32, f16, ...)".
  static CacheType parse(std::string_view name);
  // Every type, in the order above.
  static std::span<const CacheType> all();

  std::string_view name() const;
  // f32 and f16 are the dense stores of plain_store.hpp (when not rotated).
  bool is_dense() const { return index_ <= 1; }
  // A quantized block format of the quant table (q*, iq4_nl).
  bool is_quantized_block() const;
  const TbqSpec* tbq() const;  // the tbq types' spec, else nullptr
  const SpSpec* sp() const;    // the sp types' spec, else nullptr
  DType dtype() const;         // the quant table's format of its rows (F32 for tbq and sp)
  // The stored bits per value for rows of `dim` values, block scales included (throws as
  // make_store does for a width the type cannot serve, naming `which`, "K" or "V"). With n_ctx > 0,
  // a type's per-head calibration (sp) is added, amortized over n_ctx rows.
  double bits_per_value(int64_t dim, std::string_view which = "K", int64_t n_ctx = 0) const;

  friend bool operator==(CacheType, CacheType) = default;

 private:
  explicit constexpr CacheType(uint8_t index) : index_(index) {}
  uint8_t index_ = 0;
};

// --kv-rotate: none, or a seeded randomized Hadamard rotation per layer and kv head
// (kv/rotation.hpp) applied to K and V rows before they are encoded.
enum class KvRotation { None, Hadamard };
// "none" | "hadamard"; throws okapi::Error naming the valid values otherwise.
KvRotation parse_kv_rotation(std::string_view name);
std::string_view kv_rotation_name(KvRotation rotation);

// A cache's types: K's, V's, and the rotation of their rows.
struct CacheTypes {
  CacheType k, v;
  KvRotation rotation = KvRotation::None;

  // kv-eval's spelling: "q4_0" (K and V alike), "q8_0/q4_0" (K/V), "+hadamard" when rotated.
  std::string name() const;
  // The bytes make_store(shape, *this) allocates, computed without allocating. A double, so that
  // no claimed shape or context can overflow it (memory estimates only compare and print it).
  double bytes(const KvShape& shape) const;

  friend bool operator==(const CacheTypes&, const CacheTypes&) = default;
};

// f32 and f16 without rotation are the dense stores (plain_store.hpp, ggml's numerics); every
// other combination is a CodecStore (codec_store.hpp); `seed` seeds the rotations' random signs.
// The store runs the kernels of `tier` (one of available_isas(): the backend's, given by
// Ops::make_kv). Throws on a head width a type's blocks do not divide, a non-positive shape, or a
// store larger than the memory left (check_store_fits).
std::unique_ptr<KvStore> make_store(const KvShape& shape, const CacheTypes& types, Isa tier, uint64_t seed = 0);

}  // namespace okapi::kv
