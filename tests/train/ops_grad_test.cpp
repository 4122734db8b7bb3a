// Every training op's backward against central finite differences in double (h = 1e-6), through
// the same templated code that training runs in float. Each check projects the op's output on a
// fixed random vector r (L = r . y), so the analytic input gradient is the op's backward of r.
#include <gtest/gtest.h>

#include "grad_check.hpp"
#include "train/model.hpp"
#include "train/ops.hpp"

namespace okapi::test {
namespace {

using namespace okapi::train;

TEST(OpsGrad, Linear) {
  const int64_t n = 5, in = 7, out = 6;
  std::vector<double> x = random_vector(n * in, 1), w = random_vector(out * in, 2), r = random_vector(n * out, 3);
  std::vector<double> y(n * out), dx(n * in), dw(out * in, 0.0);
  const auto loss = [&] {
    ops::linear_forward(x.data(), n, in, w.data(), out, y.data(), false, nullptr);
    return dot(r, y);
  };
  ops::linear_backward_data(r.data(), n, in, out, w.data(), dx.data(), false, nullptr);
  ops::linear_backward_weight(r.data(), x.data(), n, in, out, dw.data(), nullptr);
  expect_gradient("x", x, dx, loss);
  expect_gradient("w", w, dw, loss);
  // accumulate adds: y = y0 + x W^T
  std::vector<double> y0 = random_vector(n * out, 4), y1 = y0;
  loss();
  ops::linear_forward(x.data(), n, in, w.data(), out, y1.data(), true, nullptr);
  for (size_t i = 0; i < y1.size(); ++i) EXPECT_NEAR(y1[i], y0[i] + y[i], 1e-12);
}

TEST(OpsGrad, RmsNorm) {
  const int64_t n = 4, d = 9;
  std::vector<double> x = random_vector(n * d, 5), g = random_vector(d, 6, 0.5, 1.5), r = random_vector(n * d, 7);
  std::vector<double> y(n * d), rstd(n), dx(n * d, 0.0), dg(d, 0.0);
  const auto loss = [&] {
    ops::rmsnorm_forward(x.data(), g.data(), n, d, 1e-5, y.data(), rstd.data(), nullptr);
    return dot(r, y);
  };
  loss();
  ops::rmsnorm_backward(x.data(), g.data(), rstd.data(), r.data(), n, d, dx.data(), false, dg.data(), nullptr);
  expect_gradient("x", x, dx, loss);
  expect_gradient("g", g, dg, loss);
}

void check_rope(bool neox) {
  const int64_t seq = 3, n = 6, heads = 2, hd = 8;  // two sequences of 3 positions
  const ops::RopeTable<double> table(seq, hd, 10000.0);
  std::vector<double> x = random_vector(n * heads * hd, 8), r = random_vector(x.size(), 9), y;
  const auto loss = [&] {
    y = x;
    ops::rope(y.data(), n, seq, heads, hd, table, neox, false, nullptr);
    return dot(r, y);
  };
  std::vector<double> dx = r;
  ops::rope(dx.data(), n, seq, heads, hd, table, neox, true, nullptr);
  expect_gradient(std::string(neox ? "neox " : "adjacent ") + "x", x, dx, loss);
  // position 0 is the identity, and the pairing is the one asked for
  loss();
  for (int64_t i = 0; i < heads * hd; ++i) EXPECT_DOUBLE_EQ(y[i], x[i]);
  const double angle = 1.0;  // position 1, pair 0: theta^0 = 1 radian
  const int64_t row = heads * hd, partner = neox ? hd / 2 : 1;
  EXPECT_NEAR(y[row], x[row] * std::cos(angle) - x[row + partner] * std::sin(angle), 1e-15);
  EXPECT_NEAR(y[row + partner], x[row] * std::sin(angle) + x[row + partner] * std::cos(angle), 1e-15);
}

TEST(OpsGrad, RopeAdjacentPairs) { check_rope(false); }
TEST(OpsGrad, RopeNeox) { check_rope(true); }

void check_attention(int64_t n_kv_heads) {
  ops::AttentionShape s;
  s.batch = 2;
  s.seq = 5;
  s.n_heads = 4;
  s.n_kv_heads = n_kv_heads;
  s.head_dim = 4;
  const int64_t n = s.batch * s.seq, qd = s.n_heads * s.head_dim, kvd = s.n_kv_heads * s.head_dim;
  std::vector<double> q = random_vector(n * qd, 10), k = random_vector(n * kvd, 11), v = random_vector(n * kvd, 12);
  const std::vector<double> r = random_vector(n * qd, 13);
  std::vector<double> probs(s.batch * s.n_heads * s.seq * s.seq), out(n * qd);
  const auto loss = [&] {
    ops::attention_forward(s, q.data(), k.data(), v.data(), probs.data(), out.data(), nullptr);
    return dot(r, out);
  };
  loss();
  // causal: nothing above the diagonal, rows sum to 1
  for (int64_t row = 0; row < s.batch * s.n_heads * s.seq; ++row) {
    const int64_t i = row % s.seq;
    double sum = 0;
    for (int64_t j = 0; j < s.seq; ++j) {
      const double p = probs[row * s.seq + j];
      if (j > i) {
        EXPECT_EQ(p, 0.0);
      }
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
  ops::attention_backward(s, q.data(), k.data(), v.data(), probs.data(), r.data(), dq.data(), dk.data(), dv.data(),
                          nullptr);
  expect_gradient("q", q, dq, loss);
  expect_gradient("k", k, dk, loss);
  expect_gradient("v", v, dv, loss);
}

TEST(OpsGrad, AttentionMha) { check_attention(4); }
TEST(OpsGrad, AttentionGqa) { check_attention(2); }
TEST(OpsGrad, AttentionMqa) { check_attention(1); }

TEST(OpsGrad, SwiGlu) {
  const int64_t count = 50;
  std::vector<double> gate = random_vector(count, 14, -4, 4), up = random_vector(count, 15), r = random_vector(count, 16);
  std::vector<double> out(count), dgate(count), dup(count);
  const auto loss = [&] {
    ops::swiglu_forward(gate.data(), up.data(), count, out.data(), nullptr);
    return dot(r, out);
  };
  ops::swiglu_backward(gate.data(), up.data(), r.data(), count, dgate.data(), dup.data(), nullptr);
  expect_gradient("gate", gate, dgate, loss);
  expect_gradient("up", up, dup, loss);
}

TEST(OpsGrad, Embedding) {
  const int64_t vocab = 10, d = 4, n = 6;
  const std::vector<int32_t> tokens = {3, 1, 3, 9, 0, 3};  // repeats accumulate
  std::vector<double> table = random_vector(vocab * d, 17), r = random_vector(n * d, 18), out(n * d);
  const auto loss = [&] {
    ops::embedding_forward(table.data(), tokens.data(), n, d, out.data());
    return dot(r, out);
  };
  std::vector<double> dtable(table.size(), 0.0);
  ops::embedding_backward(tokens.data(), r.data(), n, d, dtable.data());
  expect_gradient("table", table, dtable, loss);
}

TEST(OpsGrad, CrossEntropyIgnoresNegativeTargets) {
  const int64_t n = 5, vocab = 11;
  const std::vector<int32_t> targets = {3, -1, 0, 10, 7};
  std::vector<double> logits = random_vector(n * vocab, 19, -3, 3), work;
  const auto loss = [&] {
    work = logits;
    return ops::cross_entropy(work.data(), targets.data(), n, vocab, 0.0, nullptr);
  };
  // independent value: sum over counted rows of log(sum exp) - z[target]
  double expected = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (targets[r] < 0) continue;
    double s = 0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(logits[r * vocab + j]);
    expected += std::log(s) - logits[r * vocab + targets[r]];
  }
  EXPECT_NEAR(loss(), expected, 1e-12);
  std::vector<double> grad = logits;
  const double sum = ops::cross_entropy(grad.data(), targets.data(), n, vocab, 1.0, nullptr);
  EXPECT_NEAR(sum, expected, 1e-12);
  for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(grad[1 * vocab + j], 0.0);  // ignored row
  expect_gradient("logits", logits, grad, loss);
  // stable for huge logits
  std::vector<double> big = {1000.0, 0.0, -1000.0};
  const int32_t target = 0;
  EXPECT_NEAR(ops::cross_entropy(big.data(), &target, 1, 3, 0.0, nullptr), std::exp(-1000.0), 1e-12);
  std::vector<float> bigf = {1000.0f, 0.0f, -1000.0f};
  const int32_t target1 = 1;
  EXPECT_NEAR(ops::cross_entropy(bigf.data(), &target1, 1, 3, 0.0f, nullptr), 1000.0, 1e-3);
}

TEST(OpsGrad, TernaryQuantizers) {
  const int64_t count = 64;
  const std::vector<double> w = random_vector(count, 20);
  std::vector<double> wq(count);
  const double scale = ops::ternarize_weights(w.data(), count, wq.data(), nullptr);
  double mean_abs = 0;
  for (const double v : w) mean_abs += std::fabs(v) / count;
  EXPECT_NEAR(scale, mean_abs, 1e-15);
  for (int64_t i = 0; i < count; ++i) {
    const double code = wq[i] / scale;
    EXPECT_TRUE(code == -1.0 || code == 0.0 || code == 1.0) << code;
    EXPECT_EQ(code, std::clamp(std::nearbyint(w[i] / scale), -1.0, 1.0));
  }
  const std::vector<float> wf(w.begin(), w.end());
  std::vector<int8_t> codes(count);
  const float fscale = ternarize(wf, codes);
  std::vector<float> wqf(count);
  EXPECT_EQ(ops::ternarize_weights(wf.data(), count, wqf.data(), nullptr), fscale);  // one rule for QAT and export
  for (int64_t i = 0; i < count; ++i) EXPECT_EQ(wqf[i], static_cast<float>(codes[i]) * fscale);
  // activations: per row absmax to 127 levels
  const int64_t rows = 3, d = 16;
  std::vector<double> x = random_vector(rows * d, 21, -5, 5), xq(rows * d);
  ops::quantize_activations(x.data(), rows, d, xq.data(), nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    double amax = 0;
    for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::fabs(x[r * d + i]));
    for (int64_t i = 0; i < d; ++i) {
      const double level = xq[r * d + i] * 127.0 / amax;
      EXPECT_NEAR(level, std::nearbyint(level), 1e-9);
      EXPECT_LE(std::fabs(xq[r * d + i] - x[r * d + i]), 0.5 * amax / 127.0 + 1e-12);
    }
  }
}

// The straight-through estimator: the ternary linear layer's backward passes the gradients of
// the quantized operands straight to the full-precision ones. Its finite-difference counterpart
// is the surrogate y(x, W) = (x + c_x) (W + c_W)^T with the offsets c = q(.) - (.) frozen.
TEST(OpsGrad, TernaryLinearStraightThrough) {
  const int64_t n = 4, in = 16, out = 5;
  std::vector<double> x = random_vector(n * in, 22), w = random_vector(out * in, 23), r = random_vector(n * out, 24);
  std::vector<double> xq(x.size()), wq(w.size()), y(n * out);
  ops::quantize_activations(x.data(), n, in, xq.data(), nullptr);
  ops::ternarize_weights(w.data(), out * in, wq.data(), nullptr);
  std::vector<double> cx(x.size()), cw(w.size());
  for (size_t i = 0; i < x.size(); ++i) cx[i] = xq[i] - x[i];
  for (size_t i = 0; i < w.size(); ++i) cw[i] = wq[i] - w[i];
  const auto loss = [&] {
    std::vector<double> xs(x.size()), ws(w.size());
    for (size_t i = 0; i < x.size(); ++i) xs[i] = x[i] + cx[i];
    for (size_t i = 0; i < w.size(); ++i) ws[i] = w[i] + cw[i];
    ops::linear_forward(xs.data(), n, in, ws.data(), out, y.data(), false, nullptr);
    return dot(r, y);
  };
  // STE backward: the linear backward evaluated at the quantized operands.
  std::vector<double> dx(x.size()), dw(w.size(), 0.0);
  ops::linear_backward_data(r.data(), n, in, out, wq.data(), dx.data(), false, nullptr);
  ops::linear_backward_weight(r.data(), xq.data(), n, in, out, dw.data(), nullptr);
  expect_gradient("x", x, dx, loss);
  expect_gradient("w", w, dw, loss);
}

}  // namespace
}  // namespace okapi::test
