// KV cache types by name, parsed as the CLI parses them: cache_types("q4_0", "q8_0").
#pragma once
#include <string_view>

#include "kv/cache_type.hpp"

namespace okapi::test {

inline kv::CacheTypes cache_types(std::string_view k, std::string_view v,
                                  kv::KvRotation rotation = kv::KvRotation::None) {
  return {kv::CacheType::parse(k), kv::CacheType::parse(v), rotation};
}

}  // namespace okapi::test
