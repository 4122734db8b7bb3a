// The whole model's gradient (every parameter) against central finite differences in double, on
// a tiny config: tied and untied, MHA and GQA, float and ternary (b1.58 with the straight-through
// estimator: the finite differences run on the surrogate with frozen quantization offsets, see
// Network::QuantOffsets). Then the float model (the AVX2 path) against the double gradient.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "grad_check.hpp"
#include "train/network.hpp"

namespace okapi::test {
namespace {

using namespace okapi::train;

ModelConfig tiny_config(bool tied, int64_t n_kv_heads, bool ternary) {
  ModelConfig c;
  c.name = "tiny";
  c.dim = 16;
  c.hidden_dim = 24;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = n_kv_heads;
  c.vocab_size = 32;
  c.seq_len = 8;
  c.tied_embeddings = tied;
  c.ternary = ternary;
  return c;
}

// Xavier weights, and norm weights away from 1 so that their gradients are generic.
std::vector<double> tiny_params(const ParameterLayout& layout, uint64_t seed) {
  std::vector<float> p(layout.total());
  initialize(layout, Init::Xavier, seed, p);
  const std::vector<double> noise = random_vector(p.size(), static_cast<uint32_t>(seed), -0.3, 0.3);
  std::vector<double> out(p.begin(), p.end());
  for (const TensorSlot& s : layout.slots()) {
    if (s.role != TensorRole::Norm) continue;
    for (size_t i = s.offset; i < s.offset + s.size(); ++i) out[i] += noise[i];
  }
  return out;
}

struct Batch {
  int64_t batch = 2, seq = 8;
  std::vector<int32_t> tokens, targets;
};

Batch tiny_batch(int64_t vocab) {
  Batch b;
  for (int64_t i = 0; i < b.batch * b.seq; ++i) {
    b.tokens.push_back(static_cast<int32_t>((i * 7 + 3) % vocab));
    b.targets.push_back(static_cast<int32_t>((i * 5 + 1) % vocab));
  }
  b.targets[5] = -1;  // ignored
  return b;
}

void check_model(const ModelConfig& config) {
  Network<double> net(config, nullptr);
  const ParameterLayout& layout = net.layout();
  std::vector<double> params = tiny_params(layout, 11);
  const Batch b = tiny_batch(config.vocab_size);
  if (config.ternary) net.set_quant_offsets(Network<double>::QuantOffsets::Record);
  std::vector<double> grads(layout.total(), 0.0);
  const double loss0 =
      net.forward_backward(params.data(), b.tokens.data(), b.targets.data(), b.batch, b.seq, 1.0, grads.data());
  EXPECT_TRUE(std::isfinite(loss0));
  if (config.ternary) net.set_quant_offsets(Network<double>::QuantOffsets::Replay);
  const auto loss = [&] {
    return net.forward_loss(params.data(), b.tokens.data(), b.targets.data(), b.batch, b.seq);
  };
  EXPECT_NEAR(loss(), loss0, 1e-12);  // the surrogate equals the quantized model at the start
  expect_gradient(config.ternary ? "all parameters (STE surrogate)" : "all parameters", params, grads, loss);

  // The float model (Transformer's path: AVX2 GEMM and exp where available) agrees with double.
  ThreadPool pool(2);
  Network<float> fnet(config, &pool);
  const std::vector<float> fparams(params.begin(), params.end());
  std::vector<float> fgrads(layout.total(), 0.0f);
  const double floss =
      fnet.forward_backward(fparams.data(), b.tokens.data(), b.targets.data(), b.batch, b.seq, 1.0f, fgrads.data());
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(grads[i]));
    max_diff = std::max(max_diff, std::fabs(grads[i] - static_cast<double>(fgrads[i])));
  }
  std::printf("  float vs double: loss %.8f vs %.8f, gradient max|d| %.2e (max|g| %.2e)\n", floss, loss0, max_diff,
              max_abs);
  EXPECT_NEAR(floss, loss0, 1e-5);
  // Ternary: float and double may round an activation to different 8-bit levels; allow that.
  EXPECT_LE(max_diff, (config.ternary ? 2e-2 : 1e-4) * max_abs);
}

TEST(ModelGrad, TiedGqa) { check_model(tiny_config(true, 2, false)); }
TEST(ModelGrad, UntiedMha) { check_model(tiny_config(false, 4, false)); }
TEST(ModelGrad, UntiedGqa) { check_model(tiny_config(false, 2, false)); }
TEST(ModelGrad, TernaryTiedGqa) { check_model(tiny_config(true, 2, true)); }
TEST(ModelGrad, TernaryUntiedMha) { check_model(tiny_config(false, 4, true)); }

// Low-rank projections (a compressed model fine-tuned with --init-from): both factors of each,
// dense ones beside them, and an in-factor shared by two projections (its gradients add).
ModelConfig low_rank_config(bool shared) {
  ModelConfig c = tiny_config(false, 2, false);
  const auto own = [](const std::string& name, int64_t rank) {
    return LowRankProjection{name, rank, name + ".lr_in.weight"};
  };
  c.low_rank = {own("blk.0.attn_q", 3), own("blk.0.ffn_down", 5), own("blk.1.attn_output", 2),
                own("blk.1.ffn_gate", 4)};
  if (shared) {
    c.low_rank.push_back(own("blk.1.attn_k", 3));
    c.low_rank.push_back({"blk.1.attn_v", 3, "blk.1.attn_k.lr_in.weight"});
    c.low_rank.push_back({"blk.0.ffn_up", 4, "blk.0.ffn_gate_up.lr_in.weight"});
    c.low_rank.push_back({"blk.0.ffn_gate", 4, "blk.0.ffn_gate_up.lr_in.weight"});
  }
  return c;
}

TEST(ModelGrad, LowRankFactors) {
  const ModelConfig config = low_rank_config(false);
  const ParameterLayout layout(config);
  EXPECT_EQ(layout.find("blk.0.attn_q.lr_in.weight").rows, 3);
  EXPECT_EQ(layout.find("blk.0.attn_q.lr_in.weight").cols, 16);
  EXPECT_EQ(layout.find("blk.0.ffn_down.lr_out.weight").rows, 16);
  EXPECT_EQ(layout.find("blk.0.ffn_down.lr_out.weight").cols, 5);
  EXPECT_THROW(layout.find("blk.0.attn_q.weight"), Error);
  check_model(config);
}

TEST(ModelGrad, SharedLowRankInFactor) {
  const ModelConfig config = low_rank_config(true);
  const ParameterLayout layout(config);
  EXPECT_EQ(layout.projection("blk.1.attn_k").in, layout.projection("blk.1.attn_v").in);
  EXPECT_EQ(layout.projection("blk.0.ffn_up").in, layout.find("blk.0.ffn_gate_up.lr_in.weight").offset);
  check_model(config);
}

TEST(ModelGrad, LowRankConfigErrors) {
  ModelConfig c = tiny_config(true, 2, false);
  c.low_rank = {{"blk.2.attn_q", 2, "blk.2.attn_q.lr_in.weight"}};  // two layers only
  EXPECT_THROW(c.validate(), Error);
  c.low_rank = {{"blk.0.attn_q", 17, "blk.0.attn_q.lr_in.weight"}};  // above min(16, 16)
  EXPECT_THROW(c.validate(), Error);
  c.low_rank = {{"blk.0.ffn_up", 2, "x.weight"}, {"blk.0.attn_q", 3, "x.weight"}};  // shared, ranks differ
  EXPECT_THROW(ParameterLayout{c}, Error);
  c.low_rank = {{"blk.0.attn_q", 2, "blk.0.attn_k.weight"}};  // an in-factor named like a dense matrix
  EXPECT_THROW(ParameterLayout{c}, Error);
  c.low_rank = {{"blk.0.attn_q", 2, "blk.0.attn_q.lr_in.weight"}};
  c.ternary = true;
  EXPECT_THROW(c.validate(), Error);
}

// Scaling: loss_scale multiplies every gradient and grads accumulate (+=).
TEST(ModelGrad, LossScaleAndAccumulation) {
  const ModelConfig config = tiny_config(true, 2, false);
  Network<double> net(config, nullptr);
  std::vector<double> params = tiny_params(net.layout(), 5);
  const Batch b = tiny_batch(config.vocab_size);
  std::vector<double> once(net.layout().total(), 0.0), twice(net.layout().total(), 0.0);
  net.forward_backward(params.data(), b.tokens.data(), b.targets.data(), b.batch, b.seq, 0.5, once.data());
  net.forward_backward(params.data(), b.tokens.data(), b.targets.data(), b.batch, b.seq, 0.25, twice.data());
  net.forward_backward(params.data(), b.tokens.data(), b.targets.data(), b.batch, b.seq, 0.25, twice.data());
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(once[i], twice[i], 1e-12 + 1e-10 * std::fabs(once[i]));
}

}  // namespace
}  // namespace okapi::test
