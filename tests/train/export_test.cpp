// Export: the engine, loading the exported GGUF, scores the held-out windows as the trainer does:
// float (llama, F32) within 0.1% in perplexity, ternary (bitnet, TQ2_0 / TQ1_0 / F32 codes with
// `.scale` tensors) within 0.5%. The files load in `okapi run` too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"
#include "train/export.hpp"
#include "train/trainer.hpp"

namespace okapi::train {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  fs::path dir;
  std::unique_ptr<Trainer> trainer;
};

// A few steps of training on examples/story.txt, so the weights are no longer the initialization.
Fixture train_small(const std::string& tag, ConfigOverrides overrides, bool ternary) {
  Fixture f{test::make_temp_dir(tag), nullptr};
  const std::string story = test::read_file(test::repo_dir() / "examples" / "story.txt");
  std::ofstream(f.dir / "text.txt") << story << "\n" << story << "\n" << story << "\n" << story;
  TrainOptions o;
  o.data_files = {f.dir / "text.txt"};
  o.tokenizer = test::repo_dir() / "models" / "tok512.bin";
  o.overrides = overrides;
  o.ternary = ternary;
  o.hyper.steps = 8;
  o.hyper.batch = 2;
  o.hyper.seq = 64;
  o.hyper.lr = 3e-3f;
  o.eval_every = 0;
  o.eval_windows = 4;
  o.sample_tokens = 0;
  o.out_dir = f.dir / "run";
  o.threads = 2;
  o.quiet = true;
  f.trainer = std::make_unique<Trainer>(o, nullptr);
  f.trainer->run();
  return f;
}

double ppl_ratio(Trainer& trainer, const fs::path& model) {
  const double trainer_loss = trainer.evaluate();
  const EngineEval e = evaluate_gguf(model, trainer.eval_windows(), 2);
  EXPECT_EQ(e.scored, trainer.eval_windows().count * trainer.eval_windows().seq);
  return std::exp(e.mean_loss - trainer_loss);
}

TEST(TrainExport, FloatModelMatchesTheTrainerAndRuns) {
  ConfigOverrides o;
  o.n_layers = 2;
  Fixture f = train_small("export-float", o, false);
  Trainer& t = *f.trainer;
  const fs::path model = f.dir / "model.gguf";
  const ExportSummary s = export_gguf(t.config(), t.params(), t.tokenizer(), model, ExportOptions{});
  EXPECT_EQ(s.architecture, "llama");
  const gguf::File file = gguf::File::open(model);
  EXPECT_EQ(file.architecture(), "llama");
  EXPECT_EQ(file.at("llama.block_count").as_int(), 2);
  EXPECT_EQ(file.at("llama.context_length").as_int(), t.config().seq_len);
  EXPECT_EQ(file.at("tokenizer.ggml.tokens").as_array().items.size(), 512u);
  EXPECT_EQ(file.tensor("blk.1.ffn_down.weight").type, DType::F32);
  EXPECT_EQ(file.find_tensor("output.weight"), nullptr);  // tied embeddings
  EXPECT_NEAR(ppl_ratio(t, model), 1.0, 1e-3);

  const fs::path half = f.dir / "model-f16.gguf";
  export_gguf(t.config(), t.params(), t.tokenizer(), half, ExportOptions{DType::F16, "tiny"});
  EXPECT_EQ(gguf::File::open(half).tensor("blk.0.attn_q.weight").type, DType::F16);
  EXPECT_NEAR(ppl_ratio(t, half), 1.0, 5e-3);

  const auto run = test::run_cli("run -m " + model.string() + " -p \"Once upon a time\" -n 16 --seed 1");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("Once upon a time"), std::string::npos) << run.output;
  EXPECT_THROW(export_gguf(t.config(), t.params(), t.tokenizer(), f.dir / "x.gguf", ExportOptions{DType::TQ2_0, ""}),
               Error);
  fs::remove_all(f.dir);
}

TEST(TrainExport, TernaryModelPacksTq2AndTq1AndMatchesTheTrainer) {
  ConfigOverrides o;
  o.dim = 256;
  o.hidden_dim = 512;
  o.n_layers = 1;
  o.n_heads = 4;
  Fixture f = train_small("export-ternary", o, true);
  Trainer& t = *f.trainer;
  for (DType type : {DType::TQ2_0, DType::TQ1_0, DType::F32}) {
    const fs::path model = f.dir / (std::string(dtype_name(type)) + ".gguf");
    const ExportSummary s = export_gguf(t.config(), t.params(), t.tokenizer(), model, ExportOptions{type, ""});
    EXPECT_EQ(s.architecture, "bitnet");
    EXPECT_EQ(s.ternary_packed + s.ternary_fallback, 7);
    EXPECT_EQ(s.ternary_packed, type == DType::F32 ? 0 : 7);
    const gguf::File file = gguf::File::open(model);
    EXPECT_EQ(file.tensor("blk.0.ffn_down.weight").type, type);
    EXPECT_EQ(file.tensor("blk.0.attn_sub_norm.weight").type, DType::F32);
    // The scale is the absmean the trainer's ternarization uses.
    const ParameterLayout layout(t.config());
    const TensorSlot& slot = layout.find("blk.0.attn_q.weight");
    std::vector<int8_t> codes(slot.size());
    const float scale = ternarize(t.params().subspan(slot.offset, slot.size()), codes);
    float stored = 0;
    std::memcpy(&stored, file.tensor("blk.0.attn_q.scale").data, sizeof(stored));
    EXPECT_EQ(stored, scale);
    EXPECT_NEAR(ppl_ratio(t, model), 1.0, 5e-3) << dtype_name(type);
  }
  const auto run = test::run_cli("run -m " + (f.dir / "tq2_0.gguf").string() + " -p \"Once\" -n 8 --seed 1");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THROW(export_gguf(t.config(), t.params(), t.tokenizer(), f.dir / "x.gguf", ExportOptions{DType::F16, ""}),
               Error);
  fs::remove_all(f.dir);
}

TEST(TrainExport, TernaryRowsThatDoNotFit256BlocksFallBackToF32Codes) {
  ConfigOverrides o;
  o.n_layers = 1;  // stories260K: dim 64, hidden 172
  Fixture f = train_small("export-fallback", o, true);
  Trainer& t = *f.trainer;
  const fs::path model = f.dir / "model.gguf";
  const ExportSummary s = export_gguf(t.config(), t.params(), t.tokenizer(), model, ExportOptions{DType::TQ2_0, ""});
  EXPECT_EQ(s.ternary_packed, 0);
  EXPECT_EQ(s.ternary_fallback, 7);
  const gguf::File file = gguf::File::open(model);
  const auto& q = file.tensor("blk.0.attn_q.weight");
  ASSERT_EQ(q.type, DType::F32);
  const float* values = reinterpret_cast<const float*>(q.data);
  for (int64_t i = 0; i < q.n_elements(); ++i) {
    ASSERT_TRUE(values[i] == -1.0f || values[i] == 0.0f || values[i] == 1.0f) << i << ": " << values[i];
  }
  EXPECT_NEAR(ppl_ratio(t, model), 1.0, 5e-3);
  fs::remove_all(f.dir);
}

}  // namespace
}  // namespace okapi::train
