// A read-only memory-mapped file. Tensors are views into this mapping, never copies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace okapi {

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);  // throws okapi::Error
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace okapi
