// No verb writes over a file it reads. Each writing verb gets each of its output flags pointed at
// each of its inputs, spelled every way a path can name the same file (./x, d/../x, d//x,
// absolute, a symlink, a chain of symlinks, a hard link, through a linked directory; and the
// other way round, the input given through the link), and must exit 1 with an error and leave
// the input's bytes and links as they were. A control run per verb shows the same command line
// succeeds when the output is elsewhere. Sidecars (logits' OUT.json) need --force to replace a file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/mapped_file.hpp"
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
  expect_refused(train("a/train.csv", "a"), "the run's log 'a/train.csv' is the same file as --data");
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

}  // namespace
}  // namespace okapi
