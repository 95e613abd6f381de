// The backward entry points: the forward call's checks, then the gradients' own, then
// one task per (batch, kv head) on the pool.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "lib/api/call.h"
#include "lib/api/context.h"
#include "lib/api/validate.h"
#include "lib/kernels/kernels.h"
#include "lib/plan/schedule.h"
#include "lib/reference/reference.h"
#include "octattn.h"

namespace base = octattn::base;
namespace api = octattn::api;
namespace kernels = octattn::kernels;
namespace plan = octattn::plan;

namespace {

struct BackwardCall {
  api::AttentionCall fwd;
  api::TensorInfo dout, dlse, dq, dk, dv, dbias;
  api::TensorInfo dsinks, sinks, slopes;  // the arrays' extents (hi == 0: absent)
  float* dsinks_data = nullptr;
};

// The byte range of `n` floats at p (p non-null).
api::TensorInfo ArrayExtent(const float* p, int64_t n) {
  api::TensorInfo t;
  t.lo = reinterpret_cast<uintptr_t>(p);
  t.hi = t.lo + static_cast<uintptr_t>(n) * sizeof(float);
  return t;
}

api::Check SameShape(const api::TensorInfo& t, const char* name, const api::TensorInfo& like,
                     const char* like_name) {
  for (int d = 0; d < 4; ++d)
    if (t.shape[d] != like.shape[d])
      return api::Fail(OCTATTN_ERROR_INVALID_SHAPE,
                       std::string(name) + ": shape[" + std::to_string(d) + "] is " +
                           std::to_string(t.shape[d]) + ", expected " +
                           std::to_string(like.shape[d]) + " (as " + like_name + ")");
  return api::Check();
}

api::Check ValidateBackward(octattn_context* ctx, const octattn_attention_options* options,
                            const octattn_tensor* q, const octattn_tensor* k,
                            const octattn_tensor* v, const octattn_tensor* o,
                            const octattn_tensor* lse, const octattn_tensor* dout,
                            const octattn_tensor* dlse, const octattn_tensor* dq,
                            const octattn_tensor* dk, const octattn_tensor* dv, const float* dsinks,
                            const octattn_tensor* dbias, BackwardCall* c) {
  OCTATTN_CHECK(
      api::ValidateAttention(ctx, options, q, k, v, o, lse, nullptr, &c->fwd, api::Role::kInput));
  for (const api::TensorInfo* t : {&c->fwd.q, &c->fwd.k, &c->fwd.v, &c->fwd.o})
    if (t->type != octattn::base::kF32)
      return api::Fail(OCTATTN_ERROR_UNSUPPORTED, "the backward pass takes f32 q, k, v and o");
  if (c->fwd.sequences.paged)
    return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                     "the backward writes dk and dv of contiguous keys: it takes no paged cache");
  if (!lse)
    return api::Fail(OCTATTN_ERROR_NULL_POINTER, "lse is NULL: the backward reads the forward's");
  const plan::CallShape& sh = c->fwd.shape;
  OCTATTN_CHECK(api::ValidateTensor(dout, "dout", api::Role::kInput, false, &c->dout));
  OCTATTN_CHECK(SameShape(c->dout, "dout", c->fwd.o, "o"));
  if (dlse) {
    OCTATTN_CHECK(api::ValidateTensor(dlse, "dlse", api::Role::kInput, false, &c->dlse));
    OCTATTN_CHECK(SameShape(c->dlse, "dlse", c->fwd.lse, "lse"));
  }
  OCTATTN_CHECK(api::ValidateTensor(dq, "dq", api::Role::kOutput, false, &c->dq));
  OCTATTN_CHECK(SameShape(c->dq, "dq", c->fwd.q, "q"));
  OCTATTN_CHECK(api::ValidateTensor(dk, "dk", api::Role::kOutput, false, &c->dk));
  OCTATTN_CHECK(SameShape(c->dk, "dk", c->fwd.k, "k"));
  OCTATTN_CHECK(api::ValidateTensor(dv, "dv", api::Role::kOutput, false, &c->dv));
  OCTATTN_CHECK(SameShape(c->dv, "dv", c->fwd.v, "v"));
  if (dbias) {
    OCTATTN_CHECK(api::ValidateTensor(dbias, "dbias", api::Role::kOutput, false, &c->dbias));
    const int64_t want[4] = {sh.batch, sh.q_heads, sh.q_len, sh.kv_len};
    static const char* const kDims[4] = {"batch", "q_heads", "q_len", "kv_len"};
    for (int d = 0; d < 4; ++d)
      OCTATTN_CHECK(api::CheckSize(c->dbias, "dbias", d, want[d], kDims[d]));
  }
  if (sh.mods.sinks) c->sinks = ArrayExtent(sh.mods.sinks, sh.q_heads);
  if (sh.mods.slopes) c->slopes = ArrayExtent(sh.mods.slopes, sh.q_heads);
  if (dsinks) {
    if (!sh.mods.sinks)
      return api::Fail(OCTATTN_ERROR_INVALID_OPTION, "dsinks needs options.sinks");
    if (reinterpret_cast<uintptr_t>(dsinks) % alignof(float) != 0)
      return api::Fail(OCTATTN_ERROR_MISALIGNED, "dsinks is not aligned to 4 bytes");
    c->dsinks = ArrayExtent(dsinks, sh.q_heads);
    c->dsinks_data = const_cast<float*>(dsinks);
  }
  if (c->fwd.algorithm == OCTATTN_ALGORITHM_NAIVE)
    return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                     "the backward has the fused and reference algorithms, not naive");
  const struct {
    const api::TensorInfo* t;
    const char* name;
  } outs[] = {{&c->dq, "dq"},
              {&c->dk, "dk"},
              {&c->dv, "dv"},
              {&c->dbias, "dbias"},
              {&c->dsinks, "dsinks"}},
    ins[] = {{&c->fwd.q, "q"},
             {&c->fwd.k, "k"},
             {&c->fwd.v, "v"},
             {&c->fwd.o, "o"},
             {&c->fwd.lse, "lse"},
             {&c->dout, "dout"},
             {&c->dlse, "dlse"},
             {&c->fwd.bias, "options.bias"},
             {&c->fwd.mask, "options.mask"},
             {&c->sinks, "options.sinks"},
             {&c->slopes, "options.alibi_slopes"}};
  for (const auto& out : outs) {
    if (out.t->hi == 0) continue;
    for (const auto& in : ins)
      if (in.t->hi != 0) OCTATTN_CHECK(api::CheckDisjoint(*out.t, out.name, *in.t, in.name));
    for (const auto& other : outs)
      if (other.t->hi != 0 && other.t < out.t)
        OCTATTN_CHECK(api::CheckDisjoint(*out.t, out.name, *other.t, other.name));
  }
  return api::Check();
}

api::Check CheckWorkspace(const void* workspace, size_t size, const BackwardCall& c) {
  if (!workspace) return api::Check();
  api::TensorInfo ws;
  ws.lo = reinterpret_cast<uintptr_t>(workspace);
  ws.hi = ws.lo + size;
  if (ws.hi < ws.lo) return api::Fail(OCTATTN_ERROR_OVERFLOW, "workspace extent overflows");
  const api::TensorInfo* all[] = {&c.fwd.q, &c.fwd.k,    &c.fwd.v,    &c.fwd.o, &c.fwd.lse, &c.dout,
                                  &c.dlse,  &c.fwd.bias, &c.fwd.mask, &c.dq,    &c.dk,      &c.dv,
                                  &c.dbias, &c.dsinks,   &c.sinks,    &c.slopes};
  const char* names[] = {"q",
                         "k",
                         "v",
                         "o",
                         "lse",
                         "dout",
                         "dlse",
                         "options.bias",
                         "options.mask",
                         "dq",
                         "dk",
                         "dv",
                         "dbias",
                         "dsinks",
                         "options.sinks",
                         "options.alibi_slopes"};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i)
    if (all[i]->hi != 0) OCTATTN_CHECK(api::CheckDisjoint(ws, "workspace", *all[i], names[i]));
  return api::Check();
}

// A call of sequences runs one task per (sequence, kv head), each sequence scheduled as
// a call of batch 1 of its sizes; the slot is the largest, the shared sums per sequence.
plan::Schedule BackwardSchedule(const BackwardCall& c) {
  const plan::CallShape& sh = c.fwd.shape;
  const bool sinks = c.dsinks_data != nullptr;
  if (c.fwd.sequences.count == 0)
    return plan::MakeBackwardSchedule(sh, c.fwd.plan_algorithm, c.fwd.table, sinks);
  plan::Schedule s;
  s.algorithm = c.fwd.plan_algorithm;
  const int64_t n = c.fwd.sequences.count;
  s.tasks = n * sh.kv_heads;
  for (int64_t i = 0; i < n; ++i) {
    plan::Sequence seq;
    api::ResolveSequence(c.fwd.sequences, i, &seq);  // checked: cannot fail
    if (seq.q_len == 0 || seq.kv_len == 0) continue;
    plan::CallShape one = sh;
    one.batch = 1;
    one.q_len = seq.q_len;
    one.kv_len = seq.kv_len;
    one.mask = seq.mask;
    s.slot_bytes = std::max(
        s.slot_bytes,
        plan::MakeBackwardSchedule(one, c.fwd.plan_algorithm, c.fwd.table, false).slot_bytes);
  }
  if (sinks)
    s.shared_bytes =
        base::RoundUp(base::SatMul(base::SatMul(base::Count(n), base::Count(sh.q_heads)), 8), 64);
  return s;
}

// The task of (batch b, kv head kvh): the group's first query head's operands.
kernels::BackwardTask TaskOf(const BackwardCall& c, int64_t b, int64_t kvh, double* sink_sums) {
  const plan::CallShape& sh = c.fwd.shape;
  const int64_t group = sh.q_heads / sh.kv_heads, h = kvh * group;
  kernels::BackwardTask t{};
  t.op = api::OperandsOf(c.fwd, b, h);
  t.heads = group;
  t.dout = c.dout.data + b * c.dout.stride[0] + h * c.dout.stride[1];
  t.do_head = c.dout.stride[1];
  t.do_row = c.dout.stride[2];
  t.do_dim = c.dout.stride[3];
  if (c.dlse.hi != 0) {
    t.dlse = c.dlse.data + b * c.dlse.stride[0] + h * c.dlse.stride[1];
    t.dlse_head = c.dlse.stride[1];
    t.dlse_row = c.dlse.stride[2];
  }
  t.dq = c.dq.data + b * c.dq.stride[0] + h * c.dq.stride[1];
  t.dq_head = c.dq.stride[1];
  t.dq_row = c.dq.stride[2];
  t.dq_dim = c.dq.stride[3];
  t.dk = c.dk.data + b * c.dk.stride[0] + kvh * c.dk.stride[1];
  t.dk_row = c.dk.stride[2];
  t.dk_dim = c.dk.stride[3];
  t.dv = c.dv.data + b * c.dv.stride[0] + kvh * c.dv.stride[1];
  t.dv_row = c.dv.stride[2];
  t.dv_dim = c.dv.stride[3];
  if (c.dbias.hi != 0) {
    t.dbias = c.dbias.data + b * c.dbias.stride[0] + h * c.dbias.stride[1];
    t.db_head = c.dbias.stride[1];
    t.db_row = c.dbias.stride[2];
    t.db_col = c.dbias.stride[3];
  }
  if (sink_sums) t.dsinks = sink_sums + b * sh.q_heads + h;
  return t;
}

// The task of kv head kvh of a sequence: its rows' views (and its sink sums' slot).
kernels::BackwardTask SequenceTaskOf(const BackwardCall& c, size_t s, int64_t kvh,
                                     double* sink_sums) {
  const plan::Sequence& seq = c.fwd.seqs[s];
  kernels::BackwardTask t = TaskOf(c, seq.batch, kvh, nullptr);
  const int64_t h = kvh * (c.fwd.shape.q_heads / c.fwd.shape.kv_heads);
  t.op = api::OperandsOf(c.fwd, seq, h);
  t.dout += seq.q_row * t.do_row;
  if (t.dlse) t.dlse += seq.q_row * t.dlse_row;
  t.dq += seq.q_row * t.dq_row;
  t.dk += seq.k_row * t.dk_row;
  t.dv += seq.k_row * t.dv_row;
  if (t.dbias) t.dbias += seq.q_row * t.db_row + seq.k_row * t.db_col;
  if (sink_sums) t.dsinks = sink_sums + static_cast<int64_t>(s) * c.fwd.shape.q_heads + h;
  return t;
}

// What the kernels do not write for a sequence's task: dk and dv of its key rows that no
// row reads (outside its valid range; all of them without query rows), dbias of its rows
// outside its valid keys, and for a sequence without valid keys its rows' dq, dbias and
// sink terms (empty rows: a finite sink receives dlse).
void FillAroundSequence(const BackwardCall& c, size_t s, int64_t kvh, double* sink_sums) {
  const plan::Sequence& seq = c.fwd.seqs[s];
  const plan::CallShape& sh = c.fwd.shape;
  const int64_t group = sh.q_heads / sh.kv_heads, h0 = kvh * group;
  const kernels::BackwardTask all = TaskOf(c, seq.batch, kvh, nullptr);
  const bool no_rows = seq.q_len == 0;
  for (int64_t j = seq.seg_row; j < seq.seg_row + seq.seg_len; ++j) {
    if (!no_rows && j >= seq.k_row && j < seq.k_row + seq.kv_len) continue;
    for (int64_t d = 0; d < sh.head_dim; ++d) all.dk[j * all.dk_row + d * all.dk_dim] = 0.0f;
    for (int64_t d = 0; d < sh.value_dim; ++d) all.dv[j * all.dv_row + d * all.dv_dim] = 0.0f;
  }
  for (int64_t g = 0; g < group; ++g) {
    double sink_sum = 0.0;
    const float* sink = all.op.mods.sinks ? all.op.mods.sinks + g : nullptr;
    for (int64_t i = seq.q_row; i < seq.q_row + seq.q_len; ++i) {
      if (all.dbias) {
        float* row = all.dbias + g * all.db_head + i * all.db_row;
        for (int64_t j = 0; j < sh.kv_len; ++j)
          if (seq.kv_len == 0 || j < seq.k_row || j >= seq.k_row + seq.kv_len)
            row[j * all.db_col] = 0.0f;
      }
      if (seq.kv_len != 0) continue;
      for (int64_t d = 0; d < sh.head_dim; ++d)
        all.dq[g * all.dq_head + i * all.dq_row + d * all.dq_dim] = 0.0f;
      if (sink && *sink != -INFINITY && all.dlse)
        sink_sum += static_cast<double>(all.dlse[g * all.dlse_head + i * all.dlse_row]);
    }
    if (sink_sums && (seq.kv_len == 0 || no_rows))
      sink_sums[static_cast<int64_t>(s) * sh.q_heads + h0 + g] = sink_sum;
  }
}

}  // namespace

extern "C" {

octattn_status octattn_attention_backward_workspace_size(
    octattn_context* ctx, const octattn_attention_options* options, const octattn_tensor* q,
    const octattn_tensor* k, const octattn_tensor* v, const octattn_tensor* o,
    const octattn_tensor* lse, const octattn_tensor* dout, const octattn_tensor* dlse,
    const octattn_tensor* dq, const octattn_tensor* dk, const octattn_tensor* dv,
    const float* dsinks, const octattn_tensor* dbias, size_t* bytes) {
  return api::Guard(ctx, [&]() -> api::Check {
    BackwardCall c;
    OCTATTN_CHECK(
        ValidateBackward(ctx, options, q, k, v, o, lse, dout, dlse, dq, dk, dv, dsinks, dbias, &c));
    if (!bytes) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "bytes is NULL");
    const size_t need =
        plan::WorkspaceBytes(BackwardSchedule(c), ctx->pool->threads(), c.fwd.sequences.count);
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
    BackwardCall c;
    OCTATTN_CHECK(
        ValidateBackward(ctx, options, q, k, v, o, lse, dout, dlse, dq, dk, dv, dsinks, dbias, &c));
    OCTATTN_CHECK(CheckWorkspace(workspace, workspace_size, c));
    const plan::Schedule s = BackwardSchedule(c);
    void* scratch = nullptr;
    const int threads = ctx->pool->threads();
    OCTATTN_CHECK(api::AcquireScratch(ctx, plan::WorkspaceBytes(s, threads, c.fwd.sequences.count),
                                      workspace, workspace_size, &scratch));
    const size_t used =
        base::SatAdd(base::SatMul(s.slot_bytes, base::Count(threads)), s.shared_bytes);
    if (c.fwd.sequences.count > 0)
      api::BindSequences(&c.fwd, static_cast<char*>(scratch) +
                                     plan::TablesAfter(used, c.fwd.sequences.count, false).offset);
    double* sink_sums = c.dsinks_data
                            ? reinterpret_cast<double*>(static_cast<char*>(scratch) +
                                                        s.slot_bytes * static_cast<size_t>(threads))
                            : nullptr;
    const plan::CallShape& sh = c.fwd.shape;
    const bool reference = c.fwd.algorithm == OCTATTN_ALGORITHM_REFERENCE;
    const bool seqs = c.fwd.sequences.count > 0;
    api::RunTasks(ctx, s.tasks, scratch, s.slot_bytes, [&](int64_t i, void* slot) {
      const int64_t b = i / sh.kv_heads, kvh = i % sh.kv_heads;
      if (seqs) {
        const size_t n = static_cast<size_t>(b);
        FillAroundSequence(c, n, kvh, sink_sums);
        const plan::Sequence& seq = c.fwd.seqs[n];
        if (seq.q_len == 0 || seq.kv_len == 0) return;
      }
      const kernels::BackwardTask t =
          seqs ? SequenceTaskOf(c, static_cast<size_t>(b), kvh, sink_sums)
               : TaskOf(c, b, kvh, sink_sums);
      if (reference) {
        octattn::reference::BackwardGroup(t, static_cast<double*>(slot));
      } else {
        c.fwd.table->backward_task(t, static_cast<float*>(slot));
      }
    });
    // Over the batch (or the sequences) in order: the same bytes for any thread count.
    const int64_t parts = seqs ? c.fwd.sequences.count : sh.batch;
    if (sink_sums)
      for (int64_t h = 0; h < sh.q_heads; ++h) {
        double sum = 0.0;
        for (int64_t b = 0; b < parts; ++b) sum += sink_sums[b * sh.q_heads + h];
        c.dsinks_data[h] = static_cast<float>(sum);
      }
    api::RecordRun(ctx, c.fwd.algorithm, c.fwd.table);
    return api::Check();
  });
}

}  // extern "C"
