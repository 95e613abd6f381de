// octattn_attention and its workspace size: validate completely, acquire the scratch,
// hand the call to the forward runner.
#include <cstddef>
#include <cstdint>

#include "lib/api/context.h"
#include "lib/api/validate.h"
#include "lib/run/run.h"
#include "octattn.h"

namespace api = octattn::api;
namespace run = octattn::run;

extern "C" {

octattn_status octattn_attention_workspace_size(octattn_context* ctx,
                                                const octattn_attention_options* options,
                                                const octattn_tensor* q, const octattn_tensor* k,
                                                const octattn_tensor* v, const octattn_tensor* o,
                                                const octattn_tensor* lse,
                                                const octattn_tensor* weights, size_t* bytes) {
  return api::Guard(ctx, [&]() -> api::Check {
    run::Call c;
    api::Sequences seqs;
    OCTATTN_CHECK(api::ValidateAttention(ctx, options, q, k, v, o, lse, weights, &c, &seqs));
    if (!bytes) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "bytes is NULL");
    const size_t need = run::ForwardWorkspaceBytes(c, ctx->pool->threads());
    if (need == SIZE_MAX)
      return api::Fail(OCTATTN_ERROR_OVERFLOW, "the call's scratch size overflows size_t");
    *bytes = need;
    return api::Check();
  });
}

octattn_status octattn_attention(octattn_context* ctx, const octattn_attention_options* options,
                                 const octattn_tensor* q, const octattn_tensor* k,
                                 const octattn_tensor* v, octattn_tensor* o, octattn_tensor* lse,
                                 octattn_tensor* weights, void* workspace, size_t workspace_size) {
  return api::Guard(ctx, [&]() -> api::Check {
    run::Call c;
    api::Sequences seqs;
    OCTATTN_CHECK(api::ValidateAttention(ctx, options, q, k, v, o, lse, weights, &c, &seqs));
    OCTATTN_CHECK(api::CheckWorkspaceDisjoint(workspace, workspace_size, c));
    void* scratch = nullptr;
    OCTATTN_CHECK(api::AcquireScratch(ctx, run::ForwardWorkspaceBytes(c, ctx->pool->threads()),
                                      workspace, workspace_size, &scratch));
    run::Forward(*ctx->pool, &c, scratch);
    api::RecordRun(ctx, c.algorithm, c.table, c.shared_kv_rows);
    return api::Check();
  });
}

}  // extern "C"
