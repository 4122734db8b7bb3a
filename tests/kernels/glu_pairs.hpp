// Gate/up weight pairs for the fused-FFN kernel tests (matmul_glu, matmul_experts): two
// quantized random weights back to back in one buffer, packed for this CPU's tier, and the
// reference two steps (matmul_group, then glu over the whole buffers).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/cpu.hpp"
#include "core/thread_pool.hpp"
#include "kernels/format_table.hpp"
#include "kernels/kernels.hpp"
#include "kernels/weight_packs.hpp"
#include "support/random_data.hpp"

namespace okapi::kernels::test_pairs {

inline constexpr int64_t kIn = 512;

// Gate and up stored back to back in one buffer, as in a GGUF file.
struct Pair {
  std::vector<uint8_t> bytes;
  size_t up_offset = 0;
  DType gate_type{}, up_type{};
  int64_t n_out = 0;
  PackedWeight packed_gate, packed_up;  // filled by pack()
  MatmulOutput gate(float* y) const { return {gate_type, bytes.data(), n_out, y, &packed_gate}; }
  MatmulOutput up(float* y) const { return {up_type, bytes.data() + up_offset, n_out, y, &packed_up}; }

  void pack() {
    packed_gate = pack_weight(isa(), gate_type, bytes.data(), kIn, n_out, nullptr, false);
    packed_up = pack_weight(isa(), up_type, bytes.data() + up_offset, kIn, n_out, nullptr, false);
  }
};

inline Pair make_pair(DType gate_type, DType up_type, int64_t n_out, uint32_t seed) {
  Pair p{{}, 0, gate_type, up_type, n_out, {}, {}};
  for (const DType type : {gate_type, up_type}) {
    const auto w = okapi::test::gaussian(static_cast<size_t>(kIn * n_out), seed++);
    const auto q = quant::quantize_tensor(type, w.data(), std::array<int64_t, 2>{kIn, n_out});
    p.up_offset = p.bytes.size();
    p.bytes.insert(p.bytes.end(), q.begin(), q.end());
    p.bytes.resize((p.bytes.size() + 63) / 64 * 64);
  }
  return p;
}

inline std::vector<float> two_steps(const Pair& p, GluKernel glu, const std::vector<float>& x, int64_t n_tokens,
                             ThreadPool* pool) {
  std::vector<float> gate(static_cast<size_t>(p.n_out * n_tokens)), up(gate.size());
  const MatmulOutput outputs[] = {p.gate(gate.data()), p.up(up.data())};
  matmul_group(isa(), outputs, kIn, x.data(), n_tokens, pool);
  glu(gate.data(), up.data(), static_cast<int64_t>(gate.size()), gate.data());
  return gate;
}

}  // namespace okapi::kernels::test_pairs
