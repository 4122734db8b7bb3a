// The float32 KV store: exact storage, the reference other stores are compared with.
#include "kv/plain_store.hpp"

namespace okapi::kv {

std::unique_ptr<KvStore> make_f32_store(const KvShape& shape, Isa tier) {
  return std::make_unique<PlainStore<float, float>>(shape, tier);
}

}  // namespace okapi::kv
