// octattn_attention_backward and its workspace size: validate completely (the forward
// call's checks, then the gradients' own), acquire the scratch, hand the call to the
// backward runner.
#include <cstddef>
#include <cstdint>

#include "lib/api/context.h"
#include "lib/api/validate.h"
#include "lib/run/run.h"
#include "octattn.h"

namespace api = octattn::api;
namespace run = octattn::run;

extern "C" {

octattn_status octattn_attention_backward_workspace_size(
    octattn_context* ctx, const octattn_attention_options* options, const octattn_tensor* q,
    const octattn_tensor* k, const octattn_tensor* v, const octattn_tensor* o,
    const octattn_tensor* lse, const octattn_tensor* dout, const octattn_tensor* dlse,
    const octattn_tensor* dq, const octattn_tensor* dk, const octattn_tensor* dv,
    const float* dsinks, const octattn_tensor* dbias, size_t* bytes) {
  return api::Guard(ctx, [&]() -> api::Check {
    run::BackwardCall c;
    api::Sequences seqs;
    OCTATTN_CHECK(api::ValidateBackward(ctx, options, q, k, v, o, lse, dout, dlse, dq, dk, dv,
                                        dsinks, dbias, &c, &seqs));
    if (!bytes) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "bytes is NULL");
    const size_t need = run::BackwardWorkspaceBytes(c, ctx->pool->threads());
    if (need == SIZE_MAX)
      return api::Fail(OCTATTN_ERROR_OVERFLOW, "the call's scratch size overflows size_t");
    *bytes = need;
    return api::Check();
  });
}

octattn_status octattn_attention_backward(
    octattn_context* ctx, const octattn_attention_options* options, const octattn_tensor* q,
    const octattn_tensor* k, const octattn_tensor* v, const octattn_tensor* o,
    const octattn_tensor* lse, const octattn_tensor* dout, const octattn_tensor* dlse,
    octattn_tensor* dq, octattn_tensor* dk, octattn_tensor* dv, float* dsinks,
    octattn_tensor* dbias, void* workspace, size_t workspace_size) {
  return api::Guard(ctx, [&]() -> api::Check {
    run::BackwardCall c;
    api::Sequences seqs;
    OCTATTN_CHECK(api::ValidateBackward(ctx, options, q, k, v, o, lse, dout, dlse, dq, dk, dv,
                                        dsinks, dbias, &c, &seqs));
    OCTATTN_CHECK(api::CheckBackwardWorkspaceDisjoint(workspace, workspace_size, c));
    void* scratch = nullptr;
    OCTATTN_CHECK(api::AcquireScratch(ctx, run::BackwardWorkspaceBytes(c, ctx->pool->threads()),
                                      workspace, workspace_size, &scratch));
    run::Backward(*ctx->pool, &c, scratch);
    api::RecordRun(ctx, c.fwd.algorithm, c.fwd.table);
    return api::Check();
  });
}

}  // extern "C"
