#include "core/atomic_file.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

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
