// SHA-256 (OpenSSL's implementation), as lowercase hex.
#pragma once
#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace okapi {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t size);
  std::string hex_digest();  // finalizes

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string sha256_hex(const void* data, size_t size);
inline std::string sha256_hex(std::span<const unsigned char> bytes) {
  return sha256_hex(bytes.data(), bytes.size());
}

}  // namespace okapi
