#include "server/api_key.hpp"

#include <string_view>

namespace okapi::server {

namespace {

// Every byte of `given` is looked at whatever the first difference (the length may show).
bool same_key(std::string_view given, std::string_view key) {
  if (key.empty()) return false;
  unsigned char differ = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i)
    differ |= static_cast<unsigned char>(given[i] ^ key[i % key.size()]);
  return differ == 0;
}

}  // namespace

bool api_key_accepted(const http::Request& req, const std::vector<std::string>& keys) {
  if (keys.empty()) return true;
  std::string_view key = req.header("authorization");
  if (key.empty()) key = req.header("x-api-key");
  constexpr std::string_view kBearer = "Bearer ";
  if (key.substr(0, kBearer.size()) == kBearer) key.remove_prefix(kBearer.size());
  if (key.empty()) return false;
  bool accepted = false;
  for (const auto& k : keys) accepted |= same_key(key, k);
  return accepted;
}

}  // namespace okapi::server
