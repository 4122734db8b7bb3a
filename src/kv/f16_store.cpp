// fp16 KV stores as llama.cpp's F16 cache (K and/or V rounded to IEEE half on append).
#include "kv/plain_store.hpp"

namespace okapi::kv {

std::unique_ptr<KvStore> make_f16_store(const KvShape& shape, bool k_f16, bool v_f16, Isa tier) {
  if (k_f16 && v_f16) return std::make_unique<PlainStore<uint16_t, uint16_t>>(shape, tier);
  if (k_f16) return std::make_unique<PlainStore<uint16_t, float>>(shape, tier);
  if (v_f16) return std::make_unique<PlainStore<float, uint16_t>>(shape, tier);
  return make_f32_store(shape, tier);
}

}  // namespace okapi::kv
