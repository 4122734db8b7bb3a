#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "core/sha256.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

using test::read_file;

TEST(AtomicFileWriter, ReplacesOnlyOnCommit) {
  const auto dir = test::make_temp_dir("atomic");
  const auto path = dir / "out.bin";
  std::ofstream(path) << "old";
  {
    AtomicFileWriter w(path);
    w.write("new contents", 12);
    EXPECT_EQ(read_file(path), "old");  // untouched until commit
  }  // destroyed without commit: old file stays, temp removed
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
  {
    AtomicFileWriter w(path);
    w.write("new", 3);
    w.write_zeros(5);
    w.commit();
  }
  EXPECT_EQ(read_file(path), std::string("new\0\0\0\0\0", 8));
  std::filesystem::remove_all(dir);
}

TEST(AtomicFileWriter, UnwritableDirectoryThrows) {
  EXPECT_THROW(AtomicFileWriter("/nonexistent-dir/x.bin"), Error);
}

std::string error_of(const std::filesystem::path& path) {
  try {
    AtomicFileWriter w(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The message names the file asked for and why, not the temp file beside it.
TEST(AtomicFileWriter, ErrorsNameTheDestinationNotTheTempFile) {
  const std::string missing = error_of("/nonexistent-dir/sub/x.bin");
  EXPECT_NE(missing.find("cannot write '/nonexistent-dir/sub/x.bin': directory '/nonexistent-dir/sub' does not exist"),
            std::string::npos)
      << missing;
  EXPECT_EQ(missing.find(".tmp."), std::string::npos) << missing;
  const auto dir = test::make_temp_dir("atomic-errors");
  std::ofstream(dir / "file") << "x";
  const std::string not_dir = error_of(dir / "file" / "x.bin");
  EXPECT_NE(not_dir.find("is not a directory"), std::string::npos) << not_dir;
  EXPECT_EQ(not_dir.find(".tmp."), std::string::npos) << not_dir;
  const std::string directory = error_of(dir);
  EXPECT_NE(directory.find("is a directory"), std::string::npos) << directory;
  if (::geteuid() != 0) {  // root writes anywhere
    std::filesystem::create_directory(dir / "ro");
    std::filesystem::permissions(dir / "ro", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    const std::string denied = error_of(dir / "ro" / "x.bin");
    EXPECT_NE(denied.find("cannot write '" + (dir / "ro" / "x.bin").string() + "': permission denied"),
              std::string::npos)
        << denied;
    EXPECT_EQ(denied.find(".tmp."), std::string::npos) << denied;
    std::filesystem::permissions(dir / "ro", std::filesystem::perms::owner_all);
  }
  std::filesystem::remove_all(dir);
}

bool is_fifo_node(const std::filesystem::path& p) {
  struct stat st{};
  return ::lstat(p.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

size_t entries(const std::filesystem::path& dir) {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir), {}));
}

// A private twin of /dev/null (never /dev itself): written in place, still a character device.
TEST(AtomicFileWriter, WritesIntoACharacterDeviceInPlace) {
  const auto dir = test::make_temp_dir("atomic-chr");
  const auto node = dir / "null";
  if (::mknod(node.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) != 0) {
    const int err = errno;
    std::filesystem::remove_all(dir);
    if (err == EPERM) GTEST_SKIP() << "mknod needs privileges here";
    FAIL() << "mknod: " << std::strerror(err);
  }
  std::filesystem::create_symlink("null", dir / "link");
  for (const char* name : {"null", "link"}) {
    AtomicFileWriter w(dir / name);
    EXPECT_TRUE(w.in_place());
    w.write("data", 4);
    w.write_zeros(10000);
    w.commit();
    EXPECT_EQ(w.bytes_written(), 10004u);
  }
  struct stat st{};
  ASSERT_EQ(::lstat(node.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, ::makedev(1, 3));
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link"));
  EXPECT_EQ(entries(dir), 2u);  // no temp file beside them
  std::filesystem::remove_all(dir);
}

// Reads a FIFO to its end on a thread; finish() unblocks a reader still waiting for a writer.
class FifoReader {
 public:
  explicit FifoReader(std::filesystem::path path) : path_(std::move(path)), thread_([this] {
    const int fd = ::open(path_.c_str(), O_RDONLY);
    if (fd < 0) return;
    char buffer[4096];
    ssize_t n = 0;
    while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) data_.append(buffer, static_cast<size_t>(n));
    ::close(fd);
  }) {}
  std::string finish() {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    thread_.join();
    return data_;
  }

 private:
  std::filesystem::path path_;
  std::string data_;
  std::thread thread_;
};

TEST(AtomicFileWriter, WritesIntoAFifoInPlace) {
  const auto dir = test::make_temp_dir("atomic-fifo");
  const auto fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  FifoReader reader(fifo);
  {
    AtomicFileWriter w(fifo);
    EXPECT_TRUE(w.in_place());
    w.write("through the pipe", 16);
    w.commit();
  }
  EXPECT_EQ(reader.finish(), "through the pipe");
  EXPECT_TRUE(is_fifo_node(fifo));
  EXPECT_EQ(entries(dir), 1u);
  // Destroyed without commit: the FIFO stays (nothing to remove, nothing renamed).
  FifoReader second(fifo);
  {
    AtomicFileWriter w(fifo);
    w.write("partial", 7);
  }
  EXPECT_EQ(second.finish(), "partial");
  EXPECT_TRUE(is_fifo_node(fifo));
  std::filesystem::remove_all(dir);
}

// A socket path: written to whoever listens there; with no listener an error, and the socket stays.
TEST(AtomicFileWriter, WritesIntoAListeningSocketAndKeepsOneWithoutListener) {
  const auto dir = test::make_temp_dir("atomic-sock");
  const auto path = dir / "sock";
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.native().size(), sizeof(address.sun_path));
  std::memcpy(address.sun_path, path.c_str(), path.native().size() + 1);
  const int server = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(server, 0);
  ASSERT_EQ(::bind(server, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0) << std::strerror(errno);
  // Bound, not listening: connecting is refused.
  const std::string refused = error_of(path);
  EXPECT_NE(refused.find("cannot write '" + path.string() + "'"), std::string::npos) << refused;
  ASSERT_EQ(::listen(server, 1), 0);
  std::string received;
  std::thread accepter([&] {
    const int client = ::accept(server, nullptr, nullptr);
    if (client < 0) return;
    char buffer[256];
    ssize_t n = 0;
    while ((n = ::read(client, buffer, sizeof(buffer))) > 0) received.append(buffer, static_cast<size_t>(n));
    ::close(client);
  });
  {
    AtomicFileWriter w(path);
    EXPECT_TRUE(w.in_place());
    w.write("socket bytes", 12);
    w.commit();
  }
  accepter.join();
  ::close(server);
  EXPECT_EQ(received, "socket bytes");
  struct stat st{};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(entries(dir), 1u);
  std::filesystem::remove_all(dir);
}

// /dev/fd/N and /proc/self/fd/N are this process's descriptors: written through them, so a file
// opened for appending (a shell's >>) keeps its bytes and its inode.
TEST(AtomicFileWriter, WritesThroughTheProcessDescriptors) {
  const auto dir = test::make_temp_dir("atomic-fd");
  const auto file = dir / "log";
  std::ofstream(file) << "before|";
  struct stat before{};
  ASSERT_EQ(::stat(file.c_str(), &before), 0);
  const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  for (const std::string prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    AtomicFileWriter w(prefix + std::to_string(fd));
    EXPECT_TRUE(w.in_place());
    w.write("after|", 6);
    w.commit();
  }
  ::close(fd);
  EXPECT_EQ(read_file(file), "before|after|after|");
  struct stat after{};
  ASSERT_EQ(::stat(file.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(entries(dir), 1u);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  {
    AtomicFileWriter w("/dev/fd/" + std::to_string(pipe_fds[1]));
    w.write("piped", 5);
    w.commit();
  }
  ::close(pipe_fds[1]);
  char buffer[16] = {};
  EXPECT_EQ(::read(pipe_fds[0], buffer, sizeof(buffer)), 5);
  EXPECT_EQ(std::string(buffer), "piped");
  ::close(pipe_fds[0]);
  std::filesystem::remove_all(dir);
}

TEST(MappedFile, MapsAndRejectsMissing) {
  const auto dir = test::make_temp_dir("mapped");
  std::ofstream(dir / "a.txt") << "abc";
  MappedFile f(dir / "a.txt");
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f.data()[1], 'b');
  EXPECT_THROW(MappedFile(dir / "missing"), Error);
  EXPECT_THROW(MappedFile(dir.string()), Error);  // a directory
  std::ofstream(dir / "empty");
  MappedFile empty(dir / "empty");
  EXPECT_EQ(empty.size(), 0u);
  std::filesystem::remove_all(dir);
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace okapi
