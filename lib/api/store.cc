// octattn_kv_store: validate completely, then hand the store to its runner.
#include <cstdint>
#include <string>

#include "lib/api/context.h"
#include "lib/api/validate.h"
#include "lib/run/store.h"
#include "octattn.h"

namespace api = octattn::api;
namespace base = octattn::base;
namespace run = octattn::run;

namespace {

api::Check ValidateStore(const octattn_tensor* src, octattn_tensor* dst, octattn_tensor* scale,
                         int64_t scale_rows, const int64_t* slots, run::StoreCall* c) {
  OCTATTN_CHECK(api::ValidateTensor(src, "src", api::Role::kInput, false, &c->src, api::kFloating));
  if (!dst) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "dst: tensor is NULL");
  OCTATTN_CHECK(api::ValidateTensor(dst, "dst", api::Role::kOutput, false, &c->dst, api::kCache));
  const run::TensorInfo &s = c->src, &d = c->dst;
  if (scale_rows < 0 || scale_rows > run::kMaxStoreScaleRows)
    return api::Fail(
        OCTATTN_ERROR_INVALID_OPTION,
        "scale_rows must be in [0, " + std::to_string(run::kMaxStoreScaleRows) + "] (0: 1)");
  c->scale_rows = scale_rows == 0 ? 1 : scale_rows;
  const int64_t rows = c->scale_rows;
  OCTATTN_CHECK(api::CheckSize(d, "dst", 1, s.shape[1], "heads of src"));
  OCTATTN_CHECK(api::CheckSize(d, "dst", 3, s.shape[3], "dim of src"));
  if (d.type == base::kDsMla && d.shape[3] != base::kDsMlaValues)
    return api::Fail(
        OCTATTN_ERROR_INVALID_SHAPE,
        "dst: an FP8_DS_MLA store writes whole rows (dim 576), not " + std::to_string(d.shape[3]));
  if (slots) {
    c->slots = slots;
    c->block_size = d.shape[2];
    int64_t capacity;
    if (__builtin_mul_overflow(d.shape[0], d.shape[2], &capacity))
      return api::Fail(OCTATTN_ERROR_OVERFLOW, "dst: num_blocks * block_size overflows");
    int64_t n;  // the slots: one per row of every batch entry
    if (__builtin_mul_overflow(s.shape[0], s.shape[2], &n))
      return api::Fail(OCTATTN_ERROR_OVERFLOW, "src: batch * rows (the slots) overflows");
    for (int64_t i = 0; i < n; ++i) {
      const int64_t slot = slots[i];
      if (slot >= capacity)
        return api::Fail(OCTATTN_ERROR_INVALID_OPTION,
                         "slots[" + std::to_string(i) + "] (" + std::to_string(slot) +
                             ") is beyond dst's num_blocks * block_size (" +
                             std::to_string(capacity) + ")");
      if (rows > 1 && d.type == base::kI8) {
        const int64_t t = i % s.shape[2], first = slots[i - t % rows];
        const bool ok = first < 0 ? slot < 0
                                  : first % rows == 0 && slot == first + t % rows &&
                                        (first % d.shape[2]) + rows <= d.shape[2];
        if (!ok)
          return api::Fail(OCTATTN_ERROR_INVALID_OPTION,
                           "slots[" + std::to_string(i) +
                               "]: an INT8 scale's rows go to consecutive slots from a multiple "
                               "of scale_rows, in one block (or all negative)");
      }
    }
  } else {
    for (int dim = 0; dim < 3; ++dim)
      OCTATTN_CHECK(api::CheckSize(d, "dst", dim, s.shape[dim], "as src (no slots)"));
  }
  const bool takes = base::Scaled(d.type);
  if (!takes) {
    if (scale)
      return api::Fail(OCTATTN_ERROR_INVALID_OPTION, "scale is given, but dst's dtype takes none");
    if (rows != 1)
      return api::Fail(OCTATTN_ERROR_INVALID_OPTION, "scale_rows is set, but dst takes no scale");
  } else if (d.type == base::kI8) {
    if (!scale) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "scale is NULL: an INT8 dst needs it");
    OCTATTN_CHECK(
        api::ValidateTensor(scale, "scale", api::Role::kOutput, false, &c->scale, api::kFloating));
    const int64_t cache_rows = slots ? d.shape[2] : s.shape[2];
    if (cache_rows % rows != 0)
      return api::Fail(OCTATTN_ERROR_INVALID_SHAPE,
                       std::string(slots ? "dst's block size" : "src's rows") + " (" +
                           std::to_string(cache_rows) + ") is not a multiple of scale_rows (" +
                           std::to_string(rows) + ")");
    const run::TensorInfo& t = c->scale;
    if (s.shape[3] % t.shape[3] != 0)
      return api::Fail(OCTATTN_ERROR_INVALID_SHAPE,
                       "scale: shape[3] does not divide dim: channels per scale must be whole");
    const int64_t want[3] = {d.shape[0], d.shape[1], cache_rows / rows};
    for (int dim = 0; dim < 3; ++dim)
      OCTATTN_CHECK(api::CheckSize(t, "scale", dim, want[dim], "of dst's scale rows"));
    c->group = s.shape[3] / t.shape[3];
  } else if (scale) {  // fp8: an input, broadcast as options.k_scale
    run::ScaleInfo info;
    OCTATTN_CHECK(api::ValidateScales(scale, rows, d, "dst", slots != nullptr, &info));
    c->scale = info.t;
    c->group = info.group;
  } else if (rows != 1) {
    return api::Fail(OCTATTN_ERROR_INVALID_OPTION, "scale_rows is set without a scale");
  }
  OCTATTN_CHECK(api::CheckDisjoint(d, "dst", s, "src"));
  if (c->scale.hi != 0) {
    OCTATTN_CHECK(api::CheckDisjoint(d, "dst", c->scale, "scale"));
    if (d.type == base::kI8) OCTATTN_CHECK(api::CheckDisjoint(c->scale, "scale", s, "src"));
  }
  return api::Check();
}

}  // namespace

extern "C" {

octattn_status octattn_kv_store(octattn_context* ctx, const octattn_tensor* src,
                                octattn_tensor* dst, octattn_tensor* scale, int64_t scale_rows,
                                const int64_t* slots) {
  return api::Guard(ctx, [&]() -> api::Check {
    OCTATTN_CHECK(api::NeedContext(ctx));
    run::StoreCall c;
    OCTATTN_CHECK(ValidateStore(src, dst, scale, scale_rows, slots, &c));
    run::Store(*ctx->pool, *api::SelectTable(*ctx), c);
    return api::Check();
  });
}

}  // extern "C"
