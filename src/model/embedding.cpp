#include "model/embedding.hpp"

#include <array>

namespace okapi::model {

namespace {
constexpr std::array<std::string_view, 5> kNames = {"none", "mean", "cls", "last", "rank"};
}

std::string_view pooling_name(Pooling pooling) { return kNames[static_cast<size_t>(pooling)]; }

std::optional<Pooling> parse_pooling(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<Pooling>(i);
  return std::nullopt;
}

std::optional<Pooling> pooling_from_gguf(int64_t value) {
  if (value < 0 || value >= static_cast<int64_t>(kNames.size())) return std::nullopt;
  return static_cast<Pooling>(value);
}

}  // namespace okapi::model
