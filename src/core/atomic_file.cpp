#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/error.hpp"
#include "core/output_paths.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;

fs::path directory_of(const fs::path& path) {
  const fs::path dir = path.parent_path();
  return dir.empty() ? fs::path(".") : dir;
}

// Why the temp file beside `destination` could not be created (`err` from open), naming the
// destination and its directory rather than the temp name.
[[noreturn]] void throw_cannot_create(const fs::path& destination, int err) {
  const fs::path dir = directory_of(destination);
  struct stat st{};
  if (err == ENOENT || err == ENOTDIR) {
    if (::stat(dir.c_str(), &st) != 0) {
      throw_error("cannot write '{}': directory '{}' does not exist", destination.string(), dir.string());
    }
    if (!S_ISDIR(st.st_mode)) {
      throw_error("cannot write '{}': '{}' is not a directory", destination.string(), dir.string());
    }
  }
  if (err == EACCES || err == EPERM) {
    throw_error("cannot write '{}': permission denied to create files in directory '{}'", destination.string(),
                dir.string());
  }
  if (err == EROFS) {
    throw_error("cannot write '{}': directory '{}' is on a read-only file system", destination.string(), dir.string());
  }
  throw_error("cannot write '{}': {}", destination.string(), std::strerror(err));
}

// A socket path is written to as a stream client of whoever listens there.
int connect_socket(const fs::path& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string& name = path.native();
  if (name.size() >= sizeof(address.sun_path)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  std::memcpy(address.sun_path, name.c_str(), name.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(const fs::path& destination) : destination_(destination) {
  const OutputTarget target = output_target(destination);
  if (target.kind == OutputTarget::Kind::kDirectory) {
    throw_error("cannot write '{}': it is a directory", destination.string());
  }
  if (target.kind == OutputTarget::Kind::kInPlace) {
    open_in_place(target.descriptor);
    if (file_ != nullptr) return;  // else it became a regular file meanwhile: replace it as one
  }
  temp_ = destination;
  temp_ += fmt::format(".tmp.{}", ::getpid());
  const int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) throw_cannot_create(destination, errno);
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int err = errno;
    ::close(fd);
    std::error_code ec;
    fs::remove(temp_, ec);
    throw_error("cannot write '{}': {}", destination.string(), std::strerror(err));
  }
}

void AtomicFileWriter::open_in_place(int descriptor) {
  int fd = -1;
  if (descriptor >= 0) {
    fd = ::fcntl(descriptor, F_DUPFD_CLOEXEC, 0);
  } else {
    struct stat st{};
    const bool socket = ::stat(destination_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
    // No O_TRUNC and no O_CREAT: a device or FIFO is written as it is; opening a FIFO waits for
    // a reader, as a shell's `>` does.
    fd = socket ? connect_socket(destination_) : ::open(destination_.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
  }
  if (fd < 0) throw_error("cannot write '{}': {}", destination_.string(), std::strerror(errno));
  struct stat st{};
  if (descriptor < 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    ::close(fd);  // replaced by a regular file since output_target looked
    return;
  }
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int err = errno;
    ::close(fd);
    throw_error("cannot write '{}': {}", destination_.string(), std::strerror(err));
  }
  in_place_ = true;
}

AtomicFileWriter::~AtomicFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_ && !in_place_) {
    std::error_code ec;
    fs::remove(temp_, ec);
  }
}

void AtomicFileWriter::write(const void* data, size_t size) {
  if (size == 0) return;
  if (std::fwrite(data, 1, size, file_) != size) {
    throw_error("cannot write '{}' after {} bytes: {}", destination_.string(), written_, std::strerror(errno));
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
  if (std::fflush(file_) != 0) {
    throw_error("cannot write '{}' after {} bytes: {}", destination_.string(), written_, std::strerror(errno));
  }
  struct stat st{};
  const bool regular = ::fstat(::fileno(file_), &st) == 0 && S_ISREG(st.st_mode);  // in place: stdout to a file
  if (regular && ::fsync(::fileno(file_)) != 0) {
    throw_error("cannot write '{}': {}", destination_.string(), std::strerror(errno));
  }
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) throw_error("cannot write '{}': {}", destination_.string(), std::strerror(errno));
  if (in_place_) {
    committed_ = true;
    return;
  }
  std::error_code ec;
  fs::rename(temp_, destination_, ec);
  if (ec) throw_error("cannot replace '{}': {}", destination_.string(), ec.message());
  committed_ = true;
  const fs::path dir = directory_of(destination_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace okapi
