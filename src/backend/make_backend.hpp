// The backend a verb computes with: CpuOps (float kernels) or, in exact mode, ExactOps, on one ISA
// tier and one thread pool.
#pragma once
#include <memory>

#include "backend/exact_ops.hpp"
#include "core/cpu.hpp"
#include "model/ops.hpp"

namespace okapi {
class ThreadPool;
}

namespace okapi::backend {

struct BackendOptions {
  ThreadPool* pool = nullptr;  // may be null: everything on the calling thread
  Isa tier = isa();            // one of available_isas()
  bool exact = false;          // ExactOps (docs/exact-mode.md) instead of CpuOps
  ExactRing exact_ring;        // exact mode's ring for the weight products
};

// The backend `options` describe, not yet prepared. Throws okapi::Error for a tier not available here.
std::unique_ptr<model::Ops> make_backend(const BackendOptions& options);

}  // namespace okapi::backend
