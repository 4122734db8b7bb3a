// `okapi train --init-from`: models/stories260K.gguf compressed by okapi compress (svd, ratio 0.3)
// loads as a trainer whose held-out loss is the engine's, trains both factors of every low-rank
// projection, exports a file that is still compressed (same factor shapes, okapi.compress.* keys)
// and that the engine scores as the trainer does, resumes bit for bit, and refuses files and flags
// it cannot honour with a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <string>

#include "compress/low_rank.hpp"
#include "core/error.hpp"
#include "format/gguf.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"
#include "train/checkpoint.hpp"
#include "train/export.hpp"
#include "train/init_from.hpp"
#include "train/trainer.hpp"

namespace okapi::train {
namespace {

namespace fs = std::filesystem;

const fs::path kDense = test::repo_dir() / "models" / "stories260K.gguf";

class InitFrom : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("init-from");
    const std::string story = test::read_file(test::repo_dir() / "examples" / "story.txt");
    text_ = dir_ / "text.txt";
    std::ofstream(text_) << story << "\n" << story << "\n" << story << "\n" << story;
    compressed_ = dir_ / "compressed.gguf";
    compress::CompressOptions options;
    options.method = "svd";
    options.ratio = 0.3;
    compress::compress_model(gguf::File::open(kDense), compressed_, options);
  }
  // A suite set-up that threw would otherwise only skip every test.
  void SetUp() override { ASSERT_TRUE(fs::exists(compressed_)) << "the compressed model of the suite set-up is missing"; }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static TrainOptions options(const fs::path& model, const std::string& run) {
    TrainOptions o;
    o.data_files = {text_};
    o.init_from = model;
    o.hyper.steps = 8;
    o.hyper.batch = 4;
    o.hyper.seq = 64;
    o.hyper.lr = 1e-3f;
    o.eval_every = 0;
    o.eval_windows = 4;
    o.sample_tokens = 0;
    o.out_dir = dir_ / run;
    o.threads = 2;
    o.quiet = true;
    return o;
  }

  // `source` rewritten by `edit` (which sees the writer after the metadata and every tensor were
  // copied, except those `keep` refuses) into dir_/name.
  static fs::path rewrite(const std::string& name, const std::function<bool(const gguf::TensorInfo&)>& keep,
                          const std::function<void(gguf::Writer&)>& edit, const fs::path& source = kDense) {
    const gguf::File file = gguf::File::open(source);
    gguf::Writer w;
    w.copy_metadata(file);
    for (const gguf::TensorInfo& t : file.tensors()) {
      if (keep(t)) w.add_tensor_view(t.name, t.type, t.shape, t.bytes());
    }
    edit(w);
    const fs::path out = dir_ / name;
    w.write(out);
    return out;
  }

  static inline fs::path dir_, text_, compressed_;
};

double engine_ppl(const fs::path& model, const Trainer& t) {
  return std::exp(evaluate_gguf(model, t.eval_windows(), 2).mean_loss);
}

TEST_F(InitFrom, TheLoadedModelScoresAsTheEngineDoes) {
  for (const fs::path& model : {kDense, compressed_}) {
    Trainer t(options(model, "score-" + model.stem().string()), nullptr);
    const ModelConfig& c = t.config();
    EXPECT_EQ(c.dim, 64);
    EXPECT_EQ(c.hidden_dim, 172);
    EXPECT_EQ(c.n_layers, 5);
    EXPECT_EQ(c.n_heads, 8);
    EXPECT_EQ(c.n_kv_heads, 4);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.seq_len, 2048);  // the file's context_length
    EXPECT_FALSE(c.tied_embeddings);  // it has an output.weight
    const gguf::File file = gguf::File::open(model);
    if (model == compressed_) {
      EXPECT_EQ(c.low_rank.size(), 35u);  // ratio 0.3 factors every projection of this model
      for (const LowRankProjection& lr : c.low_rank) {
        EXPECT_EQ(lr.rank, file.tensor(lr.name + ".lr_in.weight").shape[1]) << lr.name;
      }
      EXPECT_EQ(t.export_metadata().size(), 4u);  // okapi.compress.method, ranks, ratio, allocation_parameter
    } else {
      EXPECT_TRUE(c.low_rank.empty());
    }
    // The parameters are the file's tensors, and the trainer's loss is the engine's.
    const ParameterLayout layout(c);
    const TensorSlot& slot = layout.find(model == compressed_ ? "blk.2.ffn_up.lr_out.weight" : "blk.2.ffn_up.weight");
    EXPECT_EQ(std::memcmp(t.params().data() + slot.offset, file.tensor(slot.name).data, slot.size() * sizeof(float)), 0);
    const double trainer_ppl = std::exp(t.evaluate());
    EXPECT_NEAR(engine_ppl(model, t) / trainer_ppl, 1.0, 1e-4) << model;
  }
}

TEST_F(InitFrom, FineTuningTrainsBothFactorsAndExportsACompressedModel) {
  Trainer t(options(compressed_, "tune"), nullptr);
  const std::vector<float> before(t.params().begin(), t.params().end());
  const double loss_before = t.evaluate();
  const TrainResult r = t.run();
  ASSERT_TRUE(r.last_eval_loss);
  EXPECT_LT(*r.last_eval_loss, loss_before - 0.1);
  const ParameterLayout layout(t.config());
  for (const char* name : {"blk.0.attn_q.lr_in.weight", "blk.0.attn_q.lr_out.weight", "blk.4.ffn_down.lr_in.weight",
                           "blk.4.ffn_down.lr_out.weight"}) {
    const TensorSlot& s = layout.find(name);
    EXPECT_FALSE(std::equal(before.begin() + static_cast<std::ptrdiff_t>(s.offset),
                            before.begin() + static_cast<std::ptrdiff_t>(s.offset + s.size()),
                            t.params().begin() + static_cast<std::ptrdiff_t>(s.offset)))
        << name << " did not change";
  }

  const fs::path out = dir_ / "tuned.gguf";
  ExportOptions eo;
  eo.metadata = t.export_metadata();
  export_gguf(t.config(), t.params(), t.tokenizer(), out, eo);
  const gguf::File src = gguf::File::open(compressed_), exported = gguf::File::open(out);
  EXPECT_EQ(exported.tensors().size(), src.tensors().size());
  for (const gguf::TensorInfo& s : src.tensors()) {
    const gguf::TensorInfo* e = exported.find_tensor(s.name);
    ASSERT_NE(e, nullptr) << s.name;
    EXPECT_EQ(e->shape, s.shape) << s.name;
  }
  EXPECT_EQ(exported.find_tensor("blk.1.attn_v.weight"), nullptr);
  EXPECT_EQ(exported.at("okapi.compress.method").as_string(), "svd");
  EXPECT_EQ(exported.at("okapi.compress.ratio").as_double(), src.at("okapi.compress.ratio").as_double());
  EXPECT_NEAR(engine_ppl(out, t) / std::exp(*r.last_eval_loss), 1.0, 1e-4);
  // Read back, the export is the trainer's state exactly (f32).
  const SourceModel again = load_source_model(out, 0);
  EXPECT_EQ(again.params, std::vector<float>(t.params().begin(), t.params().end()));
  const auto run = test::run_cli("run -m " + out.string() + " -p \"Once upon a time\" -n 8 --seed 1");
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST_F(InitFrom, AResumedFineTuningRunIsBitIdentical) {
  Trainer straight(options(compressed_, "straight"), nullptr);
  straight.run();
  TrainOptions o = options(compressed_, "split");
  o.stop_after = 3;
  Trainer(o, nullptr).run();
  const ResumePoint point = load_newest_good_checkpoint(o.out_dir, [](const std::string&) {});
  EXPECT_EQ(point.checkpoint.meta.step, 3);
  EXPECT_EQ(point.checkpoint.meta.config.low_rank.size(), 35u);
  EXPECT_EQ(point.checkpoint.meta.init_from, fs::absolute(compressed_).string());
  EXPECT_EQ(point.checkpoint.meta.export_metadata.size(), 4u);
  TrainOptions resume = o;
  resume.init_from.clear();
  resume.tokenizer.clear();
  resume.stop_after = 0;
  Trainer resumed(resume, &point.checkpoint);
  EXPECT_EQ(resumed.export_metadata().size(), 4u);
  resumed.run();
  EXPECT_EQ(std::vector<float>(resumed.params().begin(), resumed.params().end()),
            std::vector<float>(straight.params().begin(), straight.params().end()));
}

// An in-factor shared by two projections (okapi.lr_in.NAME): the model is the one with the factor
// copied into both, and the export keeps it shared.
TEST_F(InitFrom, ASharedInFactorLoadsTrainsAndExportsShared) {
  const gguf::File src = gguf::File::open(compressed_);
  const gguf::TensorInfo& k_in = src.tensor("blk.0.attn_k.lr_in.weight");
  const int64_t rank = k_in.shape[1];
  std::vector<float> v_out(static_cast<size_t>(rank * 32));
  for (size_t i = 0; i < v_out.size(); ++i) v_out[i] = 0.05f * static_cast<float>(static_cast<int>(i % 7) - 3);
  const std::vector<uint8_t> v_out_bytes(reinterpret_cast<const uint8_t*>(v_out.data()),
                                         reinterpret_cast<const uint8_t*>(v_out.data() + v_out.size()));
  const auto keep = [](const gguf::TensorInfo& t) { return t.name.rfind("blk.0.attn_v.", 0) != 0; };
  const fs::path shared = rewrite("shared.gguf", keep, [&](gguf::Writer& w) {
    w.set("okapi.lr_in.blk.0.attn_v", "blk.0.attn_k.lr_in.weight");
    w.add_tensor("blk.0.attn_v.lr_out.weight", DType::F32, {rank, 32}, v_out_bytes);
  }, compressed_);
  const fs::path copied = rewrite("copied.gguf", keep, [&](gguf::Writer& w) {
    w.add_tensor_view("blk.0.attn_v.lr_in.weight", k_in.type, k_in.shape, k_in.bytes());
    w.add_tensor("blk.0.attn_v.lr_out.weight", DType::F32, {rank, 32}, v_out_bytes);
  }, compressed_);
  Trainer a(options(shared, "shared"), nullptr), b(options(copied, "copied"), nullptr);
  ASSERT_EQ(a.config().find_low_rank("blk.0.attn_v")->in_factor, "blk.0.attn_k.lr_in.weight");
  EXPECT_EQ(a.parameter_count() + k_in.n_elements(), b.parameter_count());
  EXPECT_EQ(a.evaluate(), b.evaluate());
  EXPECT_NEAR(engine_ppl(copied, b), std::exp(b.evaluate()), 1e-3);
  a.run();
  const fs::path out = dir_ / "shared-tuned.gguf";
  export_gguf(a.config(), a.params(), a.tokenizer(), out, ExportOptions{});
  const gguf::File exported = gguf::File::open(out);
  EXPECT_EQ(exported.at("okapi.lr_in.blk.0.attn_v").as_string(), "blk.0.attn_k.lr_in.weight");
  EXPECT_EQ(exported.find_tensor("blk.0.attn_v.lr_in.weight"), nullptr);
  EXPECT_EQ(load_source_model(out, 0).params, std::vector<float>(a.params().begin(), a.params().end()));
}

// --tokenizer replaces the model's own vocabulary; its size must be the model's.
TEST_F(InitFrom, AGivenTokenizerMustMatchTheModelsVocabulary) {
  TrainOptions o = options(compressed_, "tokenizer");
  o.tokenizer = test::repo_dir() / "models" / "tok512.bin";
  Trainer trainer(o, nullptr);
  EXPECT_TRUE(trainer.tokenizer().llama2c.has_value());
  EXPECT_EQ(trainer.tokenizer().vocab_size(), 512);
  // The same model with a 448-token vocabulary (embedding, output and its own tokenizer arrays cut
  // to 448, so the file itself is consistent): the given 512-token tokenizer no longer fits.
  const auto keep = [](const gguf::TensorInfo& t) { return t.name != "token_embd.weight" && t.name != "output.weight"; };
  const gguf::File dense = gguf::File::open(kDense);
  const fs::path small = rewrite("small-vocab.gguf", keep, [&](gguf::Writer& w) {
    for (const char* name : {"token_embd.weight", "output.weight"}) {
      const gguf::TensorInfo& t = dense.tensor(name);
      w.add_tensor_view(name, t.type, {t.shape[0], 448}, t.bytes().first(static_cast<size_t>(448 * t.shape[0] * 4)));
    }
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
      const gguf::Value* value = dense.find(key);
      if (value == nullptr) continue;
      gguf::Array cut = value->as_array();
      cut.items.resize(448);
      w.set(key, gguf::Value(std::move(cut)));
    }
  });
  o = options(small, "small-vocab");
  o.tokenizer = test::repo_dir() / "models" / "tok512.bin";
  try {
    Trainer bad(o, nullptr);
    ADD_FAILURE() << "a 512-token tokenizer was accepted for a 448-token model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has 512 tokens but the model to fine-tune has 448"), std::string::npos)
        << e.what();
  }
}

std::string error_of(const fs::path& model) {
  try {
    load_source_model(model, 0);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(InitFrom, FilesTheTrainerCannotRepresentAreClearErrors) {
  const auto all = [](const gguf::TensorInfo&) { return true; };
  EXPECT_NE(error_of(dir_ / "missing.gguf").find("is not a readable file"), std::string::npos);
  for (const char* arch : {"qwen2", "bitnet"}) {
    const fs::path other = rewrite(std::string(arch) + ".gguf", all, [&](gguf::Writer& w) {
      w.set("general.architecture", arch);
    });
    EXPECT_NE(error_of(other).find(fmt::format("architecture '{}' is not one the trainer can fine-tune", arch)),
              std::string::npos)
        << error_of(other);
  }
  const fs::path no_k = rewrite("no-k.gguf", [](const gguf::TensorInfo& t) { return t.name != "blk.3.attn_k.weight"; },
                                [](gguf::Writer&) {});
  EXPECT_NE(error_of(no_k).find("tensor 'blk.3.attn_k.weight' is missing"), std::string::npos) << error_of(no_k);
  const std::vector<uint8_t> zeros(64 * sizeof(float), 0);
  const fs::path bias = rewrite("bias.gguf", all, [&](gguf::Writer& w) {
    w.add_tensor("blk.0.attn_q.bias", DType::F32, {64}, zeros);
  });
  EXPECT_NE(error_of(bias).find("tensor 'blk.0.attn_q.bias' has no place"), std::string::npos) << error_of(bias);
  const fs::path shape = rewrite("shape.gguf", [](const gguf::TensorInfo& t) { return t.name != "blk.1.ffn_norm.weight"; },
                                 [&](gguf::Writer& w) {
                                   w.add_tensor("blk.1.ffn_norm.weight", DType::F32, {32},
                                                std::vector<uint8_t>(32 * sizeof(float), 0));
                                 });
  EXPECT_NE(error_of(shape).find("tensor 'blk.1.ffn_norm.weight' has shape [32]"), std::string::npos)
      << error_of(shape);
  const fs::path no_out = rewrite("no-lr-out.gguf", [](const gguf::TensorInfo& t) {
    return t.name != "blk.2.ffn_gate.lr_out.weight";
  }, [](gguf::Writer&) {}, compressed_);
  EXPECT_NE(error_of(no_out).find("tensor 'blk.2.ffn_gate.lr_out.weight' is missing"), std::string::npos)
      << error_of(no_out);
}

TEST_F(InitFrom, TheCliRefusesFlagsThatWouldChangeTheModel) {
  const std::string base = "train --init-from " + compressed_.string() + " --data " + text_.string() + " --out " +
                           (dir_ / "cli").string() + " ";
  for (const std::string flag : {"--dim 32", "--layers 2", "--config stories15M", "--hidden 64", "--ternary",
                                 "--init llama2c"}) {
    const auto r = test::run_cli(base + flag);
    EXPECT_EQ(r.exit_code, 2) << flag << "\n" << r.output;
    EXPECT_NE(r.output.find("okapi: error: train: " + flag.substr(0, flag.find(' ')) + " conflicts with --init-from"),
              std::string::npos)
        << r.output;
  }
  const auto resume = test::run_cli(base + "--resume " + (dir_ / "cli").string());
  EXPECT_EQ(resume.exit_code, 2) << resume.output;
  EXPECT_NE(resume.output.find("--init-from starts a new run"), std::string::npos) << resume.output;
  const auto missing = test::run_cli("train --init-from " + (dir_ / "nope.gguf").string() + " --data " +
                                     text_.string() + " --out " + (dir_ / "cli").string());
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("okapi: error: source model '" + (dir_ / "nope.gguf").string() +
                                "' is not a readable file (--init-from)"),
            std::string::npos)
      << missing.output;
  // The source model is an input: the export may not replace it.
  const auto overwrite = test::run_cli(base + "--steps 1 --export " + compressed_.string());
  EXPECT_EQ(overwrite.exit_code, 1) << overwrite.output;
  EXPECT_NE(overwrite.output.find("would replace the input"), std::string::npos) << overwrite.output;
  EXPECT_TRUE(fs::exists(compressed_));
}

}  // namespace
}  // namespace okapi::train
