#include "model/blocks.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.hpp"

namespace okapi::model {

AttentionDims attention_dims(const HParams& hp) {
  return {hp.n_head * hp.head_dim_k, hp.n_head_kv * hp.head_dim_k, hp.n_head_kv * hp.head_dim_v,
          hp.n_head * hp.head_dim_v};
}

AttentionConfig attention_config(const HParams& hp, float scale) {
  AttentionConfig att;
  att.n_head = hp.n_head;
  att.n_head_kv = hp.n_head_kv;
  att.head_dim_k = hp.head_dim_k;
  att.head_dim_v = hp.head_dim_v;
  att.scale = scale;
  return att;
}

kernels::RopeConfig rope_config(const HParams& hp, bool neox, const float* freq_factors) {
  kernels::RopeConfig rope;
  rope.neox = neox;
  rope.n_rot = hp.n_rot;
  rope.freq_base = hp.rope_freq_base;
  rope.freq_scale = hp.rope_freq_scale;
  rope.freq_factors = freq_factors;
  rope.ext_factor = hp.rope_scaling_type == "yarn" ? 1.0f : 0.0f;
  rope.attn_factor = hp.rope_attn_factor;
  rope.n_ctx_orig = hp.rope_n_ctx_orig;
  return rope;
}

std::string layer_prefix(int64_t il) { return "blk." + std::to_string(il) + "."; }

int64_t ffn_width_from_gate(const gguf::File& file, int64_t fallback) {
  if (const gguf::TensorInfo* gate = file.find_tensor("blk.0.ffn_gate.weight"); gate && gate->shape.size() == 2)
    return gate->shape[1];
  return fallback;
}

Scratch::Scratch(Workspace& workspace, const HParams& hp, int64_t n_tokens_, int64_t n_ff) : n_tokens(n_tokens_) {
  const AttentionDims d = attention_dims(hp);
  size_t slot = 0;
  const auto rows = [&](int64_t n) {
    const auto count = static_cast<size_t>(n_tokens * n);
    return std::span<float>(workspace.floats(slot++, count), count);
  };
  x = rows(hp.n_embd);
  h = rows(hp.n_embd);
  o = rows(hp.n_embd);
  q = rows(d.n_q);
  k = rows(d.n_k);
  v = rows(d.n_v);
  attn = rows(d.n_o);
  gate = rows(n_ff);
  up = rows(n_ff);
}

namespace {

// The scale and bias of a projection whose mat-mul is done (llama.cpp's order).
void finish_projection(Ops& ops, const Projection& p, int64_t n_tokens, float* y) {
  if (p.scale) ops.scale(y, p.scale.f32()[0], n_tokens * p.w.n_out, y);
  if (p.bias) ops.add_bias(p.bias, y, n_tokens);
}

}  // namespace

// The workspace slot of a low-rank projection's intermediate (rank values per token); far above
// the slots Scratch takes.
constexpr size_t kLowRankSlot = 64;

void project(Ops& ops, const Projection& p, const float* x, int64_t n_tokens, float* y) {
  if (p.in) {
    float* mid = ops.workspace().floats(kLowRankSlot, static_cast<size_t>(n_tokens * p.in.n_out));
    ops.matmul(p.in, x, n_tokens, mid);
    ops.matmul(p.w, mid, n_tokens, y);
  } else {
    ops.matmul(p.w, x, n_tokens, y);
  }
  finish_projection(ops, p, n_tokens, y);
}

void project_group(Ops& ops, const Projection* const* ps, float* const* ys, size_t n, const float* x, int64_t n_tokens) {
  constexpr size_t kMaxGroup = 4;
  if (n > kMaxGroup) {
    for (size_t i = 0; i < n; ++i) project(ops, *ps[i], x, n_tokens, ys[i]);
    return;
  }
  const Weight& first_in = ps[0]->in;
  const bool low_rank = std::any_of(ps, ps + n, [](const Projection* p) { return static_cast<bool>(p->in); });
  const bool shared_in = first_in && std::all_of(ps, ps + n, [&](const Projection* p) { return p->in.data == first_in.data; });
  if (low_rank && !shared_in) {
    for (size_t i = 0; i < n; ++i) project(ops, *ps[i], x, n_tokens, ys[i]);
    return;
  }
  // Dense, or one basis shared by the group (GRC): the basis once, then the outs as one group.
  const float* input = x;
  if (shared_in) {
    float* mid = ops.workspace().floats(kLowRankSlot, static_cast<size_t>(n_tokens * first_in.n_out));
    ops.matmul(first_in, x, n_tokens, mid);
    input = mid;
  }
  MatmulTarget targets[kMaxGroup];
  for (size_t i = 0; i < n; ++i) targets[i] = {&ps[i]->w, ys[i]};
  ops.matmul_group(std::span<const MatmulTarget>(targets, n), input, n_tokens);
  for (size_t i = 0; i < n; ++i) finish_projection(ops, *ps[i], n_tokens, ys[i]);
}

void attention_block(Ops& ops, const KvBinding& kv, const HParams& hp, const AttentionWeights& w,
                     const kernels::RopeConfig& rope, const AttentionConfig& att, std::span<const int32_t> positions,
                     Scratch& s) {
  ops.rmsnorm(s.x.data(), w.norm, s.n_tokens, hp.n_embd, hp.norm_eps, s.h.data());
  attention_core(ops, kv, hp, w, rope, att, positions, s.h.data(), s);
}

namespace {

// The positions attention() is given for a run's queries: their own (causal), or for a
// non-causal run the run's last one for every query, so that each sees the whole run (a backend
// reads a query's position only for the cells it sees). `visible` holds the latter.
std::span<const int32_t> visibility(const AttentionConfig& att, std::span<const int32_t> run,
                                    std::span<int32_t> visible) {
  if (att.causal || run.empty()) return run;
  std::fill(visible.begin(), visible.end(), run.back());
  return visible;
}

// Non-causal attention with a symmetric window (llama.cpp's LLAMA_SWA_TYPE_SYMMETRIC, gemma-
// embedding): query i of a run of n (positions 0..n-1) sees keys j with |i - j| <= window / 2.
// Backends see [pos - window + 1, pos], so a query whose window ends inside the run gets
// pos = i + half with a window of 2 half + 1, and one whose window runs past the end gets pos =
// n - 1 with its own window (one call each: at most half + 1 of them per run).
void symmetric_window_attention(Ops& ops, const kv::KvStore& store, AttentionConfig att, const float* q,
                                std::span<const int32_t> run, float* out, const AttentionDims& d) {
  const auto n = static_cast<int64_t>(run.size());
  const int64_t half = att.sliding_window / 2;
  const int32_t last = run.back();
  if (n - 1 <= half) {  // every key within reach of every query
    att.sliding_window = 0;
    const std::vector<int32_t> visible(run.size(), last);
    ops.attention(store, att, q, visible, out);
    return;
  }
  const int64_t n_inside = n - half;  // queries i < n - half: i + half <= n - 1
  std::vector<int32_t> visible(static_cast<size_t>(n_inside));
  for (int64_t i = 0; i < n_inside; ++i) visible[static_cast<size_t>(i)] = run[static_cast<size_t>(i)] + static_cast<int32_t>(half);
  AttentionConfig inside = att;
  inside.sliding_window = 2 * half + 1;
  ops.attention(store, inside, q, visible, out);
  for (int64_t i = n_inside; i < n; ++i) {
    AttentionConfig tail = att;
    tail.sliding_window = n - i + half;  // keys [i - half, n - 1]
    const int32_t pos = last;
    ops.attention(store, tail, q + i * d.n_q, std::span<const int32_t>(&pos, 1), out + i * d.n_o);
  }
}

}  // namespace

void attention_core(Ops& ops, const KvBinding& kv, const HParams& hp, const AttentionWeights& w,
                    const kernels::RopeConfig& rope, const AttentionConfig& att, std::span<const int32_t> positions,
                    const float* input, Scratch& s) {
  const int64_t T = s.n_tokens;
  const AttentionDims d = attention_dims(hp);
  const Projection* qkv[] = {&w.q, &w.k, &w.v};
  float* const qkv_out[] = {s.q.data(), s.k.data(), s.v.data()};
  project_group(ops, qkv, qkv_out, 3, input, T);
  std::vector<int32_t> visible(att.causal ? 0 : positions.size());
  if (w.q_norm) ops.rmsnorm(s.q.data(), w.q_norm, T * hp.n_head, hp.head_dim_k, hp.norm_eps, s.q.data());
  if (w.k_norm) ops.rmsnorm(s.k.data(), w.k_norm, T * hp.n_head_kv, hp.head_dim_k, hp.norm_eps, s.k.data());
  if (rope.n_rot > 0) {
    ops.rope(s.q.data(), T, hp.n_head, hp.head_dim_k, positions, rope);
    ops.rope(s.k.data(), T, hp.n_head_kv, hp.head_dim_k, positions, rope);
  }
  if (!att.causal && att.sliding_window > 0) {
    kv.for_each_run(positions.size(), [&](kv::KvStore& store, size_t begin, size_t count) {
      const std::span<const int32_t> run = positions.subspan(begin, count);
      const auto t0 = static_cast<int64_t>(begin);
      ops.store_kv(store, att.layer, s.k.data() + t0 * d.n_k, s.v.data() + t0 * d.n_v, run);
      symmetric_window_attention(ops, store, att, s.q.data() + t0 * d.n_q, run, s.attn.data() + t0 * d.n_o, d);
    });
  } else if (kv.single()) {
    ops.store_kv(kv.store(0), att.layer, s.k.data(), s.v.data(), positions);
    ops.attention(kv.store(0), att, s.q.data(), visibility(att, positions, visible), s.attn.data());
  } else {
    // Each run's K/V into its store, then the runs' attention in calls of up to kMaxRuns (one
    // parallel loop for all of them: a decode step of several sequences is one token per run).
    constexpr size_t kMaxRuns = 32;
    AttentionRun runs[kMaxRuns];
    size_t n_runs = 0;
    const auto flush = [&] {
      ops.attention_runs(std::span<const AttentionRun>(runs, n_runs), att);
      n_runs = 0;
    };
    kv.for_each_run(positions.size(), [&](kv::KvStore& store, size_t begin, size_t count) {
      const std::span<const int32_t> run = positions.subspan(begin, count);
      const auto t0 = static_cast<int64_t>(begin);
      ops.store_kv(store, att.layer, s.k.data() + t0 * d.n_k, s.v.data() + t0 * d.n_v, run);
      const std::span<const int32_t> seen =
          visibility(att, run, std::span<int32_t>(visible).subspan(att.causal ? 0 : begin, att.causal ? 0 : count));
      runs[n_runs++] = {&store, s.q.data() + t0 * d.n_q, seen, s.attn.data() + t0 * d.n_o};
      if (n_runs == kMaxRuns) flush();
    });
    if (n_runs > 0) flush();
  }
  if (w.sub_norm) ops.rmsnorm(s.attn.data(), w.sub_norm, T, d.n_o, hp.norm_eps, s.attn.data());
  project(ops, w.o, s.attn.data(), T, s.o.data());
}

void ffn_block(Ops& ops, const HParams& hp, const FfnWeights& w, Activation act, Scratch& s) {
  const int64_t T = s.n_tokens, n_ff = w.gate.w.n_out;
  ops.rmsnorm(s.x.data(), w.norm, T, hp.n_embd, hp.norm_eps, s.h.data());
  if (!w.gate.bias && !w.gate.scale && !w.up.bias && !w.up.scale && !w.gate.in && !w.up.in) {
    ops.matmul_glu(act, w.gate.w, w.up.w, s.h.data(), T, s.gate.data(), s.up.data());
  } else {  // llama.cpp applies scale and bias before the activation
    const Projection* gate_up[] = {&w.gate, &w.up};
    float* const gate_up_out[] = {s.gate.data(), s.up.data()};
    project_group(ops, gate_up, gate_up_out, 2, s.h.data(), T);
    ops.glu(act, s.gate.data(), s.up.data(), T, n_ff, s.gate.data());
  }
  if (w.sub_norm) ops.rmsnorm(s.gate.data(), w.sub_norm, T, n_ff, hp.norm_eps, s.gate.data());
  project(ops, w.down, s.gate.data(), T, s.o.data());
}

void output_logits(Ops& ops, const HParams& hp, const Weight& output_norm, const Weight& output,
                   const LogitSelection& rows, Scratch& s, float* logits) {
  // Each row is normed on its own (and the LM head gives a row the same bits in any batch), so
  // gathering the selected rows changes none of them.
  const int64_t n = hp.n_embd;
  int64_t packed = 0;
  rows.for_each_run(s.n_tokens, [&](int64_t begin, int64_t count) {
    ops.rmsnorm(s.x.data() + begin * n, output_norm, count, n, hp.norm_eps, s.h.data() + packed * n);
    packed += count;
  });
  if (packed > 0) ops.matmul(output, s.h.data(), packed, logits);
}

void DecoderModel::output_rows(Ops& ops, const LogitSelection& rows, Scratch& s, float* out) const {
  if (!hidden_output_) return output_logits(ops, hparams_, output_norm_, output_, rows, s, out);
  const int64_t n = hparams_.n_embd;
  int64_t packed = 0;
  rows.for_each_run(s.n_tokens, [&](int64_t begin, int64_t count) {
    ops.rmsnorm(s.x.data() + begin * n, output_norm_, count, n, hparams_.norm_eps, out + packed * n);
    packed += count;
  });
}

void DecoderModel::split(const std::string& prefix, std::initializer_list<PartOf> parts, Part bias) {
  int64_t n_out = 0;
  for (const PartOf& part : parts) n_out += part.rows;
  const Projection fused = projection(prefix, {hparams_.n_embd, n_out}, {.bias = bias}, /*register_w=*/false);
  int64_t first = 0;
  for (const PartOf& part : parts) {
    Projection& out = *part.projection;
    out.in = fused.in;
    out.w = rows_of(fused.w, first, part.rows, part.name);
    uses_in_matmul(out.w);
    out.bias = rows_of(fused.bias, first, part.rows, part.name);
    first += part.rows;
  }
}

Weight DecoderModel::rows_of(const Weight& w, int64_t first, int64_t count, const char* part) {
  if (!w) return {};
  Weight r = w;
  r.name = part_names_.emplace_back(std::string(w.name) + "[" + part + "]");
  r.matmul_index = -1;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  if (w.n_out == 1) {  // 1-D, f32 (checked by optional_tensor)
    r.data = bytes + first * static_cast<int64_t>(sizeof(float));
    r.n_in = count;
    return r;
  }
  const std::optional<size_t> row = row_bytes(w.type, w.n_in);
  if (!row) throw_error("{}: '{}' rows of {} do not fit {} blocks", file_.name(), w.name, w.n_in, dtype_name(w.type));
  r.data = bytes + static_cast<size_t>(first) * *row;
  r.n_out = count;
  return r;
}

void DecoderModel::load_embeddings() {
  const HParams& hp = hparams_;
  token_embd_ = tensor("token_embd.weight", {hp.n_embd, hp.n_vocab});
  output_norm_ = tensor("output_norm.weight", {hp.n_embd});
  output_ = optional_tensor("output.weight", {hp.n_embd, hp.n_vocab});
  if (!output_) output_ = token_embd_;  // tied embeddings
  uses_in_matmul(output_);
}

Projection DecoderModel::projection(const std::string& prefix, std::vector<int64_t> shape, ProjectionParts parts,
                                    bool register_w) {
  const auto lookup = [this](Part part, const std::string& name, std::vector<int64_t> part_shape) {
    if (part == Part::Required) return tensor(name, std::move(part_shape));
    if (part == Part::Optional) return optional_tensor(name, std::move(part_shape));
    return Weight{};
  };
  Projection p;
  const int64_t n_in = shape.size() == 2 ? shape[0] : 0, n_out = shape.size() == 2 ? shape[1] : 0;
  const std::string out_name = prefix + ".lr_out.weight";
  std::string in_name = prefix + ".lr_in.weight";
  // A shared in-factor (one basis for several projections) is stored once; the others name it.
  if (const gguf::Value* shared = file().find(std::string(kSharedInKeyPrefix) + prefix); shared && shared->is_string())
    in_name = shared->as_string();
  if (!file().find_tensor(prefix + ".weight") && file().find_tensor(in_name)) {
    // Low rank (okapi compress): in is [n_in, rank], out is [rank, n_out] in ggml's order.
    const gguf::TensorInfo& in = *file().find_tensor(in_name);
    const int64_t rank = in.shape.size() == 2 ? in.shape[1] : 0;
    p.in = tensor(in_name, {n_in, rank});
    p.w = tensor(out_name, {rank, n_out});
    uses_in_matmul(p.in);
  } else {
    p.w = tensor(prefix + ".weight", std::move(shape));
  }
  if (register_w) uses_in_matmul(p.w);
  p.bias = lookup(parts.bias, prefix + ".bias", {n_out});
  p.scale = lookup(parts.scale, prefix + ".scale", {1});
  return p;
}

AttentionWeights DecoderModel::attention_weights(const std::string& prefix, const AttentionParts& parts) {
  const HParams& hp = hparams_;
  const AttentionDims d = attention_dims(hp);
  AttentionWeights w;
  w.norm = tensor(prefix + "attn_norm.weight", {hp.n_embd});
  w.q = projection(prefix + "attn_q", {hp.n_embd, d.n_q}, parts.qkv);
  w.k = projection(prefix + "attn_k", {hp.n_embd, d.n_k}, parts.qkv);
  w.v = projection(prefix + "attn_v", {hp.n_embd, d.n_v}, parts.qkv);
  if (parts.qk_norm) {
    w.q_norm = tensor(prefix + "attn_q_norm.weight", {hp.head_dim_k});
    w.k_norm = tensor(prefix + "attn_k_norm.weight", {hp.head_dim_k});
  }
  if (parts.sub_norm) w.sub_norm = tensor(prefix + "attn_sub_norm.weight", {d.n_o});
  w.o = projection(prefix + "attn_output", {d.n_o, hp.n_embd}, parts.output);
  return w;
}

FfnWeights DecoderModel::ffn_weights(const std::string& prefix, int64_t n_ff, ProjectionParts parts, bool sub_norm) {
  const int64_t n_embd = hparams_.n_embd;
  FfnWeights w;
  w.norm = tensor(prefix + "ffn_norm.weight", {n_embd});
  w.gate = projection(prefix + "ffn_gate", {n_embd, n_ff}, parts);
  w.up = projection(prefix + "ffn_up", {n_embd, n_ff}, parts);
  if (sub_norm) w.sub_norm = tensor(prefix + "ffn_sub_norm.weight", {n_ff});
  w.down = projection(prefix + "ffn_down", {n_ff, n_embd}, parts);
  return w;
}

std::vector<uint8_t> DecoderModel::windowed_layers(const std::string& key, int64_t default_pattern) const {
  const int64_t n_layer = hparams_.n_layer;
  std::vector<uint8_t> out(static_cast<size_t>(n_layer));
  const gguf::Value* v = file_.find(key);
  if (v != nullptr && v->is_array()) {
    const auto& items = v->as_array().items;
    if (static_cast<int64_t>(items.size()) != n_layer)
      throw_error("{}: '{}' has {} entries, expected one per layer ({})", file_.name(), key, items.size(), n_layer);
    for (size_t il = 0; il < items.size(); ++il) {
      try {
        out[il] = items[il].as_bool() ? 1 : 0;
      } catch (const Error& e) {
        throw_error("{}: '{}' entry {}: {}", file_.name(), key, il, e.what());
      }
    }
    return out;
  }
  int64_t n = default_pattern;
  if (v != nullptr) {
    try {
      n = v->as_int();
    } catch (const Error& e) {
      throw_error("{}: '{}': {}", file_.name(), key, e.what());
    }
  }
  if (n < 0) throw_error("{}: '{}' must not be negative, got {}", file_.name(), key, n);
  for (int64_t il = 0; il < n_layer; ++il) out[static_cast<size_t>(il)] = (n == 0 || il % n < n - 1) ? 1 : 0;
  return out;
}

std::vector<PostNormLayer> DecoderModel::post_norm_layers(const AttentionParts& attn) {
  const HParams& hp = hparams_;
  const int64_t n_ff = ffn_width_from_gate(file_, hp.n_ff);
  std::vector<PostNormLayer> layers;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = layer_prefix(il);
    PostNormLayer l;
    l.attn = attention_weights(p, attn);
    l.post_attn_norm = tensor(p + "post_attention_norm.weight", {hp.n_embd});
    l.ffn = ffn_weights(p, n_ff, {}, /*sub_norm=*/false);
    l.post_ffn_norm = tensor(p + "post_ffw_norm.weight", {hp.n_embd});
    layers.push_back(l);
  }
  return layers;
}

void DecoderModel::forward_pre_norm(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                                    std::span<const int32_t> positions, const LogitSelection& rows, float* logits,
                                    std::span<const DecoderLayer> layers, const kernels::RopeConfig& rope,
                                    Activation ffn_activation, const PreNormOptions& options) const {
  const HParams& hp = hparams_;
  const int64_t T = static_cast<int64_t>(tokens.size()), n = T * hp.n_embd;
  Scratch s(ops.workspace(), hp, T, layers.front().ffn.gate.w.n_out);
  const float kq_scale = options.attention_scale != 0.0f ? options.attention_scale
                                                         : 1.0f / std::sqrt(static_cast<float>(hp.head_dim_k));
  AttentionConfig att = attention_config(hp, kq_scale);
  kernels::RopeConfig no_rope = rope;
  no_rope.n_rot = 0;
  const auto add_residual = [&] {
    if (options.residual_scale != 1.0f) ops.scale(s.o.data(), options.residual_scale, n, s.o.data());
    ops.add(s.x.data(), s.o.data(), n, s.x.data());
  };

  if (!stage_input(s.x.subspan(0, static_cast<size_t>(n)))) {
    ops.get_rows(token_embd_, tokens, s.x.data());
    if (options.embedding_scale != 1.0f) ops.scale(s.x.data(), options.embedding_scale, n, s.x.data());
  }
  for (int64_t il = stage_first(); il < stage_end(); ++il) {
    if (skips_layer(il)) continue;
    const DecoderLayer& l = layers[static_cast<size_t>(il)];
    att.layer = il;
    const bool roped = options.no_rope_layer_step <= 0 || (il + 1) % options.no_rope_layer_step != 0;
    attention_block(ops, kv, hp, l.attn, roped ? rope : no_rope, att, positions, s);
    add_residual();
    ffn_block(ops, hp, l.ffn, ffn_activation, s);
    add_residual();
  }
  if (stage_output(s.x.subspan(0, static_cast<size_t>(n)), logits)) return;
  output_rows(ops, rows, s, logits);
  if (options.logit_scale != 1.0f && !hidden_output_) {
    int64_t n_rows = 0;
    rows.for_each_run(T, [&](int64_t, int64_t count) { n_rows += count; });
    if (n_rows > 0) ops.scale(logits, 1.0f / options.logit_scale, n_rows * hp.n_vocab, logits);
  }
}

void DecoderModel::forward_post_norm(Ops& ops, const KvBinding& kv, std::span<const int32_t> tokens,
                                     std::span<const int32_t> positions, std::span<const PostNormLayer> layers,
                                     const kernels::RopeConfig& global_rope, const kernels::RopeConfig& local_rope,
                                     AttentionConfig att, Activation ffn_activation, Scratch& s) const {
  const HParams& hp = hparams_;
  const int64_t T = static_cast<int64_t>(tokens.size()), n_embd = hp.n_embd;
  ops.get_rows(token_embd_, tokens, s.x.data());
  ops.scale(s.x.data(), std::sqrt(static_cast<float>(n_embd)), T * n_embd, s.x.data());
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const PostNormLayer& l = layers[static_cast<size_t>(il)];
    att.layer = il;
    att.sliding_window = layer_window(il);
    attention_block(ops, kv, hp, l.attn, att.sliding_window > 0 ? local_rope : global_rope, att, positions, s);
    ops.rmsnorm(s.o.data(), l.post_attn_norm, T, n_embd, hp.norm_eps, s.o.data());
    ops.add(s.x.data(), s.o.data(), T * n_embd, s.x.data());

    ffn_block(ops, hp, l.ffn, ffn_activation, s);
    ops.rmsnorm(s.o.data(), l.post_ffn_norm, T, n_embd, hp.norm_eps, s.o.data());
    ops.add(s.x.data(), s.o.data(), T * n_embd, s.x.data());
  }
}

}  // namespace okapi::model
