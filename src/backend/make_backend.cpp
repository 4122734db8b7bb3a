#include "backend/make_backend.hpp"

#include "backend/cpu_ops.hpp"

namespace okapi::backend {

std::unique_ptr<model::Ops> make_backend(const BackendOptions& options) {
  if (options.exact) return std::make_unique<ExactOps>(options.pool, options.tier, options.exact_ring);
  return std::make_unique<CpuOps>(options.pool, options.tier);
}

}  // namespace okapi::backend
