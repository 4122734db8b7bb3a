// Writes a file so that the destination is either the old file or the complete new one:
// data goes to a temp name beside it, is fsync'ed, then renamed over the destination.
#pragma once
#include <cstddef>
#include <cstdio>
#include <filesystem>

namespace okapi {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::filesystem::path& destination);  // throws okapi::Error
  ~AtomicFileWriter();  // removes the temp file unless commit() succeeded
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t size);
  void write_zeros(size_t count);
  uint64_t bytes_written() const { return written_; }
  void commit();  // flush, fsync, rename, fsync the directory

 private:
  std::filesystem::path destination_;
  std::filesystem::path temp_;
  std::FILE* file_ = nullptr;
  uint64_t written_ = 0;
  bool committed_ = false;
};

}  // namespace okapi
