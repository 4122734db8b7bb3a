// Writes a file so that the destination is either the old file or the complete new one:
// data goes to a temp name beside it, is fsync'ed, then renamed over the destination.
// An output that is not a regular file (a device, a FIFO, a socket, /dev/stdout; see
// output_target in output_paths.hpp) is written in place instead: opened for writing and never
// replaced, removed or truncated (nor made atomic: a failed write leaves what was sent).
#pragma once
#include <cstddef>
#include <cstdint>
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
  // Writing straight into the destination (no temp file): it exists and is not a regular file.
  bool in_place() const { return in_place_; }
  void commit();  // flush, fsync, rename, fsync the directory (in place: flush)

 private:
  void open_in_place(int descriptor);

  std::filesystem::path destination_;
  std::filesystem::path temp_;
  std::FILE* file_ = nullptr;
  uint64_t written_ = 0;
  bool committed_ = false;
  bool in_place_ = false;
};

}  // namespace okapi
