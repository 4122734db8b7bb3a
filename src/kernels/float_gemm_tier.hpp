// The float GEMM's SIMD code (kernels/float_gemm.hpp), written once over a tier's vector traits
// and included only by that tier's file (kernels/avx2/float_gemm.cpp, kernels/avx512/float_gemm.cpp),
// inside the tier's own namespace, so nothing compiled with one tier's flags is shared with another.
//
// S provides: V (a float vector of S::kLanes), zero(), load(const float*), load_f16(const
// uint16_t*), load_bf16(const uint16_t*), broadcast(const float*), fma(a, b, c), add(a, b),
// store(float*, V), through_f16(V) (to fp16 and back, nearest even), and the micro-kernel shape kMr (rows of A) x kNv (vectors of B).
//
// B panels hold kNr = kNv * kLanes columns per k step: panel[p * kNr + j]. Every output element
// is one lane's FMA chain over p in order (per kGemmBlockK block for gemm(), over all of k for
// the row groups), the same for every micro-kernel shape, so neither the number of rows of A nor
// the tile edges change a result.
//
// Requires (before inclusion): <immintrin.h>, <algorithm>, <cstring>, <vector>,
// "kernels/float_gemm.hpp", "core/half.hpp".

// ---- Weight element types of B panels ----

struct F32Panel {
  using Element = float;
  static constexpr DType kType = DType::F32;
  static V load(const float* p) { return S::load(p); }
  static float round_activation(float x) { return x; }
  static int64_t round_activations(const float*, float*, int64_t) { return 0; }
  static Element from_storage(const void* row, int64_t i) {
    float f;
    std::memcpy(&f, static_cast<const uint8_t*>(row) + i * 4, 4);
    return f;
  }
};

struct F16Panel {
  using Element = uint16_t;
  static constexpr DType kType = DType::F16;
  static V load(const uint16_t* p) { return S::load_f16(p); }
  static float round_activation(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }
  // F16C rounds to nearest even like fp32_to_fp16 (a NaN stays a NaN, its payload aside).
  static int64_t round_activations(const float* x, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + S::kLanes <= n; i += S::kLanes) S::store(out + i, S::through_f16(S::load(x + i)));
    return i;
  }
  static Element from_storage(const void* row, int64_t i) {
    uint16_t h;
    std::memcpy(&h, static_cast<const uint8_t*>(row) + i * 2, 2);
    return h;
  }
};

struct BF16Panel {
  using Element = uint16_t;
  static constexpr DType kType = DType::BF16;
  static V load(const uint16_t* p) { return S::load_bf16(p); }
  static float round_activation(float x) { return bf16_to_fp32(fp32_to_bf16(x)); }
  static int64_t round_activations(const float*, float*, int64_t) { return 0; }
  static Element from_storage(const void* row, int64_t i) { return F16Panel::from_storage(row, i); }
};

constexpr int64_t kNr = S::kNv * S::kLanes;
constexpr int64_t kMr = S::kMr;
static_assert(kGemmTileM % kMr == 0 && kGemmTileN % kNr == 0);

// How a micro-kernel meets C: Overwrite: C = chain from 0; Add: C += chain from 0 (gemm()'s k
// blocks); Continue: C = the chain continued from C's values (the row groups' k blocks: an fp32
// store and load are exact, so the result is the one unbroken chain's).
enum class Store { Overwrite, Add, Continue };

// C[rows x cols] (rows == R, cols <= kNr) from sum_p A(r, p) * panel[p] as `mode` says.
// A(r, p) = a[r * a_rs + p * a_ps]. Columns past `cols` are computed (the panel is zero-padded)
// but neither read nor stored.
// kStream: the panel streams from DRAM (the row groups' weights), so each step also asks for the
// bytes 4 KiB ahead: the hardware prefetcher stops at page boundaries (a few tokens x 64 columns
// of FMAs are not enough work to hide the misses on their own).
template <class B, int R, bool kStream = false>
void micro_kernel(int64_t kc, const float* a, int64_t a_rs, int64_t a_ps, const typename B::Element* panel, float* c,
                  int64_t ldc, int64_t cols, Store mode) {
  V acc[R][S::kNv];
  alignas(64) float tmp[kNr];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    if (mode != Store::Continue) {
#pragma GCC unroll 4
      for (int v = 0; v < S::kNv; ++v) acc[r][v] = S::zero();
    } else if (cols == kNr) {
#pragma GCC unroll 4
      for (int v = 0; v < S::kNv; ++v) acc[r][v] = S::load(c + r * ldc + v * S::kLanes);
    } else {
      for (int64_t j = 0; j < kNr; ++j) tmp[j] = j < cols ? c[r * ldc + j] : 0.0f;
#pragma GCC unroll 4
      for (int v = 0; v < S::kNv; ++v) acc[r][v] = S::load(tmp + v * S::kLanes);
    }
  }
  for (int64_t p = 0; p < kc; ++p) {
    if constexpr (kStream) {
      const char* ahead = reinterpret_cast<const char*>(panel) + 4096;
#pragma GCC unroll 4
      for (size_t off = 0; off < kNr * sizeof(typename B::Element); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
    }
    V b[S::kNv];
#pragma GCC unroll 4
    for (int v = 0; v < S::kNv; ++v) b[v] = B::load(panel + v * S::kLanes);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const V x = S::broadcast(a + r * a_rs);
#pragma GCC unroll 4
      for (int v = 0; v < S::kNv; ++v) acc[r][v] = S::fma(x, b[v], acc[r][v]);
    }
    a += a_ps;
    panel += kNr;
  }
  const bool add = mode == Store::Add;
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* out = c + r * ldc;
    if (cols == kNr) {
#pragma GCC unroll 4
      for (int v = 0; v < S::kNv; ++v) {
        S::store(out + v * S::kLanes, add ? S::add(S::load(out + v * S::kLanes), acc[r][v]) : acc[r][v]);
      }
      continue;
    }
#pragma GCC unroll 4
    for (int v = 0; v < S::kNv; ++v) S::store(tmp + v * S::kLanes, acc[r][v]);
    for (int64_t j = 0; j < cols; ++j) out[j] = add ? out[j] + tmp[j] : tmp[j];
  }
}

// Any number of rows (<= R) through the kernel of that exact height (no wasted rows).
template <class B, int R = kMr, bool kStream = false>
void micro_rows(int64_t rows, int64_t kc, const float* a, int64_t a_rs, int64_t a_ps, const typename B::Element* panel,
                float* c, int64_t ldc, int64_t cols, Store mode) {
  if constexpr (R > 1) {
    if (rows < R) return micro_rows<B, R - 1, kStream>(rows, kc, a, a_rs, a_ps, panel, c, ldc, cols, mode);
  }
  micro_kernel<B, R, kStream>(kc, a, a_rs, a_ps, panel, c, ldc, cols, mode);
}

// ---- gemm(): one C tile over the whole k, A and B packed per kGemmBlockK block ----

// A[m x kc] (rows padded to a multiple of kMr) -> panels of pa[(i / kMr) * kMr * kc + p * kMr + i % kMr].
inline void pack_a(int64_t m, int64_t kc, const float* a, int64_t a_rs, int64_t a_cs, float* pa) {
  for (int64_t i0 = 0; i0 < m; i0 += kMr) {
    float* panel = pa + i0 * kc;
    const int64_t rows = std::min(kMr, m - i0);
    if (a_rs == 1) {  // columns of A contiguous (A = dy^T): a whole column of the panel per p
      for (int64_t p = 0; p < kc; ++p) {
        const float* src = a + p * a_cs + i0;
        for (int64_t r = 0; r < kMr; ++r) panel[p * kMr + r] = r < rows ? src[r] : 0.0f;
      }
      continue;
    }
    for (int64_t r = 0; r < kMr; ++r) {
      const float* src = a + (i0 + r) * a_rs;
      for (int64_t p = 0; p < kc; ++p) panel[p * kMr + r] = r < rows ? src[p * a_cs] : 0.0f;
    }
  }
}

// B[kc x n] (columns padded to a multiple of kNr) -> panels of pb[(j / kNr) * kNr * kc + p * kNr + j % kNr].
inline void pack_b(int64_t n, int64_t kc, const float* b, int64_t b_rs, int64_t b_cs, float* pb) {
  for (int64_t j0 = 0; j0 < n; j0 += kNr) {
    float* panel = pb + j0 * kc;
    const int64_t cols = std::min(kNr, n - j0);
    if (b_cs == 1) {  // rows of B contiguous (B = W or x): each row read front to back
      for (int64_t p = 0; p < kc; ++p) {
        const float* src = b + p * b_rs + j0;
        if (cols == kNr) {
          std::memcpy(panel + p * kNr, src, sizeof(float) * kNr);
        } else {
          for (int64_t j = 0; j < kNr; ++j) panel[p * kNr + j] = j < cols ? src[j] : 0.0f;
        }
      }
      continue;
    }
    for (int64_t j = 0; j < kNr; ++j) {  // B = W^T: each W row read along k
      const float* src = b + (j0 + j) * b_cs;
      for (int64_t p = 0; p < kc; ++p) panel[p * kNr + j] = j < cols ? src[p * b_rs] : 0.0f;
    }
  }
}

inline void strided_tile(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                         int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate, uint64_t call_id) {
  // Packed B of the last tile this thread ran (all its k blocks when k <= kCachedK): the next
  // tile of the same GEMM call and column range reuses it. Keyed by the call, never stale.
  constexpr int64_t kCachedK = 2048;
  constexpr int64_t kBlockFloats = kGemmTileN * kGemmBlockK;
  struct PackedB {
    std::vector<float> data;
    uint64_t call_id = 0;
    const float* b = nullptr;
  };
  thread_local std::vector<float> pa;
  thread_local PackedB pb;
  pa.resize(static_cast<size_t>(kGemmTileM * kGemmBlockK));
  const bool cacheable = k <= kCachedK;
  pb.data.resize(static_cast<size_t>(kBlockFloats * (kCachedK / kGemmBlockK)));
  const bool reuse = cacheable && call_id != 0 && pb.call_id == call_id && pb.b == b;
  pb.call_id = 0;  // invalid while being (re)packed
  if (k == 0 && !accumulate) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
  }
  for (int64_t p0 = 0; p0 < k; p0 += kGemmBlockK) {
    const int64_t kc = std::min(kGemmBlockK, k - p0);
    float* packed_b = pb.data.data() + (cacheable ? (p0 / kGemmBlockK) * kBlockFloats : 0);
    pack_a(m, kc, a + p0 * a_cs, a_rs, a_cs, pa.data());
    if (!reuse) pack_b(n, kc, b + p0 * b_rs, b_rs, b_cs, packed_b);
    const Store mode = p0 == 0 && !accumulate ? Store::Overwrite : Store::Add;
    for (int64_t j0 = 0; j0 < n; j0 += kNr) {
      for (int64_t i0 = 0; i0 < m; i0 += kMr) {
        micro_rows<F32Panel>(std::min(kMr, m - i0), kc, pa.data() + i0 * kc, 1, kMr, packed_b + j0 * kc,
                             c + i0 * ldc + j0, ldc, std::min(kNr, n - j0), mode);
      }
    }
  }
  if (cacheable) {
    pb.call_id = call_id;
    pb.b = b;
  }
}

// ---- Row groups: weights packed at load as panels of kNr rows, activations as float rows ----

template <class B>
struct RowGroups {
  using E = typename B::Element;

  // Rounded up to 64 bytes so every group starts cache-line aligned.
  static size_t group_bytes(int64_t n_in) {
    return (static_cast<size_t>(kNr * n_in) * sizeof(E) + 63) / 64 * 64;
  }

  static void pack(const void* w, size_t w_row, int64_t n_rows, int64_t n_in, void* group) {
    auto* out = static_cast<E*>(group);
    std::memset(group, 0, group_bytes(n_in));
    for (int64_t r = 0; r < n_rows; ++r) {
      const void* row = static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * w_row;
      for (int64_t p = 0; p < n_in; ++p) out[p * kNr + r] = B::from_storage(row, p);
    }
  }

  static size_t activation_bytes(int64_t n_in) { return static_cast<size_t>(n_in) * sizeof(float); }

  static void prepare_activation(const float* x, int64_t n_in, void* a) {
    auto* out = static_cast<float*>(a);
    for (int64_t i = B::round_activations(x, out, n_in); i < n_in; ++i) out[i] = B::round_activation(x[i]);
  }

  // One token against G groups at once: G * kNv independent FMA chains hide the FMA latency
  // that a single group's kNv chains would expose.
  template <int G>
  static void gemv_groups(int64_t n_in, const E* const* panels, const float* x, float* y, int64_t n_rows) {
    V acc[G][S::kNv];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
      for (int v = 0; v < S::kNv; ++v) acc[g][v] = S::zero();
    }
    for (int64_t p = 0; p < n_in; ++p) {
      const V xv = S::broadcast(x + p);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        // The panels stream from DRAM: ask for them 4 KiB ahead (a prefetch never faults).
        const char* ahead = reinterpret_cast<const char*>(panels[g] + p * kNr) + 4096;
#pragma GCC unroll 4
        for (size_t off = 0; off < kNr * sizeof(E); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int v = 0; v < S::kNv; ++v) acc[g][v] = S::fma(xv, B::load(panels[g] + p * kNr + v * S::kLanes), acc[g][v]);
      }
    }
    alignas(64) float tmp[kNr];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const int64_t cols = std::min(kNr, n_rows - g * kNr);
      if (cols == kNr) {
#pragma GCC unroll 4
        for (int v = 0; v < S::kNv; ++v) S::store(y + g * kNr + v * S::kLanes, acc[g][v]);
        continue;
      }
#pragma GCC unroll 4
      for (int v = 0; v < S::kNv; ++v) S::store(tmp + v * S::kLanes, acc[g][v]);
      for (int64_t j = 0; j < cols; ++j) y[g * kNr + j] = tmp[j];
    }
  }

  static void gemm(int64_t n_in, const void* groups, int64_t n_rows, const void* a, size_t a_row, int64_t n_tokens,
                   float* y, int64_t y_stride) {
    const auto* base = static_cast<const uint8_t*>(groups);
    const size_t g_bytes = group_bytes(n_in);
    const int64_t n_groups = (n_rows + kNr - 1) / kNr;
    const auto* x = static_cast<const float*>(a);
    const int64_t x_row = static_cast<int64_t>(a_row / sizeof(float));
    if (n_tokens == 1) {  // decode: several groups per pass over x
      constexpr int kGroupsAtOnce = 8 / S::kNv;
      for (int64_t g0 = 0; g0 < n_groups; g0 += kGroupsAtOnce) {
        const E* panels[kGroupsAtOnce];
        const int64_t count = std::min<int64_t>(kGroupsAtOnce, n_groups - g0);
        for (int64_t g = 0; g < kGroupsAtOnce; ++g) {
          panels[g] = reinterpret_cast<const E*>(base + static_cast<size_t>(g0 + std::min(g, count - 1)) * g_bytes);
        }
        float* y_g = y + g0 * kNr;
        const int64_t rows = n_rows - g0 * kNr;
        if (count == kGroupsAtOnce) {
          gemv_groups<kGroupsAtOnce>(n_in, panels, x, y_g, rows);
        } else {
          for (int64_t g = 0; g < count; ++g) gemv_groups<1>(n_in, panels + g, x, y_g + g * kNr, rows - g * kNr);
        }
      }
      return;
    }
    if (n_tokens <= kMr) {
      // A few tokens (a speculative verification pass, a few server slots): each group's panel
      // streams once, front to back, with every token's chain over all of k in one micro-kernel
      // reading x in place. Per token, a gemv would stream the weights once per token; the k
      // blocks below would jump between groups every 256 k.
      for (int64_t g = 0; g < n_groups; ++g) {
        const E* panel = reinterpret_cast<const E*>(base + static_cast<size_t>(g) * g_bytes);
        micro_rows<B, kMr, true>(n_tokens, n_in, x, x_row, 1, panel, y + g * kNr, y_stride,
                                 std::min(kNr, n_rows - g * kNr), Store::Overwrite);
      }
      return;
    }
    // k blocks of kGemmBlockK: each group's block of panel (kNr x 256 weights) stays in L1 while
    // every token meets it; the tokens' blocks are interleaved per k (as gemm()'s A panels) so
    // the broadcasts read one stream. Chains continue across blocks through y (Store::Continue).
    thread_local std::vector<float> pa;
    const int64_t token_panels = (n_tokens + kMr - 1) / kMr;
    pa.resize(static_cast<size_t>(token_panels * kMr * kGemmBlockK));
    for (int64_t p0 = 0; p0 < n_in; p0 += kGemmBlockK) {
      const int64_t kc = std::min(kGemmBlockK, n_in - p0);
      for (int64_t tp = 0; tp < token_panels; ++tp) {
        pack_a(std::min(kMr, n_tokens - tp * kMr), kc, x + tp * kMr * x_row + p0, x_row, 1, pa.data() + tp * kMr * kc);
      }
      const Store mode = p0 == 0 ? Store::Overwrite : Store::Continue;
      for (int64_t g = 0; g < n_groups; ++g) {
        const E* panel = reinterpret_cast<const E*>(base + static_cast<size_t>(g) * g_bytes) + p0 * kNr;
        const int64_t cols = std::min(kNr, n_rows - g * kNr);
        for (int64_t tp = 0; tp < token_panels; ++tp) {
          micro_rows<B, kMr, true>(std::min(kMr, n_tokens - tp * kMr), kc, pa.data() + tp * kMr * kc, 1, kMr, panel,
                        y + tp * kMr * y_stride + g * kNr, y_stride, cols, mode);
        }
      }
    }
  }

  static quant::RowGroupKernels kernels() {
    quant::RowGroupKernels k;
    k.rows = kNr;
    k.group_bytes = group_bytes;
    k.pack = pack;
    k.activation_bytes = activation_bytes;
    k.prepare_activation = prepare_activation;
    k.gemm = gemm;
    return k;
  }
};

inline quant::RowGroupKernels row_groups_of(DType type) {
  if (type == DType::F32) return RowGroups<F32Panel>::kernels();
  if (type == DType::F16) return RowGroups<F16Panel>::kernels();
  if (type == DType::BF16) return RowGroups<BF16Panel>::kernels();
  return {};
}
