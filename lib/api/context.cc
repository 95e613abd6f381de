// Context state: SIMD selection, scratch reuse and the memory limit.
#include "lib/api/context.h"

#include <cstdlib>

octattn_context::~octattn_context() { std::free(scratch); }

namespace octattn {
namespace api {

Check ResolveTarget(octattn_backend backend, octattn_target target, const kernels::Table** out) {
  if (backend < OCTATTN_BACKEND_AUTO || backend > OCTATTN_BACKEND_XSIMD)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "unknown backend");
  if (target < OCTATTN_TARGET_AUTO || target > kernels::kLastTarget)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "unknown target");
  const bool xsimd = backend == OCTATTN_BACKEND_XSIMD;
  const kernels::Table* table;
  if (target == OCTATTN_TARGET_AUTO)
    table = xsimd ? kernels::XsimdBest() : kernels::HighwayBest();
  else
    table = xsimd ? kernels::XsimdTable(static_cast<kernels::Target>(target))
                  : kernels::HighwayTable(static_cast<kernels::Target>(target));
  if (!table)
    return Fail(OCTATTN_ERROR_UNSUPPORTED,
                std::string("target ") + octattn_target_name(target) + " of backend " +
                    octattn_backend_name(xsimd ? OCTATTN_BACKEND_XSIMD : OCTATTN_BACKEND_HIGHWAY) +
                    " is not compiled or not supported by this CPU");
  *out = table;
  return Check();
}

const kernels::Table* SelectTable(const octattn_context& ctx) { return ctx.table; }

Check AcquireScratch(octattn_context* ctx, size_t bytes, void* workspace, size_t workspace_size,
                     void** out) {
  constexpr size_t kAlign = base::kAlign;
  if (bytes == SIZE_MAX)  // sizes are computed saturating (base::SatMul)
    return Fail(OCTATTN_ERROR_OVERFLOW, "the call's scratch size overflows size_t");
  if (workspace) {
    if (workspace_size < bytes)
      return Fail(OCTATTN_ERROR_WORKSPACE_TOO_SMALL,
                  "workspace has " + std::to_string(workspace_size) + " bytes, the call needs " +
                      std::to_string(bytes));
    const uintptr_t p = reinterpret_cast<uintptr_t>(workspace);
    *out = reinterpret_cast<void*>((p + kAlign - 1) / kAlign * kAlign);
    return Check();
  }
  if (bytes <= ctx->scratch_bytes) {
    *out = ctx->scratch;
    return Check();
  }
  if (ctx->memory_limit != 0 && bytes > ctx->memory_limit)
    return Fail(OCTATTN_ERROR_OUT_OF_MEMORY, "the call needs " + std::to_string(bytes) +
                                                 " bytes of scratch, the limit is " +
                                                 std::to_string(ctx->memory_limit));
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* fresh = std::aligned_alloc(kAlign, rounded);
  if (!fresh)
    return Fail(OCTATTN_ERROR_OUT_OF_MEMORY,
                "could not allocate " + std::to_string(rounded) + " bytes of scratch");
  std::free(ctx->scratch);
  ctx->scratch = fresh;
  ctx->scratch_bytes = rounded;
  *out = fresh;
  return Check();
}

void RecordRun(octattn_context* ctx, octattn_algorithm algorithm, const kernels::Table* table) {
  ctx->last_run.struct_size = sizeof(octattn_run_info);
  ctx->last_run.algorithm = algorithm;
  ctx->last_run.backend = table ? static_cast<octattn_backend>(table->backend) : 0;
  ctx->last_run.target = table ? static_cast<octattn_target>(table->target) : OCTATTN_TARGET_SCALAR;
  ctx->last_run.threads = ctx->pool->threads();
}

}  // namespace api
}  // namespace octattn
