// Context state: SIMD selection, scratch reuse and the memory limit.
#include "lib/api/context.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

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

const kernels::Table* SelectTable(const octattn_context& ctx, bool qk_int8) {
  return qk_int8 ? ctx.qk_int8_table : ctx.table;
}

void SetTables(octattn_context* ctx, octattn_backend backend, octattn_target target,
               const kernels::Table* table) {
  ctx->backend = backend;
  ctx->target = target;
  ctx->table = table;
  const bool highway_auto = target == OCTATTN_TARGET_AUTO && backend != OCTATTN_BACKEND_XSIMD;
  ctx->qk_int8_table = highway_auto ? kernels::HighwayQkInt8(table) : table;
}

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

void RecordRun(octattn_context* ctx, plan::Algorithm algorithm, const kernels::Table* table,
               int64_t shared_kv_rows) {
  ctx->last_run.struct_size = sizeof(octattn_run_info);
  ctx->last_run.algorithm = algorithm == plan::Algorithm::kReference ? OCTATTN_ALGORITHM_REFERENCE
                            : algorithm == plan::Algorithm::kNaive   ? OCTATTN_ALGORITHM_NAIVE
                                                                     : OCTATTN_ALGORITHM_FUSED;
  ctx->last_run.backend = static_cast<octattn_backend>(table->backend);
  ctx->last_run.target = static_cast<octattn_target>(table->target);
  ctx->last_run.threads = ctx->pool->threads();
  ctx->last_run.shared_kv_rows = shared_kv_rows;
}

}  // namespace api
}  // namespace octattn

namespace api = octattn::api;
namespace kernels = octattn::kernels;

namespace {

// A thread cap from OCTATTN_THREADS: a decimal integer in [0, INT32_MAX], else none (-1).
int32_t ThreadsFromEnvironment() {
  const char* text = std::getenv("OCTATTN_THREADS");
  if (!text || !*text) return -1;
  int64_t n = 0;
  for (const char* c = text; *c; ++c) {
    if (*c < '0' || *c > '9') return -1;
    n = n * 10 + (*c - '0');
    if (n > INT32_MAX) return -1;
  }
  return static_cast<int32_t>(n);
}

}  // namespace

extern "C" {

octattn_status octattn_context_create(octattn_context** out) {
  return api::Guard(nullptr, [&]() -> api::Check {
    if (!out) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "out is NULL");
    auto ctx = std::make_unique<octattn_context>();
    const int32_t threads = ThreadsFromEnvironment();
    ctx->pool = std::make_unique<octattn::parallel::Pool>(threads < 0 ? 0 : threads);
    const char* backend = std::getenv("OCTATTN_BACKEND");
    const char* target = std::getenv("OCTATTN_TARGET");
    octattn_backend b = OCTATTN_BACKEND_AUTO;
    octattn_target t = OCTATTN_TARGET_AUTO;
    if (backend)
      for (octattn_backend i = OCTATTN_BACKEND_HIGHWAY; i <= OCTATTN_BACKEND_XSIMD; ++i)
        if (std::strcmp(backend, octattn_backend_name(i)) == 0) b = i;
    if (target)
      for (octattn_target i = OCTATTN_TARGET_SCALAR; i <= octattn::kernels::kLastTarget; ++i)
        if (std::strcmp(target, octattn_target_name(i)) == 0) t = i;
    const kernels::Table* table = nullptr;
    if (octattn::api::ResolveTarget(b, t, &table).failed()) {  // (auto's, then auto's own)
      t = OCTATTN_TARGET_AUTO;
      if (octattn::api::ResolveTarget(b, t, &table).failed()) {
        b = OCTATTN_BACKEND_AUTO;
        octattn::api::ResolveTarget(b, t, &table);
      }
    }
    octattn::api::SetTables(ctx.get(), b, t, table);
    *out = ctx.release();
    return api::Check();
  });
}

void octattn_context_destroy(octattn_context* ctx) { delete ctx; }

octattn_status octattn_context_set_threads(octattn_context* ctx, int32_t threads) {
  return api::Guard(ctx, [&]() -> api::Check {
    OCTATTN_CHECK(api::NeedContext(ctx));
    if (threads < 0) return api::Fail(OCTATTN_ERROR_INVALID_OPTION, "threads is negative");
    ctx->pool = std::make_unique<octattn::parallel::Pool>(threads);
    return api::Check();
  });
}

octattn_status octattn_context_get_threads(const octattn_context* ctx, int32_t* out) {
  if (!ctx || !out) return OCTATTN_ERROR_NULL_POINTER;
  *out = ctx->pool->threads();
  return OCTATTN_OK;
}

octattn_status octattn_context_set_target(octattn_context* ctx, octattn_backend backend,
                                          octattn_target target) {
  return api::Guard(ctx, [&]() -> api::Check {
    OCTATTN_CHECK(api::NeedContext(ctx));
    const kernels::Table* table;
    OCTATTN_CHECK(octattn::api::ResolveTarget(backend, target, &table));
    octattn::api::SetTables(ctx, backend, target, table);
    return api::Check();
  });
}

octattn_status octattn_context_set_memory_limit(octattn_context* ctx, uint64_t bytes) {
  if (!ctx) return OCTATTN_ERROR_NULL_POINTER;
  ctx->memory_limit = bytes;
  return OCTATTN_OK;
}

const char* octattn_context_last_error(const octattn_context* ctx) {
  return ctx ? ctx->last_error.c_str() : "";
}

octattn_status octattn_context_last_run(const octattn_context* ctx, octattn_run_info* info) {
  if (!ctx || !info) return OCTATTN_ERROR_NULL_POINTER;
  if (info->struct_size < octattn::api::kRunInfoSize_0_1) return OCTATTN_ERROR_STRUCT_SIZE;
  // Only the bytes the caller's struct has: an older caller's struct is shorter.
  const size_t size = info->struct_size;
  const size_t n = std::min(size, sizeof(octattn_run_info));
  std::memcpy(info, &ctx->last_run, n);
  info->struct_size = size;
  return OCTATTN_OK;
}

octattn_status octattn_available_targets(octattn_backend backend, octattn_target* targets,
                                         size_t capacity, size_t* count) {
  return api::Guard(nullptr, [&]() -> api::Check {
    if (!count) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "count is NULL");
    if (capacity > 0 && !targets) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "targets is NULL");
    if (backend < OCTATTN_BACKEND_AUTO || backend > OCTATTN_BACKEND_XSIMD)
      return api::Fail(OCTATTN_ERROR_INVALID_OPTION, "unknown backend");
    size_t n = 0;
    // The one auto picks first, then the others from the newest extensions down, then
    // amx_bf16, which auto never picks.
    const kernels::Table* best;
    OCTATTN_CHECK(octattn::api::ResolveTarget(backend, OCTATTN_TARGET_AUTO, &best));
    const auto first = static_cast<octattn_target>(best->target);
    auto add = [&](octattn_target t) {
      const kernels::Table* table;
      if (octattn::api::ResolveTarget(backend, t, &table).failed()) return;
      if (n < capacity) targets[n] = t;
      ++n;
    };
    add(first);
    for (octattn_target t = octattn::kernels::kLastTarget; t >= OCTATTN_TARGET_SCALAR; --t)
      if (t != OCTATTN_TARGET_AMX_BF16 && t != first) add(t);
    add(OCTATTN_TARGET_AMX_BF16);
    *count = n;
    return api::Check();
  });
}

}  // extern "C"
