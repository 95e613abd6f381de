// The context behind octattn_context: thread pool, SIMD choice, scratch, last error
// and last run. Also the guard that turns exceptions into statuses.
#ifndef OCTATTN_LIB_API_CONTEXT_H_
#define OCTATTN_LIB_API_CONTEXT_H_

#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "lib/api/validate.h"
#include "lib/kernels/kernels.h"
#include "lib/parallel/parallel.h"
#include "lib/plan/schedule.h"
#include "octattn.h"

struct octattn_context {
  std::unique_ptr<octattn::parallel::Pool> pool;
  octattn_backend backend = OCTATTN_BACKEND_AUTO;
  octattn_target target = OCTATTN_TARGET_AUTO;
  // The table backend and target resolved to when they were set: a CPU's targets do not
  // change, and asking Highway for them costs microseconds (CPUID traps in a VM).
  const octattn::kernels::Table* table = nullptr;
  // The table of OCTATTN_QK_INT8 calls: under auto, kernels::HighwayQkInt8's; else table.
  const octattn::kernels::Table* qk_int8_table = nullptr;
  // The fused kernel's core-dependent choices, this CPU's unless a test sets them.
  octattn::kernels::Tuning tuning = octattn::kernels::DefaultTuning();
  uint64_t memory_limit = 0;
  std::string last_error;
  octattn_run_info last_run{};
  // Scratch reused across calls: fresh pages cost a fault each, more than the call.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  ~octattn_context();
};

namespace octattn {
namespace api {

// The table the context's backend and target selected when they were set (for a call
// with OCTATTN_QK_INT8: its qk_int8_table).
const kernels::Table* SelectTable(const octattn_context& ctx, bool qk_int8 = false);
// Sets the context's backend, target and their tables.
void SetTables(octattn_context* ctx, octattn_backend backend, octattn_target target,
               const kernels::Table* table);
// Resolves (backend, target) to a table, or UNSUPPORTED / INVALID_OPTION.
Check ResolveTarget(octattn_backend backend, octattn_target target, const kernels::Table** out);

// `bytes` of 64-byte aligned scratch: the caller's workspace if given (checked for
// size), else the context's, grown within its memory limit.
Check AcquireScratch(octattn_context* ctx, size_t bytes, void* workspace, size_t workspace_size,
                     void** out);

// Notes what a call ran (octattn_context_last_run).
void RecordRun(octattn_context* ctx, plan::Algorithm algorithm, const kernels::Table* table,
               int64_t shared_kv_rows = 0);

// Runs body() and maps a Check or an exception to the status it returns, recording the
// message in the context. Every extern "C" function with a context goes through it.
template <class Body>
octattn_status Guard(octattn_context* ctx, Body&& body) noexcept {
  try {
    Check c = body();
    // A success keeps the last failure's message (the header's promise).
    if (ctx && c.failed()) ctx->last_error = c.message;
    return c.code;
  } catch (const std::bad_alloc&) {
    if (ctx) ctx->last_error.assign("out of memory");
    return OCTATTN_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    try {
      if (ctx) ctx->last_error = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    return OCTATTN_ERROR_INTERNAL;
  } catch (...) {
    try {
      if (ctx) ctx->last_error.assign("internal error: unknown exception");
    } catch (...) {
    }
    return OCTATTN_ERROR_INTERNAL;
  }
}

}  // namespace api
}  // namespace octattn

#endif  // OCTATTN_LIB_API_CONTEXT_H_
