// The stage entry points (scores, scale, mask, softmax, weighted sum) and the head
// layout copies. Same pattern as the composed call: validate all, then run per head.
#include <cmath>
#include <string>

#include "lib/api/context.h"
#include "lib/api/validate.h"
#include "lib/base/mask.h"
#include "lib/base/sizes.h"
#include "lib/kernels/kernels.h"
#include "lib/kernels/layout/layout.h"
#include "lib/run/run.h"
#include "octattn.h"

namespace base = octattn::base;
namespace api = octattn::api;
namespace kernels = octattn::kernels;
namespace plan = octattn::plan;

namespace {

api::Check NeedContextAndTable(octattn_context* ctx, const kernels::Table** table) {
  if (!ctx) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "context is NULL");
  *table = octattn::api::SelectTable(*ctx);
  if (!*table)
    return api::Fail(OCTATTN_ERROR_UNSUPPORTED, "the context's SIMD target is not available");
  return api::Check();
}

// The stages work on one dense scores tensor: a batch of sequences is
// octattn_attention's.
api::Check NoSequences(const octattn_attention_options& opt) {
  if (!octattn::api::HasSequences(opt)) return api::Check();
  return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                   "the stages take no sequences (options.q_starts, kv_starts, kv_lens, "
                   "sequences): mask each sequence's scores with a call of its own");
}

// Runs body(b, h, slot_scratch) for every (batch, head) of a [B, H, rows, cols] tensor,
// with `slot_floats` of scratch each (the composed call's runner).
template <class Body>
api::Check RunPerHead(octattn_context* ctx, int64_t batch, int64_t heads, size_t slot_floats,
                      Body&& body) {
  const size_t slot = base::RoundUp(base::SatMul(slot_floats, sizeof(float)), base::kAlign);
  void* scratch = nullptr;
  OCTATTN_CHECK(octattn::api::AcquireScratch(
      ctx, base::SatAdd(base::SatMul(slot, base::Count(ctx->pool->threads())), base::kAlign),
      nullptr, 0, &scratch));
  octattn::run::RunTasks(*ctx->pool, batch * heads, scratch, slot, [&](int64_t task, void* s) {
    body(task / heads, task % heads, static_cast<float*>(s));
  });
  return api::Check();
}

// Key lists (validated): named[j] = whether row i of list head g of batch entry b names
// key j.
void MarkListed(const kernels::Mods& m, int64_t b, int64_t g, int64_t i, int64_t kv_len,
                uint8_t* named) {
  for (int64_t j = 0; j < kv_len; ++j) named[j] = 0;
  kernels::ForEachListed(
      m, i, [&](int64_t j) { named[j] = 1; }, b, g);
}

void Record(octattn_context* ctx, const kernels::Table* table) {
  octattn::api::RecordRun(ctx, plan::Algorithm::kNaive, table);
}

float* At(const api::TensorInfo& t, int64_t b, int64_t h) {
  return t.data + b * t.stride[0] + h * t.stride[1];
}
// Head (b, h) of a [B, H, rows, cols] tensor as a matrix.
kernels::Matrix HeadOf(const api::TensorInfo& t, int64_t b, int64_t h) {
  return {At(t, b, h), t.stride[2], t.stride[3]};
}
kernels::ConstMatrix ConstHeadOf(const api::TensorInfo& t, int64_t b, int64_t h) {
  return {At(t, b, h), t.stride[2], t.stride[3]};
}

// GQA: kv head of query head h.
int64_t KvHead(int64_t h, int64_t q_heads, int64_t kv_heads) { return h / (q_heads / kv_heads); }

// A 16-bit operand of a stage is widened head by head into its task's scratch (exact):
// the stage's result is that of the f32 stage on the widened values.
size_t Widened(const api::TensorInfo& t, int64_t rows, int64_t cols) {
  if (t.type == base::kF32) return 0;
  return base::RoundUp(base::SatMul(base::Count(rows), base::Count(cols)),
                       base::kAlign / sizeof(float));
}
// Head (b, h) of t as a matrix: the caller's, or its rows widened into `buf`.
kernels::ConstMatrix HeadOrWidened(const api::TensorInfo& t, int64_t b, int64_t h, int64_t rows,
                                   int64_t cols, float* buf) {
  const float* head = base::ElemAt(t.data, b * t.stride[0] + h * t.stride[1], t.type);
  if (t.type == base::kF32) return {head, t.stride[2], t.stride[3]};
  for (int64_t i = 0; i < rows; ++i)
    base::WidenRow(base::ElemAt(head, i * t.stride[2], t.type), t.stride[3], t.type, cols,
                   buf + i * cols);
  return {buf, cols, 1};
}

}  // namespace

extern "C" {

octattn_status octattn_scores(octattn_context* ctx, const octattn_tensor* q,
                              const octattn_tensor* k, octattn_tensor* scores) {
  return api::Guard(ctx, [&]() -> api::Check {
    const kernels::Table* table;
    OCTATTN_CHECK(NeedContextAndTable(ctx, &table));
    api::TensorInfo tq, tk, ts;
    OCTATTN_CHECK(api::ValidateTensor(q, "q", api::Role::kInput, false, &tq, api::kFloating));
    OCTATTN_CHECK(api::ValidateTensor(k, "k", api::Role::kInput, false, &tk, api::kFloating));
    OCTATTN_CHECK(api::ValidateTensor(scores, "scores", api::Role::kOutput, false, &ts));
    const int64_t batch = tq.shape[0], q_heads = tq.shape[1], kv_heads = tk.shape[1];
    OCTATTN_CHECK(api::CheckSize(tk, "k", 0, batch, "batch of q"));
    OCTATTN_CHECK(api::CheckSize(tk, "k", 3, tq.shape[3], "head_dim of q"));
    OCTATTN_CHECK(api::CheckGroups(q_heads, kv_heads));
    OCTATTN_CHECK(api::CheckSize(ts, "scores", 0, batch, "batch of q"));
    OCTATTN_CHECK(api::CheckSize(ts, "scores", 1, q_heads, "q_heads of q"));
    OCTATTN_CHECK(api::CheckSize(ts, "scores", 2, tq.shape[2], "q_len of q"));
    OCTATTN_CHECK(api::CheckSize(ts, "scores", 3, tk.shape[2], "kv_len of k"));
    OCTATTN_CHECK(api::CheckDisjoint(ts, "scores", tq, "q"));
    OCTATTN_CHECK(api::CheckDisjoint(ts, "scores", tk, "k"));
    const int64_t q_len = tq.shape[2], kv_len = tk.shape[2], head_dim = tq.shape[3];
    const size_t own =
        base::RoundUp(table->scores_scratch_floats(kv_len, head_dim), base::kAlign / sizeof(float));
    const size_t qw = Widened(tq, q_len, head_dim), kw = Widened(tk, kv_len, head_dim);
    OCTATTN_CHECK(RunPerHead(ctx, batch, q_heads, base::SatAdd(own, base::SatAdd(qw, kw)),
                             [&](int64_t b, int64_t h, float* scratch) {
                               table->scores_head(
                                   HeadOrWidened(tq, b, h, q_len, head_dim, scratch + own),
                                   HeadOrWidened(tk, b, KvHead(h, q_heads, kv_heads), kv_len,
                                                 head_dim, scratch + own + qw),
                                   HeadOf(ts, b, h), q_len, kv_len, head_dim, scratch);
                             }));
    Record(ctx, table);
    return api::Check();
  });
}

octattn_status octattn_scale(octattn_context* ctx, octattn_tensor* scores, float scale) {
  return api::Guard(ctx, [&]() -> api::Check {
    const kernels::Table* table;
    OCTATTN_CHECK(NeedContextAndTable(ctx, &table));
    api::TensorInfo ts;
    OCTATTN_CHECK(api::ValidateTensor(scores, "scores", api::Role::kOutput, false, &ts));
    if (!std::isfinite(scale))
      return api::Fail(OCTATTN_ERROR_INVALID_OPTION, "scale is not finite");
    OCTATTN_CHECK(RunPerHead(ctx, ts.shape[0], ts.shape[1], 0, [&](int64_t b, int64_t h, float*) {
      table->scale_rows(HeadOf(ts, b, h), ts.shape[2], ts.shape[3], scale);
    }));
    Record(ctx, table);
    return api::Check();
  });
}

octattn_status octattn_mask(octattn_context* ctx, const octattn_attention_options* options,
                            octattn_tensor* scores) {
  return api::Guard(ctx, [&]() -> api::Check {
    const kernels::Table* table;
    OCTATTN_CHECK(NeedContextAndTable(ctx, &table));
    octattn_attention_options opt;
    OCTATTN_CHECK(octattn::api::ValidateOptions(options, &opt));
    OCTATTN_CHECK(NoSequences(opt));
    api::TensorInfo ts;
    OCTATTN_CHECK(api::ValidateTensor(scores, "scores", api::Role::kOutput, false, &ts));
    const int64_t q_len = ts.shape[2], kv_len = ts.shape[3];
    const base::Mask mask = api::ResolveMask(opt, q_len, kv_len);
    // Only the mask tensor of the modifiers: the others are octattn_modify_scores'.
    octattn_attention_options only_mask;
    octattn_attention_options_init(&only_mask);
    only_mask.mask = opt.mask;
    only_mask.tree = opt.tree;
    only_mask.tree_row_bytes = opt.tree_row_bytes;
    only_mask.tree_stride = opt.tree_stride;
    only_mask.block_counts = opt.block_counts;
    only_mask.block_indices = opt.block_indices;
    only_mask.full_block_counts = opt.full_block_counts;
    only_mask.full_block_indices = opt.full_block_indices;
    only_mask.block_q = opt.block_q;
    only_mask.block_kv = opt.block_kv;
    kernels::Mods mods;
    api::TensorInfo tb, tm, blocks[4];
    OCTATTN_CHECK(api::ValidateMods(only_mask, ts.shape, &mods, &tb, &tm, blocks));
    if (mods.keep)
      OCTATTN_CHECK(
          api::CheckDisjoint(ts, "scores", tm, opt.tree ? "options.tree" : "options.mask"));
    for (const api::TensorInfo& t : blocks)
      if (t.hi != 0) OCTATTN_CHECK(api::CheckDisjoint(ts, "scores", t, "a block mask's tensor"));
    api::TensorInfo lists[4];
    int64_t group = 0;  // query heads a list serves (0: no lists)
    OCTATTN_CHECK(api::ValidateStageKeyLists(opt, ts.shape, &mods, lists, &group));
    for (const api::TensorInfo& t : lists)
      if (t.hi != 0) OCTATTN_CHECK(api::CheckDisjoint(ts, "scores", t, "a key list's tensor"));
    // Key lists: a byte per key of a row (scratch), whether its lists name it.
    const size_t marks = group > 0 ? static_cast<size_t>(kv_len / 4 + 1) : 0;
    OCTATTN_CHECK(
        RunPerHead(ctx, ts.shape[0], ts.shape[1], marks, [&](int64_t b, int64_t h, float* scratch) {
          const kernels::Matrix m = HeadOf(ts, b, h);
          table->mask_rows(m, q_len, kv_len, mask);
          if (group > 0) {
            uint8_t* named = reinterpret_cast<uint8_t*>(scratch);
            for (int64_t i = 0; i < q_len; ++i) {
              MarkListed(mods, b, h / group, i, kv_len, named);
              for (int64_t j = 0; j < kv_len; ++j)
                if (!named[j]) m.data[i * m.row + j * m.col] = -HUGE_VALF;
            }
          }
          if (!mods.keep && mods.block_kv == 0) return;
          kernels::Mods at = octattn::run::ModsAt(mods, tb, tm, b, h);
          kernels::AdvanceLists(&at, b, 0);
          for (int64_t i = 0; i < q_len; ++i) {
            const base::RowBlocks rb = kernels::RowBlocksOf(at, 0, i);
            const uint8_t* keep = at.keep ? at.keep + i * at.keep_row : nullptr;
            for (int64_t j = 0; j < kv_len; ++j)
              if (!base::RowKeeps(rb, base::BlockKindOf(rb, j), keep, at.keep_col, at.keep_bits,
                                  at.keep_from, j))
                m.data[i * m.row + j * m.col] = -HUGE_VALF;
          }
        }));
    Record(ctx, table);
    return api::Check();
  });
}

octattn_status octattn_modify_scores(octattn_context* ctx, const octattn_attention_options* options,
                                     octattn_tensor* scores) {
  return api::Guard(ctx, [&]() -> api::Check {
    const kernels::Table* table;
    OCTATTN_CHECK(NeedContextAndTable(ctx, &table));
    octattn_attention_options opt;
    OCTATTN_CHECK(octattn::api::ValidateOptions(options, &opt));
    OCTATTN_CHECK(NoSequences(opt));
    api::TensorInfo ts;
    OCTATTN_CHECK(api::ValidateTensor(scores, "scores", api::Role::kOutput, false, &ts));
    opt.mask = nullptr;  // octattn_mask's, as is the tree
    opt.tree = nullptr;
    opt.tree_row_bytes = 0;
    opt.tree_stride = 0;
    opt.block_counts = opt.block_indices = nullptr;  // octattn_mask's too
    opt.full_block_counts = opt.full_block_indices = nullptr;
    opt.block_q = opt.block_kv = 0;
    opt.sinks = nullptr;  // octattn_softmax_sinks'
    kernels::Mods mods;
    api::TensorInfo tb, tm;
    OCTATTN_CHECK(api::ValidateMods(opt, ts.shape, &mods, &tb, &tm));
    if (mods.bias) OCTATTN_CHECK(api::CheckDisjoint(ts, "scores", tb, "options.bias"));
    const int64_t q_len = ts.shape[2], kv_len = ts.shape[3];
    const base::Mask mask = api::ResolveMask(opt, q_len, kv_len);
    OCTATTN_CHECK(RunPerHead(ctx, ts.shape[0], ts.shape[1], table->modify_scratch_floats(kv_len),
                             [&](int64_t b, int64_t h, float* scratch) {
                               table->modify_rows(HeadOf(ts, b, h), q_len, kv_len, mask.q_start,
                                                  octattn::run::ModsAt(mods, tb, tm, b, h),
                                                  scratch);
                             }));
    Record(ctx, table);
    return api::Check();
  });
}

}  // extern "C"

namespace {

api::Check Softmax(octattn_context* ctx, octattn_tensor* scores, const float* sinks,
                   octattn_tensor* lse) {
  const kernels::Table* table;
  OCTATTN_CHECK(NeedContextAndTable(ctx, &table));
  api::TensorInfo ts, tl;
  OCTATTN_CHECK(api::ValidateTensor(scores, "scores", api::Role::kOutput, false, &ts));
  if (lse) {
    OCTATTN_CHECK(api::ValidateTensor(lse, "lse", api::Role::kOutput, false, &tl));
    for (int d = 0; d < 3; ++d)
      OCTATTN_CHECK(api::CheckSize(tl, "lse", d, ts.shape[d], "of scores"));
    OCTATTN_CHECK(api::CheckSize(tl, "lse", 3, 1, "one value per row"));
    OCTATTN_CHECK(api::CheckDisjoint(tl, "lse", ts, "scores"));
  }
  const int64_t rows = ts.shape[2], cols = ts.shape[3];
  if (sinks)
    for (int64_t h = 0; h < ts.shape[1]; ++h)
      if (std::isnan(sinks[h]) || sinks[h] == HUGE_VALF)
        return api::Fail(OCTATTN_ERROR_INVALID_OPTION,
                         "sinks[" + std::to_string(h) + "] is NaN or +inf");
  OCTATTN_CHECK(RunPerHead(ctx, ts.shape[0], ts.shape[1], table->softmax_scratch_floats(cols),
                           [&](int64_t b, int64_t h, float* buf) {
                             table->softmax_rows(
                                 HeadOf(ts, b, h), rows, cols, lse ? At(tl, b, h) : nullptr,
                                 lse ? tl.stride[2] : 0, sinks ? sinks[h] : -HUGE_VALF, buf);
                           }));
  Record(ctx, table);
  return api::Check();
}

}  // namespace

extern "C" {

octattn_status octattn_softmax(octattn_context* ctx, octattn_tensor* scores, octattn_tensor* lse) {
  return api::Guard(ctx, [&]() { return Softmax(ctx, scores, nullptr, lse); });
}

octattn_status octattn_softmax_sinks(octattn_context* ctx, octattn_tensor* scores,
                                     const float* sinks, octattn_tensor* lse) {
  return api::Guard(ctx, [&]() -> api::Check {
    if (ctx && !sinks) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "sinks is NULL");
    return Softmax(ctx, scores, sinks, lse);
  });
}

octattn_status octattn_weighted_sum(octattn_context* ctx, const octattn_tensor* weights,
                                    const octattn_tensor* v, octattn_tensor* o) {
  return api::Guard(ctx, [&]() -> api::Check {
    const kernels::Table* table;
    OCTATTN_CHECK(NeedContextAndTable(ctx, &table));
    api::TensorInfo tw, tv, to;
    OCTATTN_CHECK(api::ValidateTensor(weights, "weights", api::Role::kInput, false, &tw));
    OCTATTN_CHECK(api::ValidateTensor(v, "v", api::Role::kInput, false, &tv, api::kFloating));
    OCTATTN_CHECK(api::ValidateTensor(o, "o", api::Role::kOutput, false, &to));
    const int64_t batch = tw.shape[0], q_heads = tw.shape[1], kv_heads = tv.shape[1];
    OCTATTN_CHECK(api::CheckSize(tv, "v", 0, batch, "batch of weights"));
    OCTATTN_CHECK(api::CheckSize(tv, "v", 2, tw.shape[3], "kv_len of weights"));
    OCTATTN_CHECK(api::CheckGroups(q_heads, kv_heads));
    OCTATTN_CHECK(api::CheckSize(to, "o", 0, batch, "batch of weights"));
    OCTATTN_CHECK(api::CheckSize(to, "o", 1, q_heads, "q_heads of weights"));
    OCTATTN_CHECK(api::CheckSize(to, "o", 2, tw.shape[2], "q_len of weights"));
    OCTATTN_CHECK(api::CheckSize(to, "o", 3, tv.shape[3], "value_dim of v"));
    OCTATTN_CHECK(api::CheckDisjoint(to, "o", tw, "weights"));
    OCTATTN_CHECK(api::CheckDisjoint(to, "o", tv, "v"));
    const int64_t q_len = tw.shape[2], kv_len = tw.shape[3], value_dim = tv.shape[3];
    const size_t vw = Widened(tv, kv_len, value_dim);
    const size_t own =
        base::RoundUp(table->weighted_sum_scratch_floats(kv_len, value_dim, vw ? 1 : tv.stride[3]),
                      base::kAlign / sizeof(float));
    OCTATTN_CHECK(RunPerHead(
        ctx, batch, q_heads, base::SatAdd(own, vw), [&](int64_t b, int64_t h, float* scratch) {
          table->weighted_sum_head(
              ConstHeadOf(tw, b, h),
              HeadOrWidened(tv, b, KvHead(h, q_heads, kv_heads), kv_len, value_dim, scratch + own),
              HeadOf(to, b, h), q_len, kv_len, value_dim, scratch);
        }));
    Record(ctx, table);
    return api::Check();
  });
}

}  // extern "C"

namespace {

// dst [B, H, T, D] <-> src [B, T, H*D] views for the head layout calls.
kernels::View4 HeadsView(const api::TensorInfo& bhtd) {
  return {bhtd.data,
          {bhtd.stride[0], bhtd.stride[1], bhtd.stride[2], bhtd.stride[3]},
          base::DtypeBytes(bhtd.type)};
}
// [B, T, C] with channels [offset, offset + heads * dim) seen as [B, heads, T, dim].
kernels::View4 SequenceAsHeads(const api::TensorInfo& btc, int64_t offset, int64_t dim) {
  const int64_t c = btc.stride[2];
  return {base::ElemAt(btc.data, offset * c, btc.type),
          {btc.stride[0], dim * c, btc.stride[1], c},
          base::DtypeBytes(btc.type)};
}

// The head layout calls copy elements of any floating dtype: src's and dst's the same.
api::Check SameType(const api::TensorInfo& dst, const char* name, const api::TensorInfo& src) {
  if (dst.type == src.type) return api::Check();
  return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                   std::string(name) + "'s dtype differs from src's (the copy converts nothing)");
}

api::Check CheckHeads(const api::TensorInfo& t, const char* name, int64_t batch, int64_t heads,
                      int64_t tokens, int64_t dim) {
  OCTATTN_CHECK(api::CheckSize(t, name, 0, batch, "batch"));
  OCTATTN_CHECK(api::CheckSize(t, name, 1, heads, "heads"));
  OCTATTN_CHECK(api::CheckSize(t, name, 2, tokens, "tokens"));
  OCTATTN_CHECK(api::CheckSize(t, name, 3, dim, "head_dim"));
  return api::Check();
}

void Copy(octattn_context* ctx, const kernels::View4& src, const kernels::View4& dst,
          const int64_t shape[4]) {
  const int64_t rows = shape[0] * shape[1];
  ctx->pool->Run(rows, [&](int64_t row, int) { kernels::CopyRows(src, dst, shape, row, row + 1); });
}

}  // namespace

extern "C" {

octattn_status octattn_split_heads(octattn_context* ctx, const octattn_tensor* src, int64_t heads,
                                   octattn_tensor* dst) {
  return api::Guard(ctx, [&]() -> api::Check {
    if (!ctx) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "context is NULL");
    api::TensorInfo ts, td;
    OCTATTN_CHECK(api::ValidateTensor(src, "src", api::Role::kInput, true, &ts, api::kFloating));
    OCTATTN_CHECK(api::ValidateTensor(dst, "dst", api::Role::kOutput, false, &td, api::kFloating));
    OCTATTN_CHECK(SameType(td, "dst", ts));
    if (heads < 1 || ts.shape[2] % heads != 0)
      return api::Fail(OCTATTN_ERROR_INVALID_SHAPE,
                       "channels are not a positive multiple of heads");
    const int64_t dim = ts.shape[2] / heads;
    OCTATTN_CHECK(CheckHeads(td, "dst", ts.shape[0], heads, ts.shape[1], dim));
    OCTATTN_CHECK(api::CheckDisjoint(td, "dst", ts, "src"));
    const int64_t shape[4] = {ts.shape[0], heads, ts.shape[1], dim};
    Copy(ctx, SequenceAsHeads(ts, 0, dim), HeadsView(td), shape);
    return api::Check();
  });
}

octattn_status octattn_merge_heads(octattn_context* ctx, const octattn_tensor* src,
                                   octattn_tensor* dst) {
  return api::Guard(ctx, [&]() -> api::Check {
    if (!ctx) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "context is NULL");
    api::TensorInfo ts, td;
    OCTATTN_CHECK(api::ValidateTensor(src, "src", api::Role::kInput, false, &ts, api::kFloating));
    OCTATTN_CHECK(api::ValidateTensor(dst, "dst", api::Role::kOutput, true, &td, api::kFloating));
    OCTATTN_CHECK(SameType(td, "dst", ts));
    const int64_t heads = ts.shape[1], dim = ts.shape[3];
    OCTATTN_CHECK(api::CheckSize(td, "dst", 0, ts.shape[0], "batch of src"));
    OCTATTN_CHECK(api::CheckSize(td, "dst", 1, ts.shape[2], "tokens of src"));
    if (td.shape[2] != heads * dim)
      return api::Fail(OCTATTN_ERROR_INVALID_SHAPE, "dst channels are not heads * head_dim of src");
    OCTATTN_CHECK(api::CheckDisjoint(td, "dst", ts, "src"));
    const int64_t shape[4] = {ts.shape[0], heads, ts.shape[2], dim};
    Copy(ctx, HeadsView(ts), SequenceAsHeads(td, 0, dim), shape);
    return api::Check();
  });
}

octattn_status octattn_split_qkv(octattn_context* ctx, const octattn_tensor* src, int64_t q_heads,
                                 int64_t kv_heads, octattn_tensor* q, octattn_tensor* k,
                                 octattn_tensor* v) {
  return api::Guard(ctx, [&]() -> api::Check {
    if (!ctx) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "context is NULL");
    api::TensorInfo ts, tq, tk, tv;
    OCTATTN_CHECK(api::ValidateTensor(src, "src", api::Role::kInput, true, &ts, api::kFloating));
    OCTATTN_CHECK(api::ValidateTensor(q, "q", api::Role::kOutput, false, &tq, api::kFloating));
    OCTATTN_CHECK(api::ValidateTensor(k, "k", api::Role::kOutput, false, &tk, api::kFloating));
    OCTATTN_CHECK(api::ValidateTensor(v, "v", api::Role::kOutput, false, &tv, api::kFloating));
    OCTATTN_CHECK(SameType(tq, "q", ts));
    OCTATTN_CHECK(SameType(tk, "k", ts));
    OCTATTN_CHECK(SameType(tv, "v", ts));
    if (q_heads < 1 || kv_heads < 1 || q_heads > octattn::api::kMaxSize ||
        kv_heads > octattn::api::kMaxSize)
      return api::Fail(OCTATTN_ERROR_INVALID_SHAPE, "q_heads and kv_heads must be positive");
    OCTATTN_CHECK(api::CheckGroups(q_heads, kv_heads));
    const int64_t heads = q_heads + 2 * kv_heads;
    if (ts.shape[2] % heads != 0)
      return api::Fail(OCTATTN_ERROR_INVALID_SHAPE,
                       "channels are not a multiple of q_heads + 2 * kv_heads");
    const int64_t dim = ts.shape[2] / heads, batch = ts.shape[0], tokens = ts.shape[1];
    OCTATTN_CHECK(CheckHeads(tq, "q", batch, q_heads, tokens, dim));
    OCTATTN_CHECK(CheckHeads(tk, "k", batch, kv_heads, tokens, dim));
    OCTATTN_CHECK(CheckHeads(tv, "v", batch, kv_heads, tokens, dim));
    OCTATTN_CHECK(api::CheckDisjoint(tq, "q", ts, "src"));
    OCTATTN_CHECK(api::CheckDisjoint(tk, "k", ts, "src"));
    OCTATTN_CHECK(api::CheckDisjoint(tv, "v", ts, "src"));
    OCTATTN_CHECK(api::CheckDisjoint(tq, "q", tk, "k"));
    OCTATTN_CHECK(api::CheckDisjoint(tq, "q", tv, "v"));
    OCTATTN_CHECK(api::CheckDisjoint(tk, "k", tv, "v"));
    const int64_t qs[4] = {batch, q_heads, tokens, dim}, ks[4] = {batch, kv_heads, tokens, dim};
    Copy(ctx, SequenceAsHeads(ts, 0, dim), HeadsView(tq), qs);
    Copy(ctx, SequenceAsHeads(ts, q_heads * dim, dim), HeadsView(tk), ks);
    Copy(ctx, SequenceAsHeads(ts, (q_heads + kv_heads) * dim, dim), HeadsView(tv), ks);
    return api::Check();
  });
}

}  // extern "C"
