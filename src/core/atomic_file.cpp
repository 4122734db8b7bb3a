#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/error.hpp"

namespace okapi {

AtomicFileWriter::AtomicFileWriter(const std::filesystem::path& destination)
    : destination_(destination) {
  temp_ = destination;
  temp_ += fmt::format(".tmp.{}", ::getpid());
  file_ = std::fopen(temp_.c_str(), "wb");
  if (file_ == nullptr) {
    throw_error("cannot create '{}': {}", temp_.string(), std::strerror(errno));
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove(temp_, ec);
  }
}

void AtomicFileWriter::write(const void* data, size_t size) {
  if (size == 0) return;
  if (std::fwrite(data, 1, size, file_) != size) {
    throw_error("write to '{}' failed after {} bytes: {}", temp_.string(), written_, std::strerror(errno));
  }
  written_ += size;
}

void AtomicFileWriter::write_zeros(size_t count) {
  static constexpr std::array<char, 4096> kZeros{};
  while (count > 0) {
    const size_t n = count < kZeros.size() ? count : kZeros.size();
    write(kZeros.data(), n);
    count -= n;
  }
}

void AtomicFileWriter::commit() {
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) {
    throw_error("cannot flush '{}': {}", temp_.string(), std::strerror(errno));
  }
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) throw_error("cannot close '{}': {}", temp_.string(), std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(temp_, destination_, ec);
  if (ec) throw_error("cannot rename '{}' to '{}': {}", temp_.string(), destination_.string(), ec.message());
  committed_ = true;
  auto dir = destination_.parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace okapi
