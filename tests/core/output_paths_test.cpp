// check_output_plan as a library call: which spellings name the same file (existing or not yet
// written), outputs that are directories, outputs that collide, files inside owned directories,
// and sidecars that need force.
#include "core/output_paths.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "core/error.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;

class OutputPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::make_temp_dir("output-paths");
    fs::create_directories(dir_ / "d" / "sub");
    std::ofstream(dir_ / "d" / "in.txt") << "input";
    std::ofstream(dir_ / "d" / "other.txt") << "other";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The error check_output_plan throws, or "" when it accepts the plan.
  static std::string error_of(const OutputPlan& plan) {
    try {
      check_output_plan(plan);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  static OutputPlan plan_of(const fs::path& input, const fs::path& output) {
    OutputPlan plan;
    plan.inputs = {{input, "--in"}};
    plan.outputs = {{output, "-o"}};
    return plan;
  }

  fs::path dir_;
};

TEST_F(OutputPaths, EverySpellingOfTheInputIsTheSameFile) {
  const fs::path in = dir_ / "d" / "in.txt";
  fs::create_symlink(in, dir_ / "link");
  fs::create_symlink(dir_ / "link", dir_ / "chain");
  fs::create_hard_link(in, dir_ / "hard");
  fs::create_directory_symlink(dir_ / "d", dir_ / "dlink");
  const std::vector<std::pair<fs::path, std::string>> cases = {
      {in, "(the same path)"},
      {dir_ / "d" / "." / "in.txt", "(the same path, written differently)"},
      {dir_ / "d" / "sub" / ".." / "in.txt", "(the same path, written differently)"},
      {dir_ / "link", "is a symbolic link)"},
      {dir_ / "chain", "is a symbolic link)"},
      {dir_ / "hard", "(hard links: the same device and inode)"},
      {dir_ / "dlink" / "in.txt", "(the same path through a linked directory)"},
  };
  for (const auto& [spelling, reason] : cases) {
    for (const std::string& message : {error_of(plan_of(in, spelling)), error_of(plan_of(spelling, in))}) {
      EXPECT_NE(message.find("is the same file as"), std::string::npos) << spelling << ": " << message;
      EXPECT_NE(message.find(reason), std::string::npos) << spelling << ": " << message;
      EXPECT_NE(message.find("choose another path for -o"), std::string::npos) << message;
    }
  }
  EXPECT_EQ(error_of(plan_of(in, dir_ / "d" / "other.txt")), "");
  EXPECT_EQ(error_of(plan_of(in, dir_ / "d" / "new.txt")), "");
}

TEST_F(OutputPaths, OutputsThatDoNotExistYetCollideBySpelling) {
  OutputPlan plan;
  plan.outputs = {{dir_ / "d" / "x.json", "-o"}};
  plan.sidecars = {{dir_ / "d" / "sub" / ".." / "x.json", "the JSON beside -o"}};
  EXPECT_NE(error_of(plan).find("are the same file"), std::string::npos) << error_of(plan);
  plan.sidecars = {{dir_ / "d" / "y.json", "the JSON beside -o"}};
  EXPECT_EQ(error_of(plan), "");
}

TEST_F(OutputPaths, DirectoriesAndOwnedDirectories) {
  EXPECT_NE(error_of(plan_of(dir_ / "d" / "in.txt", dir_ / "d")).find("is a directory"), std::string::npos);
  OutputPlan plan;
  plan.inputs = {{dir_ / "d" / "in.txt", "--data"}};
  plan.directories = {{dir_ / "d" / "in.txt", "--out"}};
  EXPECT_NE(error_of(plan).find("is the same file as --data"), std::string::npos) << error_of(plan);
  plan.directories = {{dir_ / "d" / "other.txt", "--out"}};
  EXPECT_NE(error_of(plan).find("is a file, not a directory"), std::string::npos) << error_of(plan);
  plan.directories = {{dir_ / "run", "--out"}};
  plan.outputs = {{dir_ / "." / "run", "--export"}};  // neither exists yet
  EXPECT_NE(error_of(plan).find("is also --out"), std::string::npos) << error_of(plan);
  plan.outputs.clear();
  plan.directories = {{dir_ / "d", "--out"}};
  EXPECT_EQ(error_of(plan), "");  // inputs may sit in a run directory...
  plan.owned_directories = {{dir_ / "d" / "sub" / "..", "the cache"}};
  EXPECT_NE(error_of(plan).find("lies inside the cache"), std::string::npos) << error_of(plan);  // ...not in a cache
}

TEST_F(OutputPaths, ASidecarReplacesAnExistingFileOnlyWhenForced) {
  OutputPlan plan;
  plan.outputs = {{dir_ / "d" / "out.bin", "-o"}};
  plan.sidecars = {{dir_ / "d" / "other.txt", "the JSON beside -o"}};
  EXPECT_NE(error_of(plan).find("other.txt' exists; pass --force to replace it"), std::string::npos);
  plan.force = true;
  EXPECT_EQ(error_of(plan), "");
  plan.inputs = {{dir_ / "d" / "other.txt", "-m"}};  // force never allows replacing an input
  EXPECT_NE(error_of(plan).find("is the same file as -m"), std::string::npos);
}

TEST_F(OutputPaths, PathsNotGivenAreIgnored) {
  OutputPlan plan;
  plan.inputs = {{"", "--kl-divergence"}, {dir_ / "d" / "in.txt", "-f"}};
  plan.outputs = {{"", "--save-logits"}};
  EXPECT_EQ(error_of(plan), "");
}

// How each kind of output is written (AtomicFileWriter follows this): a regular file or a new name
// through a temp file; a FIFO (also through a link) or this process's descriptor in place.
TEST_F(OutputPaths, OutputTargetsByKind) {
  using Kind = OutputTarget::Kind;
  EXPECT_EQ(output_target(dir_ / "d" / "in.txt").kind, Kind::kFile);
  EXPECT_EQ(output_target(dir_ / "d" / "new.bin").kind, Kind::kFile);
  EXPECT_EQ(output_target(dir_ / "d").kind, Kind::kDirectory);
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  fs::create_symlink("fifo", dir_ / "fifo-link");
  for (const char* name : {"fifo", "fifo-link"}) {
    const OutputTarget t = output_target(dir_ / name);
    EXPECT_EQ(t.kind, Kind::kInPlace) << name;
    EXPECT_EQ(t.descriptor, -1) << name;
    EXPECT_TRUE(written_in_place(dir_ / name)) << name;
  }
  const int fd = ::open((dir_ / "d" / "in.txt").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  for (const std::string& prefix :
       {std::string("/dev/fd/"), std::string("/proc/self/fd/"), "/proc/" + std::to_string(::getpid()) + "/fd/"}) {
    const OutputTarget t = output_target(prefix + std::to_string(fd));
    EXPECT_EQ(t.kind, Kind::kInPlace) << prefix;  // a regular file, but through the descriptor
    EXPECT_EQ(t.descriptor, fd) << prefix;
  }
  fs::create_symlink("/dev/fd/" + std::to_string(fd), dir_ / "fd-link");
  EXPECT_EQ(output_target(dir_ / "fd-link").descriptor, fd);
  ::close(fd);
  EXPECT_TRUE(names_stdout("/dev/stdout"));
  EXPECT_TRUE(names_stdout("/proc/self/fd/1"));
  EXPECT_FALSE(names_stdout("/dev/stderr"));
  EXPECT_EQ(report_stream({dir_ / "d" / "x.gguf", "/dev/stdout"}), stderr);
  EXPECT_EQ(report_stream({dir_ / "d" / "x.gguf"}), stdout);
}

}  // namespace
}  // namespace okapi
