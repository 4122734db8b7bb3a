// No verb writes over a file it reads. Each writing verb gets each of its output flags pointed at
// each of its inputs, spelled every way a path can name the same file (./x, d/../x, d//x,
// absolute, a symlink, a chain of symlinks, a hard link, through a linked directory; and the
// other way round, the input given through the link), and must exit 1 with an error and leave
// the input's bytes and links as they were. A control run per verb shows the same command line
// succeeds when the output is elsewhere. Sidecars (logits' OUT.json) need --force to replace a file.
// An output that is not a regular file (a device node, a FIFO, a socket, /dev/stdout; made in the
// test's own directory, never in /dev) is written in place: it is still what it was afterwards.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/mapped_file.hpp"
#include "core/output_paths.hpp"
#include "core/sha256.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;
using test::shell_quote;

// Builds args from (input path, output path) as the test spells them.
using ArgsOf = std::function<std::string(const std::string& input, const std::string& output)>;

class OutputSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = test::make_temp_dir("output-safety");
    fs::create_directories(work_ / "in" / "sub");
    fs::create_directories(work_ / "out");
    fs::create_directory_symlink("in", work_ / "linkdir");
    const fs::path models = test::repo_dir() / "models";
    fs::copy_file(models / "stories260K.gguf", work_ / "in" / "model.gguf");
    fs::copy_file(models / "stories260K.gguf", work_ / "in" / "model.json");  // a GGUF named like a sidecar
    fs::copy_file(models / "stories260K.bin", work_ / "in" / "ckpt.bin");
    fs::copy_file(models / "tok512.bin", work_ / "in" / "tok.bin");
    fs::copy_file(test::repo_dir() / "examples" / "story.txt", work_ / "in" / "text.txt");
  }
  void TearDown() override { fs::remove_all(work_); }

  test::CommandResult okapi(const std::string& args) const {
    return test::run_command("cd " + shell_quote(work_.string()) + " && " + shell_quote(test::cli_path().string()) +
                             " " + args);
  }

  void expect_success(const std::string& args) const {
    const auto r = okapi(args);
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  }

  void expect_refused(const std::string& args, const std::string& message) const {
    const auto r = okapi(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("okapi: error: "), std::string::npos) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  }

  // Every spelling of in/<name> from the working directory; the link spellings are created here.
  std::vector<std::string> spellings(const std::string& name) const {
    const fs::path target = work_ / "in" / name;
    if (!fs::exists(fs::symlink_status(work_ / ("link-" + name)))) {
      fs::create_symlink(fs::path("in") / name, work_ / ("link-" + name));
      fs::create_symlink("link-" + name, work_ / ("chain-" + name));
      fs::create_hard_link(target, work_ / ("hard-" + name));
    }
    return {"in/" + name,        "./in/" + name,    "in/sub/../" + name, "in//" + name,
            target.string(),     "link-" + name,    "chain-" + name,     "hard-" + name,
            "linkdir/" + name};
  }

  struct Snapshot {
    std::string sha256;
    std::vector<ino_t> inodes;  // what each spelling reaches
  };
  Snapshot snapshot(const std::string& name) const {
    const MappedFile file(work_ / "in" / name);
    Snapshot s{sha256_hex(file.data(), file.size()), {}};
    for (const auto& spelling : spellings(name)) {
      struct stat st{};
      s.inodes.push_back(::stat((work_ / spelling).c_str(), &st) == 0 ? st.st_ino : 0);
    }
    return s;
  }

  // Output pointed at input `name` in every spelling, both ways round for the linked ones.
  void expect_input_kept(const std::string& name, const ArgsOf& args) const {
    const Snapshot before = snapshot(name);
    const std::string plain = "in/" + name;
    for (const std::string& spelling : spellings(name)) {
      expect_refused(args(plain, spelling), "okapi: error:");
      if (spelling.find("in/") == std::string::npos) expect_refused(args(spelling, plain), "okapi: error:");
      const Snapshot after = snapshot(name);
      ASSERT_EQ(after.sha256, before.sha256) << name << " changed by output " << spelling;
      ASSERT_EQ(after.inodes, before.inodes) << name << " or a link to it was replaced by output " << spelling;
    }
  }

  fs::path work_;
};

const std::string kTrainShape =
    " --layers 1 --steps 1 --batch 1 --seq 16 --eval-windows 1 --sample-tokens 0 -t 1 -q";

std::string with_extension(const std::string& path, const std::string& extension) {
  return fs::path(path).replace_extension(extension).string();
}

TEST_F(OutputSafety, LogitsRefusesToWriteOverTheModel) {
  const auto logits = [](const std::string& model, const std::string& out) {
    return "logits -m " + shell_quote(model) + " --tokens 1,2 -o " + shell_quote(out);
  };
  expect_success(logits("in/model.gguf", "out/x.bin"));
  expect_input_kept("model.gguf", logits);
  // The JSON beside -o is an output too: a model named *.json is safe from -o *.bin, --force or not.
  expect_input_kept("model.json", [&](const std::string& model, const std::string& out) {
    return logits(model, with_extension(out, ".bin"));
  });
  expect_input_kept("model.json", [&](const std::string& model, const std::string& out) {
    return logits(model, with_extension(out, ".bin")) + " --force";
  });
  // -o x.json would be its own sidecar.
  expect_refused(logits("in/model.gguf", "out/self.json"), "are the same file");
}

TEST_F(OutputSafety, LogitsReplacesAnExistingSidecarOnlyWithForce) {
  std::ofstream(work_ / "out" / "y.json") << "precious";
  const auto args = "logits -m in/model.gguf --tokens 1,2 -o out/y.bin";
  expect_refused(args, "out/y.json' exists; pass --force to replace it");
  EXPECT_EQ(test::read_file(work_ / "out" / "y.json"), "precious");
  EXPECT_FALSE(fs::exists(work_ / "out" / "y.bin"));  // refused before any work
  expect_success(std::string(args) + " --force");
  EXPECT_EQ(nlohmann::json::parse(test::read_file(work_ / "out" / "y.json")).at("tokens").size(), 2u);
  // Now y.json is the JSON okapi wrote for y.bin: running the same command again replaces both.
  expect_success(std::string("logits -m in/model.gguf --tokens 1,2,3 -o out/y.bin"));
  EXPECT_EQ(nlohmann::json::parse(test::read_file(work_ / "out" / "y.json")).at("tokens").size(), 3u);
  // ...but it is not z.bin's: -o z.bin with a copy of it as z.json still needs --force.
  fs::copy_file(work_ / "out" / "y.json", work_ / "out" / "z.json");
  expect_refused("logits -m in/model.gguf --tokens 1 -o out/z.bin", "out/z.json' exists; pass --force to replace it");
}

TEST_F(OutputSafety, PerplexityRefusesToWriteOverItsInputs) {
  const auto ppl = [](const std::string& model, const std::string& text, const std::string& kl,
                      const std::string& out) {
    return "perplexity -m " + shell_quote(model) + " -f " + shell_quote(text) + " -c 16 --chunks 1" +
           (kl.empty() ? "" : " --kl-divergence " + shell_quote(kl)) + " --save-logits " + shell_quote(out);
  };
  expect_success(ppl("in/model.gguf", "in/text.txt", "", "in/kl.bin"));
  expect_success(ppl("in/model.gguf", "in/text.txt", "in/kl.bin", "out/p.bin"));
  expect_input_kept("model.gguf", [&](const std::string& in, const std::string& out) {
    return ppl(in, "in/text.txt", "in/kl.bin", out);
  });
  expect_input_kept("text.txt", [&](const std::string& in, const std::string& out) {
    return ppl("in/model.gguf", in, "in/kl.bin", out);
  });
  expect_input_kept("kl.bin", [&](const std::string& in, const std::string& out) {
    return ppl("in/model.gguf", "in/text.txt", in, out);
  });
}

TEST_F(OutputSafety, QuantizeAndConvertRefuseToWriteOverTheirInputs) {
  const auto quantize = [](const std::string& in, const std::string& out) {
    return "quantize " + shell_quote(in) + " " + shell_quote(out) + " Q8_0 -t 1";
  };
  expect_success(quantize("in/model.gguf", "out/q.gguf"));
  expect_input_kept("model.gguf", quantize);
  const auto convert = [](const std::string& ckpt, const std::string& tok, const std::string& out) {
    return "convert " + shell_quote(ckpt) + " --tokenizer " + shell_quote(tok) + " -o " + shell_quote(out);
  };
  expect_success(convert("in/ckpt.bin", "in/tok.bin", "out/c.gguf"));
  expect_input_kept("ckpt.bin", [&](const std::string& in, const std::string& out) {
    return convert(in, "in/tok.bin", out);
  });
  expect_input_kept("tok.bin", [&](const std::string& in, const std::string& out) {
    return convert("in/ckpt.bin", in, out);
  });
}

TEST_F(OutputSafety, SynthRefusesADirectoryAsItsOutput) {
  for (const std::string out : {"in", "./in/", "linkdir"}) {
    expect_refused("synth --preset stories15M --layers 1 --vocab 512 -t 1 -o " + out, "is a directory");
  }
  EXPECT_TRUE(fs::is_regular_file(work_ / "in" / "model.gguf"));
}

TEST_F(OutputSafety, TrainRefusesToWriteOverItsInputs) {
  const auto train = [](const std::string& text, const std::string& tok, const std::string& model,
                        const std::string& run, const std::string& exported) {
    return "train --data " + shell_quote(text) + " --tokenizer " + shell_quote(tok) + kTrainShape + " --out " +
           shell_quote(run) + " --eval-model " + shell_quote(model) + " --export " + shell_quote(exported);
  };
  expect_success(train("in/text.txt", "in/tok.bin", "in/model.gguf", "out/run", "out/e.gguf"));
  expect_input_kept("text.txt", [&](const std::string& in, const std::string& out) {
    return train(in, "in/tok.bin", "in/model.gguf", "out/run2", out);
  });
  expect_input_kept("tok.bin", [&](const std::string& in, const std::string& out) {
    return train("in/text.txt", in, "in/model.gguf", "out/run2", out);
  });
  expect_input_kept("model.gguf", [&](const std::string& in, const std::string& out) {
    return train("in/text.txt", "in/tok.bin", in, "out/run2", out);
  });
  // The run directory itself named as an input file.
  expect_input_kept("text.txt", [&](const std::string& in, const std::string& out) {
    return train(in, "in/tok.bin", "in/model.gguf", out, "out/e2.gguf");
  });
}

TEST_F(OutputSafety, TrainKeepsInputsOutOfTheFilesItWritesInsideTheRun) {
  const auto train = [](const std::string& text, const std::string& run) {
    return "train --data " + shell_quote(text) + " --tokenizer in/tok.bin" + kTrainShape + " --out " + shell_quote(run);
  };
  const std::string story = test::read_file(work_ / "in" / "text.txt");
  // Data where the log would go, as a file and as a symlink; data inside the token cache.
  fs::create_directories(work_ / "a");
  std::ofstream(work_ / "a" / "train.csv") << story;
  expect_refused(train("a/train.csv", "a"), "the run's log 'a/train.csv' is the same file as the training data");
  fs::create_directories(work_ / "b");
  fs::create_symlink("../in/text.txt", work_ / "b" / "loss.svg");
  expect_refused(train("in/text.txt", "b"), "the run's loss plot");
  fs::create_directories(work_ / "c" / "cache");
  std::ofstream(work_ / "c" / "cache" / "text.txt") << story;
  expect_refused(train("c/cache/text.txt", "c"), "lies inside the token cache");
  EXPECT_EQ(test::read_file(work_ / "a" / "train.csv"), story);
  EXPECT_EQ(test::read_file(work_ / "c" / "cache" / "text.txt"), story);

  // A resumed run must not export over its own checkpoints or log.
  expect_success(train("in/text.txt", "run"));
  const fs::path checkpoint = work_ / "run" / "checkpoints" / "step-00000001.ckpt";
  const std::string saved = test::read_file(checkpoint);
  expect_refused("train --resume run --steps 2 --export run/checkpoints/step-00000001.ckpt",
                 "lies inside the checkpoint folder");
  expect_refused("train --resume run --steps 2 --export ./run/train.csv", "are the same file");
  EXPECT_EQ(test::read_file(checkpoint), saved);
}

// Reads a FIFO to its end on a thread; finish() unblocks a reader still waiting for a writer
// (a verb that failed before opening it).
class FifoReader {
 public:
  explicit FifoReader(fs::path path) : path_(std::move(path)), thread_([this] {
    const int fd = ::open(path_.c_str(), O_RDONLY);
    if (fd < 0) return;
    char buffer[65536];
    ssize_t n = 0;
    while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) data_.append(buffer, static_cast<size_t>(n));
    ::close(fd);
  }) {}
  FifoReader(const FifoReader&) = delete;
  FifoReader& operator=(const FifoReader&) = delete;
  ~FifoReader() {
    if (thread_.joinable()) finish();
  }
  std::string finish() {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    thread_.join();
    return data_;
  }

 private:
  fs::path path_;
  std::string data_;
  std::thread thread_;
};

mode_t type_of(const fs::path& p) {
  struct stat st{};
  return ::lstat(p.c_str(), &st) == 0 ? (st.st_mode & S_IFMT) : 0;
}

// Names in `dir` that start with `prefix`: a temp file or a sidecar left beside a node shows here.
std::vector<std::string> names_starting(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

const std::string kQuantize = "quantize in/model.gguf {} Q8_0 -t 1";

std::string with_output(const std::string& pattern, const std::string& output) {
  std::string out = pattern;
  out.replace(out.find("{}"), 2, shell_quote(output));
  return out;
}

// Each writing verb, its output to be filled in at {}.
const std::vector<std::string>& writing_verbs() {
  static const std::vector<std::string> verbs = {
      kQuantize,
      "convert in/ckpt.bin --tokenizer in/tok.bin -o {}",
      "synth --preset stories15M --layers 1 --vocab 512 -t 1 -o {}",
      "compress -m in/model.gguf -o {} --method svd --ratio 0.15 --type f16",
      "train --data in/text.txt --tokenizer in/tok.bin" + kTrainShape + " --out out/run-fifo --export {}",
  };
  return verbs;
}

TEST_F(OutputSafety, WritersWriteIntoAFifoInPlace) {
  const fs::path fifo = work_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  fs::create_symlink("fifo", work_ / "fifo-link");
  for (const std::string& pattern : writing_verbs()) {
    for (const std::string output : {"fifo", "fifo-link"}) {
      fs::remove_all(work_ / "out" / "run-fifo");
      FifoReader reader(fifo);
      const auto r = okapi(with_output(pattern, output));
      const std::string data = reader.finish();
      EXPECT_EQ(r.exit_code, 0) << pattern << " -> " << output << "\n" << r.output;
      EXPECT_EQ(data.substr(0, 4), "GGUF") << pattern << " -> " << output << ": " << data.size() << " bytes";
      EXPECT_EQ(type_of(fifo), S_IFIFO) << pattern << " replaced the FIFO";
      EXPECT_EQ(type_of(work_ / "fifo-link"), S_IFLNK) << pattern << " replaced the link";
      EXPECT_EQ(names_starting(work_, "fifo"), (std::vector<std::string>{"fifo", "fifo-link"})) << pattern;
    }
  }
  // logits: the floats go into the FIFO; there is no JSON beside a FIFO.
  FifoReader reader(fifo);
  const auto r = okapi("logits -m in/model.gguf --tokens 1,2 -o fifo");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(reader.finish().size(), 2u * 512u * sizeof(float));
  EXPECT_EQ(type_of(fifo), S_IFIFO);
  EXPECT_EQ(names_starting(work_, "fifo"), (std::vector<std::string>{"fifo", "fifo-link"}));
  // A FIFO where logits' JSON goes (with --force, as for any existing sidecar): written in place.
  ASSERT_EQ(::mkfifo((work_ / "out" / "f.json").c_str(), 0600), 0);
  FifoReader json(work_ / "out" / "f.json");
  expect_success("logits -m in/model.gguf --tokens 1,2 -o out/f.bin --force");
  EXPECT_EQ(nlohmann::json::parse(json.finish()).at("tokens").size(), 2u);
  EXPECT_EQ(type_of(work_ / "out" / "f.json"), S_IFIFO);
  // A directory is still refused, as before.
  for (const std::string& pattern : writing_verbs()) {
    fs::remove_all(work_ / "out" / "run-fifo");
    expect_refused(with_output(pattern, "out"), "is a directory");
  }
  expect_refused("logits -m in/model.gguf --tokens 1 -o out", "is a directory");
  EXPECT_TRUE(fs::is_directory(work_ / "out"));
}

// A private twin of /dev/null, made here (mknod needs privileges: skipped without them).
TEST_F(OutputSafety, WritersWriteIntoADeviceNodeInPlace) {
  const fs::path node = work_ / "null";
  if (::mknod(node.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) != 0) {
    if (errno == EPERM) GTEST_SKIP() << "mknod needs privileges here";
    FAIL() << "mknod: " << std::strerror(errno);
  }
  fs::create_symlink("null", work_ / "null-link");
  std::vector<std::string> commands;
  for (const std::string& pattern : writing_verbs()) {
    commands.push_back(with_output(pattern, "null"));
    commands.push_back(with_output(pattern, "null-link"));
  }
  commands.push_back("logits -m in/model.gguf --tokens 1,2 -o null");
  for (const std::string& command : commands) {
    fs::remove_all(work_ / "out" / "run-fifo");
    expect_success(command);
    struct stat st{};
    ASSERT_EQ(::lstat(node.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << command << " replaced the device node";
    EXPECT_EQ(st.st_rdev, ::makedev(1, 3)) << command;
    EXPECT_EQ(type_of(work_ / "null-link"), S_IFLNK) << command << " replaced the link";
    EXPECT_EQ(names_starting(work_, "null"), (std::vector<std::string>{"null", "null-link"})) << command;
  }
}

// A socket nobody listens on cannot be written: an error, and the socket stays.
TEST_F(OutputSafety, ASocketIsNeverReplaced) {
  const fs::path path = work_ / "sock";
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.native().size(), sizeof(address.sun_path));
  std::memcpy(address.sun_path, path.c_str(), path.native().size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0) << std::strerror(errno);
  for (const std::string& pattern : {kQuantize, writing_verbs()[1]}) {
    expect_refused(with_output(pattern, "sock"), "cannot write 'sock'");
    EXPECT_EQ(type_of(path), S_IFSOCK) << pattern << " replaced the socket";
    EXPECT_EQ(names_starting(work_, "sock"), std::vector<std::string>{"sock"}) << pattern;
  }
  ::close(fd);
}

// -o /dev/stdout writes the same bytes as a file would, into the file or pipe stdout is; the
// verb's report then goes to stderr.
TEST_F(OutputSafety, DevStdoutCarriesTheFile) {
  const auto shell = [&](const std::string& line) {
    // Braces: the helper's 2>&1 applies to the group, so stderr stays out of the redirected stdout.
    return test::run_command("cd " + shell_quote(work_.string()) + " && { " + line + "; }");
  };
  const std::string cli = shell_quote(test::cli_path().string());
  // The guard for a root CI machine: a writer that took /dev/stdout for a file would rename a
  // temp file over the system's /dev/stdout link; a build that does not see it as descriptor 1
  // stops here, before any verb is pointed at it. (/dev/fd/1 is safe either way: no file can be
  // created in /proc/self/fd.)
  ASSERT_EQ(output_target("/dev/stdout").descriptor, STDOUT_FILENO);
  ASSERT_EQ(output_target("/dev/fd/1").descriptor, STDOUT_FILENO);
  for (const std::string& pattern : {kQuantize, writing_verbs()[1], writing_verbs()[2], writing_verbs()[3]}) {
    expect_success(with_output(pattern, "out/file.gguf"));
    const std::string expected = test::read_file(work_ / "out" / "file.gguf");
    ASSERT_EQ(expected.substr(0, 4), "GGUF");
    for (const std::string output : {"/dev/fd/1", "/dev/stdout"}) {
      for (const std::string redirect : {"> out/std.gguf", "| cat > out/std.gguf"}) {
        const auto r = shell(cli + " " + with_output(pattern, output) + " " + redirect);
        EXPECT_EQ(r.exit_code, 0) << pattern << " " << output << " " << redirect << "\n" << r.output;
        EXPECT_TRUE(test::read_file(work_ / "out" / "std.gguf") == expected) << pattern << " " << output << redirect;
      }
    }
  }
  // >> appends through the descriptor: what was in the file stays in front.
  std::ofstream(work_ / "out" / "both.bin") << "head";
  const auto r = shell(cli + " logits -m in/model.gguf --tokens 1,2 -o /proc/self/fd/1 >> out/both.bin");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string both = test::read_file(work_ / "out" / "both.bin");
  EXPECT_EQ(both.size(), 4 + 2u * 512u * sizeof(float));
  EXPECT_EQ(both.substr(0, 4), "head");
}

// The message names the file asked for and its missing directory, never a temp file.
TEST_F(OutputSafety, AMissingOrClosedDirectoryIsNamed) {
  for (const std::string& pattern : writing_verbs()) {
    const auto r = okapi(with_output(pattern, "nodir/sub/x.gguf"));
    EXPECT_EQ(r.exit_code, 1) << pattern << "\n" << r.output;
    EXPECT_NE(r.output.find("cannot write 'nodir/sub/x.gguf': directory 'nodir/sub' does not exist"),
              std::string::npos)
        << pattern << "\n" << r.output;
    EXPECT_EQ(r.output.find(".tmp."), std::string::npos) << pattern << "\n" << r.output;
  }
  expect_refused("logits -m in/model.gguf --tokens 1 -o nodir/x.bin",
                 "cannot write 'nodir/x.bin': directory 'nodir' does not exist");
  if (::geteuid() == 0) return;  // root writes into any directory
  fs::create_directories(work_ / "closed");
  fs::permissions(work_ / "closed", fs::perms::owner_read | fs::perms::owner_exec);
  for (const std::string& pattern : {kQuantize, writing_verbs()[1], writing_verbs()[2]}) {
    const auto r = okapi(with_output(pattern, "closed/x.gguf"));
    EXPECT_EQ(r.exit_code, 1) << pattern << "\n" << r.output;
    EXPECT_NE(r.output.find("cannot write 'closed/x.gguf': permission denied"), std::string::npos)
        << pattern << "\n" << r.output;
    EXPECT_EQ(r.output.find(".tmp."), std::string::npos) << pattern << "\n" << r.output;
  }
  fs::permissions(work_ / "closed", fs::perms::owner_all);
}

}  // namespace
}  // namespace okapi
