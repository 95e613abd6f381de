// octattn_merge: validation of the partials and the merged outputs, then one task per
// (batch, head) on the context's pool.
#include <cstring>
#include <string>

#include "lib/api/context.h"
#include "lib/api/validate.h"
#include "lib/base/mask.h"
#include "lib/base/sizes.h"
#include "lib/kernels/merge/merge.h"
#include "lib/run/run.h"
#include "octattn.h"

namespace base = octattn::base;
namespace api = octattn::api;
namespace kernels = octattn::kernels;
namespace plan = octattn::plan;

namespace {

constexpr size_t kAlign = 64;

// The same view: data, shape and strides (an in-place output).
bool SameView(const octattn_tensor& a, const octattn_tensor& b) {
  return a.data == b.data && std::memcmp(a.shape, b.shape, sizeof(a.shape)) == 0 &&
         std::memcmp(a.stride, b.stride, sizeof(a.stride)) == 0;
}

std::string Part(const char* name, size_t p) {
  return std::string(name) + "[" + std::to_string(p) + "]";
}

// Sizes of `t` equal those of `want` (dims 0..2) and its last is `last`.
api::Check CheckRows(const api::TensorInfo& t, const std::string& name, const api::TensorInfo& want,
                     int64_t last) {
  for (int d = 0; d < 3; ++d)
    OCTATTN_CHECK(api::CheckSize(t, name.c_str(), d, want.shape[d], "as o"));
  return api::CheckSize(t, name.c_str(), 3, last, "value_dim of o, or 1 for an lse");
}

}  // namespace

extern "C" {

octattn_status octattn_merge(octattn_context* ctx, size_t parts, const octattn_tensor* o_parts,
                             const octattn_tensor* lse_parts, octattn_tensor* o,
                             octattn_tensor* lse) {
  return api::Guard(ctx, [&]() -> api::Check {
    if (!ctx) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "context is NULL");
    if (parts == 0) return api::Fail(OCTATTN_ERROR_INVALID_SHAPE, "parts is 0");
    if (!o_parts || !lse_parts)
      return api::Fail(OCTATTN_ERROR_NULL_POINTER, "o_parts or lse_parts is NULL");
    api::TensorInfo to, tl;
    OCTATTN_CHECK(api::ValidateTensor(o, "o", api::Role::kOutput, false, &to));
    if (lse) {
      OCTATTN_CHECK(api::ValidateTensor(lse, "lse", api::Role::kOutput, false, &tl));
      OCTATTN_CHECK(CheckRows(tl, "lse", to, 1));
      OCTATTN_CHECK(api::CheckDisjoint(to, "o", tl, "lse"));
    }
    for (size_t p = 0; p < parts; ++p) {
      api::TensorInfo po, pl;
      const std::string on = Part("o_parts", p), ln = Part("lse_parts", p);
      OCTATTN_CHECK(api::ValidateTensor(&o_parts[p], on.c_str(), api::Role::kInput, false, &po));
      OCTATTN_CHECK(api::ValidateTensor(&lse_parts[p], ln.c_str(), api::Role::kInput, false, &pl));
      OCTATTN_CHECK(CheckRows(po, on, to, to.shape[3]));
      OCTATTN_CHECK(CheckRows(pl, ln, to, 1));
      // An output may be the very view of a partial (in place); no other overlap.
      if (!SameView(*o, o_parts[p])) {
        OCTATTN_CHECK(api::CheckDisjoint(to, "o", po, on.c_str()));
      }
      OCTATTN_CHECK(api::CheckDisjoint(to, "o", pl, ln.c_str()));
      if (lse) {
        if (!SameView(*lse, lse_parts[p])) {
          OCTATTN_CHECK(api::CheckDisjoint(tl, "lse", pl, ln.c_str()));
        }
        OCTATTN_CHECK(api::CheckDisjoint(tl, "lse", po, on.c_str()));
      }
    }
    const int64_t heads = to.shape[1], rows = to.shape[2], value_dim = to.shape[3];
    const size_t slot =
        base::RoundUp(base::SatAdd(base::SatMul(parts, sizeof(kernels::PartialRow)),
                                   base::SatMul(base::Count(value_dim), sizeof(double))),
                      kAlign);
    void* scratch = nullptr;
    OCTATTN_CHECK(api::AcquireScratch(
        ctx, base::SatAdd(base::SatMul(slot, base::Count(ctx->pool->threads())), kAlign), nullptr,
        0, &scratch));
    auto at = [](const octattn_tensor& t, int64_t b, int64_t h, int64_t i) {
      return static_cast<float*>(t.data) + b * t.stride[0] + h * t.stride[1] + i * t.stride[2];
    };
    octattn::run::RunTasks(
        *ctx->pool, to.shape[0] * heads, scratch, slot, [&](int64_t task, void* s) {
          const int64_t b = task / heads, h = task % heads;
          auto* partial = static_cast<kernels::PartialRow*>(s);
          double* acc = reinterpret_cast<double*>(
              static_cast<char*>(s) +
              base::RoundUp(parts * sizeof(kernels::PartialRow), kAlign / 8));
          for (int64_t i = 0; i < rows; ++i) {
            for (size_t p = 0; p < parts; ++p)
              partial[p] = {at(o_parts[p], b, h, i), o_parts[p].stride[3],
                            *at(lse_parts[p], b, h, i)};
            kernels::MergeRow(partial, parts, value_dim, at(*o, b, h, i), o->stride[3],
                              lse ? at(*lse, b, h, i) : nullptr, acc);
          }
        });
    return api::Check();
  });
}

}  // extern "C"
