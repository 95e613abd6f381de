// The C entry points: validate completely, then plan tasks and run them on the pool.
// Nothing here computes; nothing below here knows about statuses.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
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
using octattn::api::AttentionCall;
using octattn::api::OperandsOf;
using octattn::api::ValidateAttention;

namespace {

// The defaults of the options' first `size` bytes (a struct of that size).
octattn_status InitOptions(octattn_attention_options* options, size_t size) {
  if (!options) return OCTATTN_ERROR_NULL_POINTER;
  octattn_attention_options defaults;
  std::memset(&defaults, 0, sizeof(defaults));
  defaults.struct_size = size;
  defaults.causal = 1;
  defaults.algorithm = OCTATTN_ALGORITHM_AUTO;
  defaults.q_start = OCTATTN_Q_START_DEFAULT;
  defaults.k_start = 0;
  std::memcpy(options, &defaults, size);
  return OCTATTN_OK;
}

api::Check NeedContext(const octattn_context* ctx) {
  if (!ctx) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "context is NULL");
  return api::Check();
}

}  // namespace

namespace octattn {
namespace api {

api::Check ValidateAttention(octattn_context* ctx, const octattn_attention_options* options,
                             const octattn_tensor* q, const octattn_tensor* k,
                             const octattn_tensor* v, const octattn_tensor* o,
                             const octattn_tensor* lse, const octattn_tensor* weights,
                             AttentionCall* c, Role o_role) {
  OCTATTN_CHECK(NeedContext(ctx));
  octattn_attention_options opt;
  OCTATTN_CHECK(octattn::api::ValidateOptions(options, &opt));
  OCTATTN_CHECK(api::ValidateTensor(q, "q", api::Role::kInput, false, &c->q, api::kFloating));
  OCTATTN_CHECK(api::ValidateTensor(k, "k", api::Role::kInput, false, &c->k, api::kFloating));
  OCTATTN_CHECK(api::ValidateTensor(v, "v", api::Role::kInput, false, &c->v, api::kFloating));
  OCTATTN_CHECK(api::ValidateTensor(o, "o", o_role, false, &c->o, api::kFloating));
  if (c->o.type != base::kF32 && c->o.type != c->q.type)
    return api::Fail(OCTATTN_ERROR_UNSUPPORTED, "o's dtype is neither f32 nor q's dtype");
  c->has_lse = lse != nullptr;
  c->has_weights = weights != nullptr;
  if (lse) OCTATTN_CHECK(api::ValidateTensor(lse, "lse", o_role, false, &c->lse));
  if (weights)
    OCTATTN_CHECK(api::ValidateTensor(weights, "weights", api::Role::kOutput, false, &c->weights));

  plan::CallShape& sh = c->shape;
  sh.batch = c->q.shape[0];
  sh.q_heads = c->q.shape[1];
  sh.q_len = c->q.shape[2];
  sh.head_dim = c->q.shape[3];
  sh.kv_heads = c->k.shape[1];
  sh.kv_len = c->k.shape[2];
  sh.value_dim = c->v.shape[3];
  sh.v_dim = c->v.stride[3];
  sh.shared_rows = c->k.stride[1] < c->k.stride[2] && c->v.stride[1] < c->v.stride[2];
  sh.q_type = c->q.type;
  sh.k_type = c->k.type;
  sh.v_type = c->v.type;
  sh.o_type = c->o.type;
  // A paged cache: k and v are pools [num_blocks, kv_heads, block_size, dim], and a
  // sequence's logical key rows are block_table_cols blocks.
  const bool paged = opt.block_table != nullptr;
  const int64_t num_blocks = paged ? c->k.shape[0] : 0, block_size = paged ? c->k.shape[2] : 0;
  OCTATTN_CHECK(api::CheckSize(c->k, "k", 3, sh.head_dim, "head_dim of q"));
  OCTATTN_CHECK(api::CheckSize(c->v, "v", 1, sh.kv_heads, "kv_heads of k"));
  if (paged) {
    OCTATTN_CHECK(api::CheckSize(c->v, "v", 0, num_blocks, "num_blocks of k"));
    OCTATTN_CHECK(api::CheckSize(c->v, "v", 2, block_size, "block_size of k"));
    if (__builtin_mul_overflow(opt.block_table_cols, block_size, &sh.kv_len) ||
        sh.kv_len > api::kMaxSize)
      return api::Fail(OCTATTN_ERROR_OVERFLOW,
                       "options.block_table_cols * block_size (a sequence's rows) is too large");
  } else {
    OCTATTN_CHECK(api::CheckSize(c->k, "k", 0, sh.batch, "batch of q"));
    OCTATTN_CHECK(api::CheckSize(c->v, "v", 0, sh.batch, "batch of q"));
    OCTATTN_CHECK(api::CheckSize(c->v, "v", 2, sh.kv_len, "kv_len of k"));
  }
  OCTATTN_CHECK(api::CheckSize(c->o, "o", 0, sh.batch, "batch of q"));
  OCTATTN_CHECK(api::CheckSize(c->o, "o", 1, sh.q_heads, "q_heads of q"));
  OCTATTN_CHECK(api::CheckSize(c->o, "o", 2, sh.q_len, "q_len of q"));
  OCTATTN_CHECK(api::CheckSize(c->o, "o", 3, sh.value_dim, "value_dim of v"));
  OCTATTN_CHECK(api::CheckGroups(sh.q_heads, sh.kv_heads));
  if (c->has_lse) {
    OCTATTN_CHECK(api::CheckSize(c->lse, "lse", 0, sh.batch, "batch of q"));
    OCTATTN_CHECK(api::CheckSize(c->lse, "lse", 1, sh.q_heads, "q_heads of q"));
    OCTATTN_CHECK(api::CheckSize(c->lse, "lse", 2, sh.q_len, "q_len of q"));
    OCTATTN_CHECK(api::CheckSize(c->lse, "lse", 3, 1, "one value per row"));
  }
  if (c->has_weights) {
    OCTATTN_CHECK(api::CheckSize(c->weights, "weights", 0, sh.batch, "batch of q"));
    OCTATTN_CHECK(api::CheckSize(c->weights, "weights", 1, sh.q_heads, "q_heads of q"));
    OCTATTN_CHECK(api::CheckSize(c->weights, "weights", 2, sh.q_len, "q_len of q"));
    OCTATTN_CHECK(api::CheckSize(c->weights, "weights", 3, sh.kv_len, "kv_len of k"));
  }
  const int64_t scores[4] = {sh.batch, sh.q_heads, sh.q_len, sh.kv_len};
  OCTATTN_CHECK(api::ValidateMods(opt, scores, &sh.mods, &c->bias, &c->mask));
  const struct {
    const api::TensorInfo* t;
    const char* name;
    bool present;
  } outs[] = {{&c->o, "o", true},
              {&c->lse, "lse", c->has_lse},
              {&c->weights, "weights", c->has_weights}},
    ins[] = {{&c->q, "q", true},
             {&c->k, "k", true},
             {&c->v, "v", true},
             {&c->bias, "options.bias", c->bias.hi != 0},
             {&c->mask, "options.mask", c->mask.hi != 0}};
  for (const auto& out : outs) {
    if (!out.present || o_role == Role::kInput) continue;
    for (const auto& in : ins)
      if (in.present) OCTATTN_CHECK(api::CheckDisjoint(*out.t, out.name, *in.t, in.name));
    for (const auto& other : outs)
      if (other.present && other.t < out.t)
        OCTATTN_CHECK(api::CheckDisjoint(*out.t, out.name, *other.t, other.name));
  }

  c->algorithm = opt.algorithm;
  if (c->algorithm == OCTATTN_ALGORITHM_AUTO)
    c->algorithm = c->has_weights ? OCTATTN_ALGORITHM_NAIVE : OCTATTN_ALGORITHM_FUSED;
  c->plan_algorithm = c->algorithm == OCTATTN_ALGORITHM_REFERENCE ? plan::Algorithm::kReference
                      : c->algorithm == OCTATTN_ALGORITHM_NAIVE   ? plan::Algorithm::kNaive
                                                                  : plan::Algorithm::kFused;
  if (c->algorithm == OCTATTN_ALGORITHM_FUSED && c->has_weights)
    return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                     "the fused algorithm never holds the weights: use naive to get them");
  if (c->algorithm != OCTATTN_ALGORITHM_REFERENCE) {
    c->table = octattn::api::SelectTable(*ctx);
    c->tuning = ctx->tuning;
    if (!c->table)
      return api::Fail(OCTATTN_ERROR_UNSUPPORTED, "the context's SIMD target is not available");
  }
  sh.mask = api::ResolveMask(opt, sh.q_len, sh.kv_len);
  OCTATTN_CHECK(api::ResolveSequences(opt, sh.batch, sh.q_len, sh.kv_len, num_blocks, block_size,
                                      &c->sequences));
  if (paged) {
    c->sequences.k_block = c->k.stride[0];
    c->sequences.v_block = c->v.stride[0];
  }
  if (paged && c->algorithm == OCTATTN_ALGORITHM_NAIVE)
    return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                     "the naive algorithm reads contiguous keys: a paged cache runs fused (no "
                     "weights) or reference");
  c->scale = opt.scale != 0.0f
                 ? opt.scale
                 : static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.head_dim)));
  return api::Check();
}

void BindSequences(AttentionCall* c, void* tables) {
  plan::Sequence* seqs = static_cast<plan::Sequence*>(tables);
  for (int64_t s = 0; s < c->sequences.count; ++s) {
    plan::Sequence seq;
    ResolveSequence(c->sequences, s, &seq);  // checked by validation: cannot fail
    new (&seqs[s]) plan::Sequence(seq);
  }
  c->seqs = seqs;
}

// The operands of query head `h` of batch `b` (k and v those of its kv head).
kernels::Operands OperandsOf(const AttentionCall& c, int64_t b, int64_t h) {
  const plan::CallShape& sh = c.shape;
  const int64_t kvh = h / (sh.q_heads / sh.kv_heads);
  kernels::Operands t{};
  t.q_type = c.q.type;
  t.k_type = c.k.type;
  t.v_type = c.v.type;
  t.o_type = c.o.type;
  t.q = base::ElemAt(c.q.data, b * c.q.stride[0] + h * c.q.stride[1], t.q_type);
  t.q_head = c.q.stride[1];
  t.q_row = c.q.stride[2];
  t.q_dim = c.q.stride[3];
  t.k = base::ElemAt(c.k.data, b * c.k.stride[0] + kvh * c.k.stride[1], t.k_type);
  t.k_row = c.k.stride[2];
  t.k_dim = c.k.stride[3];
  t.v = base::ElemAt(c.v.data, b * c.v.stride[0] + kvh * c.v.stride[1], t.v_type);
  t.v_row = c.v.stride[2];
  t.v_dim = c.v.stride[3];
  t.o = base::ElemAt(c.o.data, b * c.o.stride[0] + h * c.o.stride[1], t.o_type);
  t.o_head = c.o.stride[1];
  t.o_row = c.o.stride[2];
  t.o_dim = c.o.stride[3];
  if (c.has_lse) {
    t.lse = c.lse.data + b * c.lse.stride[0] + h * c.lse.stride[1];
    t.lse_head = c.lse.stride[1];
    t.lse_row = c.lse.stride[2];
  }
  if (c.has_weights) {
    t.weights = c.weights.data + b * c.weights.stride[0] + h * c.weights.stride[1];
    t.w_row = c.weights.stride[2];
    t.w_col = c.weights.stride[3];
  }
  t.q_len = sh.q_len;
  t.kv_len = sh.kv_len;
  t.head_dim = sh.head_dim;
  t.value_dim = sh.value_dim;
  t.scale = c.scale;
  t.mask = sh.mask;
  t.mods = api::ModsAt(sh.mods, c.bias, c.mask, b, h);
  return t;
}

kernels::Operands OperandsOf(const AttentionCall& c, const plan::Sequence& seq, int64_t h) {
  kernels::Operands t = OperandsOf(c, seq.batch, h);
  t.q = base::ElemAt(t.q, seq.q_row * t.q_row, t.q_type);
  t.o = base::ElemAt(t.o, seq.q_row * t.o_row, t.o_type);
  if (t.lse) t.lse += seq.q_row * t.lse_row;
  if (t.weights) t.weights += seq.q_row * t.w_row + seq.k_col * t.w_col;
  if (seq.paging.blocks) {  // block 0 of the kv head; rows through the block table
    const int64_t kvh = h / (c.shape.q_heads / c.shape.kv_heads);
    t.k = base::ElemAt(c.k.data, kvh * c.k.stride[1], t.k_type);
    t.v = base::ElemAt(c.v.data, kvh * c.v.stride[1], t.v_type);
    t.paging = &seq.paging;
  } else {
    t.k = base::ElemAt(t.k, seq.k_row * t.k_row, t.k_type);
    t.v = base::ElemAt(t.v, seq.k_row * t.v_row, t.v_type);
  }
  if (t.mods.bias) t.mods.bias += seq.q_row * t.mods.bias_row + seq.k_col * t.mods.bias_col;
  if (t.mods.mask) t.mods.mask += seq.q_row * t.mods.mask_row + seq.k_col * t.mods.mask_col;
  t.q_len = seq.q_len;
  t.kv_len = seq.kv_len;
  t.mask = seq.mask;
  return t;
}

}  // namespace api
}  // namespace octattn

namespace {

// The fused task of the GQA group of kv head `kvh` of batch `b`: all rows, all chunks.
kernels::FlashTask GroupTask(const AttentionCall& c, int64_t b, int64_t kvh) {
  const int64_t group = c.shape.q_heads / c.shape.kv_heads;
  kernels::FlashTask t{};
  t.tuning = c.tuning;
  t.op = OperandsOf(c, b, kvh * group);
  t.heads = group;
  t.row_begin = 0;
  t.row_end = c.shape.q_len;
  t.gathered = 1;
  t.chunk_begin = 0;
  t.chunk_end = (c.shape.kv_len + kernels::kChunkKeys - 1) / kernels::kChunkKeys;
  return t;
}

// A decode task of x.kv_heads kv heads (the first one's task t): the strides to the next
// kv head's operands and partials.
void CoverKvHeads(const AttentionCall& c, const plan::Schedule& p, const plan::CallShape& shape,
                  const plan::DecodeIndex& x, kernels::FlashTask* t) {
  if (x.kv_heads <= 1) return;
  const int64_t group = c.shape.q_heads / c.shape.kv_heads;
  t->kv_heads = x.kv_heads;
  t->q_kv = c.q.stride[1] * group;
  t->k_kv = c.k.stride[1];
  t->v_kv = c.v.stride[1];
  t->o_kv = c.o.stride[1] * group;
  t->lse_kv = c.has_lse ? c.lse.stride[1] * group : 0;
  t->partial_kv = plan::PartialOffset(p, shape, 1, 0) - plan::PartialOffset(p, shape, 0, 0);
}

void RunFused(octattn_context* ctx, const AttentionCall& c, const plan::Schedule& p,
              void* scratch) {
  const kernels::Table* table = c.table;
  if (!p.decode) {
    api::RunTasks(ctx, p.tasks, scratch, p.slot_bytes, [&](int64_t i, void* s) {
      const plan::PrefillIndex x = plan::PrefillTaskAt(p, c.shape, i);
      kernels::FlashTask t = GroupTask(c, x.batch, x.kv_head);
      t.row_begin = x.row_begin;
      t.row_end = x.row_end;
      table->flash_task(t, static_cast<float*>(s));
    });
    return;
  }
  float* partials = reinterpret_cast<float*>(
      static_cast<char*>(scratch) + p.slot_bytes * static_cast<size_t>(ctx->pool->threads()));
  api::RunTasks(ctx, p.tasks, scratch, p.slot_bytes, [&](int64_t i, void* s) {
    const plan::DecodeIndex x = plan::DecodeTaskAt(p, c.shape, i);
    kernels::FlashTask t = GroupTask(c, x.batch, x.kv_head);
    t.gathered = x.gathered;
    t.chunk_begin = x.gathered ? 0 : x.chunk;
    t.chunk_end = x.gathered ? 0 : x.chunk + 1;
    t.partial = partials + plan::PartialOffset(p, c.shape, x.pair, x.unit);
    CoverKvHeads(c, p, c.shape, x, &t);
    table->flash_task(t, static_cast<float*>(s));
  });
  const int64_t pairs = c.shape.batch * c.shape.kv_heads;
  api::RunTasks(ctx, pairs, scratch, p.slot_bytes, [&](int64_t pair, void* s) {
    const kernels::FlashTask t = GroupTask(c, pair / c.shape.kv_heads, pair % c.shape.kv_heads);
    table->flash_merge(t, partials + plan::PartialOffset(p, c.shape, pair, 0), p.units,
                       static_cast<float*>(s));
  });
}

// The fused task of kv head `kvh` of a sequence: all its rows, all its chunks.
kernels::FlashTask SequenceGroupTask(const AttentionCall& c, const plan::Sequence& seq,
                                     int64_t kvh) {
  const int64_t group = c.shape.q_heads / c.shape.kv_heads;
  kernels::FlashTask t{};
  t.tuning = c.tuning;
  t.op = OperandsOf(c, seq, kvh * group);
  t.heads = group;
  t.row_begin = 0;
  t.row_end = seq.q_len;
  t.gathered = 1;
  t.chunk_begin = 0;
  t.chunk_end = (seq.kv_len + kernels::kChunkKeys - 1) / kernels::kChunkKeys;
  return t;
}

// The weights of a sequence's rows (query head h) outside its valid keys: 0.
void ZeroWeightsOutside(const AttentionCall& c, const plan::Sequence& seq, int64_t h) {
  const kernels::Operands all = OperandsOf(c, seq.batch, h);
  for (int64_t i = seq.q_row; i < seq.q_row + seq.q_len; ++i) {
    float* row = all.weights + i * all.w_row;
    for (int64_t j = 0; j < seq.k_col; ++j) row[j * all.w_col] = 0.0f;
    for (int64_t j = seq.k_col + seq.kv_len; j < all.kv_len; ++j) row[j * all.w_col] = 0.0f;
  }
}

// The rows of a sequence with no valid key: zeros, lse -inf (or the sink).
void WriteEmptyRows(const kernels::Operands& op) {
  const float lse = op.mods.sinks ? *op.mods.sinks : -INFINITY;
  for (int64_t i = 0; i < op.q_len; ++i) {
    for (int64_t d = 0; d < op.value_dim; ++d)
      base::StoreElem(op.o, i * op.o_row + d * op.o_dim, op.o_type, 0.0f);
    if (op.lse) op.lse[i * op.lse_row] = lse;
  }
}

// A call of sequences (plan::BatchSchedule): every sequence's tasks in one first phase,
// the merges of the decode-shaped ones in a second.
void RunSequences(octattn_context* ctx, const AttentionCall& c, const plan::BatchSchedule& b,
                  void* scratch) {
  float* shared = reinterpret_cast<float*>(
      static_cast<char*>(scratch) + b.slot_bytes * static_cast<size_t>(ctx->pool->threads()));
  api::RunTasks(ctx, b.tasks, scratch, b.slot_bytes, [&](int64_t i, void* s) {
    const size_t n = plan::SequenceOfTask(b, i);
    const plan::SequencePlan& p = b.seqs[n];
    const plan::Sequence& seq = c.seqs[n];
    const int64_t task = i - p.first_task;
    if (p.empty || c.algorithm != OCTATTN_ALGORITHM_FUSED) {
      const int64_t h = p.empty ? task : plan::HeadTaskAt(p.shape, task).head;
      const kernels::Operands op = OperandsOf(c, seq, h);
      if (op.weights) ZeroWeightsOutside(c, seq, h);
      if (p.empty) {
        WriteEmptyRows(op);
      } else if (c.algorithm == OCTATTN_ALGORITHM_REFERENCE) {
        octattn::reference::AttentionHead(op, static_cast<double*>(s));
      } else {
        c.table->naive_head(op, static_cast<float*>(s));
      }
      return;
    }
    if (!p.schedule.decode) {
      const plan::PrefillIndex x = plan::PrefillTaskAt(p.schedule, p.shape, task);
      kernels::FlashTask t = SequenceGroupTask(c, seq, x.kv_head);
      t.row_begin = x.row_begin;
      t.row_end = x.row_end;
      c.table->flash_task(t, static_cast<float*>(s));
      return;
    }
    const plan::DecodeIndex x = plan::DecodeTaskAt(p.schedule, p.shape, task);
    kernels::FlashTask t = SequenceGroupTask(c, seq, x.kv_head);
    t.gathered = x.gathered;
    t.chunk_begin = x.gathered ? 0 : x.chunk;
    t.chunk_end = x.gathered ? 0 : x.chunk + 1;
    t.partial = shared + p.partials + plan::PartialOffset(p.schedule, p.shape, x.pair, x.unit);
    CoverKvHeads(c, p.schedule, p.shape, x, &t);
    c.table->flash_task(t, static_cast<float*>(s));
  });
  if (b.merges == 0) return;
  api::RunTasks(ctx, b.merges, scratch, b.slot_bytes, [&](int64_t i, void* s) {
    const size_t n = plan::SequenceOfMerge(b, i);
    const plan::SequencePlan& p = b.seqs[n];
    const int64_t kvh = i - p.first_merge;
    const kernels::FlashTask t = SequenceGroupTask(c, c.seqs[n], kvh);
    c.table->flash_merge(t, shared + p.partials + plan::PartialOffset(p.schedule, p.shape, kvh, 0),
                         p.schedule.units, static_cast<float*>(s));
  });
}

// The schedule of a call of sequences: its sizes only, or with `plans` set, each
// sequence's plan written there (the call's sequences bound to their tables then).
plan::BatchSchedule BatchScheduleOf(const AttentionCall& c, plan::SequencePlan* plans) {
  plan::BatchSchedule b;
  b.seqs = plans;
  for (int64_t s = 0; s < c.sequences.count; ++s) {
    plan::Sequence seq;
    if (c.seqs) {
      seq = c.seqs[s];
    } else {
      octattn::api::ResolveSequence(c.sequences, s, &seq);  // checked: cannot fail
    }
    plan::AddSequence(c.shape, seq, c.plan_algorithm, c.table, &b);
  }
  return b;
}

// Bytes of workspace of a validated call on this context.
size_t CallWorkspaceBytes(const octattn_context* ctx, const AttentionCall& c) {
  if (c.sequences.count > 0)
    return plan::WorkspaceBytes(BatchScheduleOf(c, nullptr), ctx->pool->threads());
  return plan::WorkspaceBytes(plan::MakeSchedule(c.shape, c.plan_algorithm, c.table),
                              ctx->pool->threads());
}

api::Check CheckWorkspaceDisjoint(const void* workspace, size_t size, const AttentionCall& c) {
  if (!workspace) return api::Check();
  api::TensorInfo ws;
  ws.lo = reinterpret_cast<uintptr_t>(workspace);
  ws.hi = ws.lo + size;
  if (ws.hi < ws.lo) return api::Fail(OCTATTN_ERROR_OVERFLOW, "workspace extent overflows");
  const api::TensorInfo* all[] = {&c.q, &c.k, &c.v, &c.o, &c.lse, &c.weights, &c.bias, &c.mask};
  const char* names[] = {"q", "k", "v", "o", "lse", "weights", "options.bias", "options.mask"};
  for (int i = 0; i < 8; ++i)
    if (all[i]->hi != 0) OCTATTN_CHECK(api::CheckDisjoint(ws, "workspace", *all[i], names[i]));
  return api::Check();
}

// One public struct's size and field offsets, for octattn_struct_layout.
struct FieldOffset {
  const char* name;
  size_t offset;
};
struct StructLayout {
  const char* name;
  size_t size;
  const FieldOffset* fields;
  size_t count;
};
#define OCTATTN_FIELD(type, field) \
  FieldOffset { #field, offsetof(type, field) }
constexpr FieldOffset kTensorFields[] = {
    OCTATTN_FIELD(octattn_tensor, data), OCTATTN_FIELD(octattn_tensor, dtype),
    OCTATTN_FIELD(octattn_tensor, reserved), OCTATTN_FIELD(octattn_tensor, shape),
    OCTATTN_FIELD(octattn_tensor, stride)};
constexpr FieldOffset kOptionsFields[] = {
    OCTATTN_FIELD(octattn_attention_options, struct_size),
    OCTATTN_FIELD(octattn_attention_options, causal),
    OCTATTN_FIELD(octattn_attention_options, algorithm),
    OCTATTN_FIELD(octattn_attention_options, window),
    OCTATTN_FIELD(octattn_attention_options, stride),
    OCTATTN_FIELD(octattn_attention_options, q_start),
    OCTATTN_FIELD(octattn_attention_options, scale),
    OCTATTN_FIELD(octattn_attention_options, reserved),
    OCTATTN_FIELD(octattn_attention_options, k_start),
    OCTATTN_FIELD(octattn_attention_options, chunk),
    OCTATTN_FIELD(octattn_attention_options, softcap),
    OCTATTN_FIELD(octattn_attention_options, reserved2),
    OCTATTN_FIELD(octattn_attention_options, alibi_slopes),
    OCTATTN_FIELD(octattn_attention_options, sinks),
    OCTATTN_FIELD(octattn_attention_options, bias),
    OCTATTN_FIELD(octattn_attention_options, mask),
    OCTATTN_FIELD(octattn_attention_options, q_starts),
    OCTATTN_FIELD(octattn_attention_options, kv_starts),
    OCTATTN_FIELD(octattn_attention_options, kv_lens),
    OCTATTN_FIELD(octattn_attention_options, sequences),
    OCTATTN_FIELD(octattn_attention_options, cu_seqlens_q),
    OCTATTN_FIELD(octattn_attention_options, cu_seqlens_k),
    OCTATTN_FIELD(octattn_attention_options, block_table),
    OCTATTN_FIELD(octattn_attention_options, block_table_cols)};
constexpr FieldOffset kRunInfoFields[] = {
    OCTATTN_FIELD(octattn_run_info, struct_size), OCTATTN_FIELD(octattn_run_info, algorithm),
    OCTATTN_FIELD(octattn_run_info, backend), OCTATTN_FIELD(octattn_run_info, target),
    OCTATTN_FIELD(octattn_run_info, threads)};
#undef OCTATTN_FIELD
template <size_t N>
constexpr StructLayout Layout(const char* name, size_t size, const FieldOffset (&fields)[N]) {
  return StructLayout{name, size, fields, N};
}
constexpr StructLayout kLayouts[] = {
    Layout("octattn_tensor", sizeof(octattn_tensor), kTensorFields),
    Layout("octattn_attention_options", sizeof(octattn_attention_options), kOptionsFields),
    Layout("octattn_run_info", sizeof(octattn_run_info), kRunInfoFields)};

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

octattn_status octattn_struct_layout(const char* type, const char* field, size_t* out) {
  if (!type || !out) return OCTATTN_ERROR_NULL_POINTER;
  for (const StructLayout& s : kLayouts) {
    if (std::strcmp(s.name, type) != 0) continue;
    if (!field) {
      *out = s.size;
      return OCTATTN_OK;
    }
    for (size_t i = 0; i < s.count; ++i)
      if (std::strcmp(s.fields[i].name, field) == 0) {
        *out = s.fields[i].offset;
        return OCTATTN_OK;
      }
  }
  return OCTATTN_ERROR_INVALID_OPTION;
}

uint32_t octattn_version_number(void) { return OCTATTN_VERSION_NUMBER; }

const char* octattn_version_string(void) {
#define OCTATTN_STR2(x) #x
#define OCTATTN_STR(x) OCTATTN_STR2(x)
  return OCTATTN_STR(OCTATTN_VERSION_MAJOR) "." OCTATTN_STR(OCTATTN_VERSION_MINOR) "." OCTATTN_STR(
      OCTATTN_VERSION_PATCH);
}

const char* octattn_status_string(octattn_status status) {
  switch (status) {
    case OCTATTN_OK:
      return "ok";
    case OCTATTN_ERROR_NULL_POINTER:
      return "null pointer";
    case OCTATTN_ERROR_INVALID_SHAPE:
      return "invalid shape";
    case OCTATTN_ERROR_INVALID_STRIDE:
      return "invalid stride";
    case OCTATTN_ERROR_OVERFLOW:
      return "size overflow";
    case OCTATTN_ERROR_ALIASING:
      return "output overlaps another tensor";
    case OCTATTN_ERROR_INVALID_OPTION:
      return "invalid option";
    case OCTATTN_ERROR_STRUCT_SIZE:
      return "invalid struct_size";
    case OCTATTN_ERROR_WORKSPACE_TOO_SMALL:
      return "workspace too small";
    case OCTATTN_ERROR_UNSUPPORTED:
      return "unsupported";
    case OCTATTN_ERROR_OUT_OF_MEMORY:
      return "out of memory";
    case OCTATTN_ERROR_MISALIGNED:
      return "misaligned data";
    case OCTATTN_ERROR_INTERNAL:
      return "internal error";
    default:
      return "unknown status";
  }
}

const char* octattn_backend_name(octattn_backend backend) {
  switch (backend) {
    case OCTATTN_BACKEND_AUTO:
      return "auto";
    case OCTATTN_BACKEND_HIGHWAY:
      return "highway";
    case OCTATTN_BACKEND_XSIMD:
      return "xsimd";
    default:
      return "unknown";
  }
}

const char* octattn_target_name(octattn_target target) {
  switch (target) {
    case OCTATTN_TARGET_AUTO:
      return "auto";
    case OCTATTN_TARGET_SCALAR:
      return "scalar";
    case OCTATTN_TARGET_SSE2:
      return "sse2";
    case OCTATTN_TARGET_SSSE3:
      return "ssse3";
    case OCTATTN_TARGET_SSE4:
      return "sse4";
    case OCTATTN_TARGET_AVX2:
      return "avx2";
    case OCTATTN_TARGET_AVX512:
      return "avx512";
    case OCTATTN_TARGET_NEON:
      return "neon";
    case OCTATTN_TARGET_SVE2_128:
      return "sve2_128";
    case OCTATTN_TARGET_SVE_256:
      return "sve_256";
    case OCTATTN_TARGET_AVX512_BF16:
      return "avx512_bf16";
    case OCTATTN_TARGET_AMX_BF16:
      return "amx_bf16";
    default:
      return "unknown";
  }
}

const char* octattn_algorithm_name(octattn_algorithm algorithm) {
  switch (algorithm) {
    case OCTATTN_ALGORITHM_AUTO:
      return "auto";
    case OCTATTN_ALGORITHM_REFERENCE:
      return "reference";
    case OCTATTN_ALGORITHM_NAIVE:
      return "naive";
    case OCTATTN_ALGORITHM_FUSED:
      return "fused";
    default:
      return "unknown";
  }
}

octattn_status octattn_tensor_init(octattn_tensor* tensor, void* data, const int64_t shape[4],
                                   octattn_layout layout) {
  return api::Guard(nullptr, [&]() -> api::Check {
    if (!tensor || !shape) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "tensor or shape is NULL");
    if (layout != OCTATTN_LAYOUT_BHTD && layout != OCTATTN_LAYOUT_BTHD)
      return api::Fail(OCTATTN_ERROR_INVALID_OPTION, "unknown layout");
    for (int d = 0; d < 4; ++d) {
      if (shape[d] < 1) return api::Fail(OCTATTN_ERROR_INVALID_SHAPE, "sizes must be positive");
      if (shape[d] > octattn::api::kMaxSize)
        return api::Fail(OCTATTN_ERROR_OVERFLOW, "size too large");
    }
    int64_t s3 = 1, s2, s1, s0;
    const int64_t d = shape[3];
    if (layout == OCTATTN_LAYOUT_BHTD) {
      if (__builtin_mul_overflow(d, shape[2], &s1) || __builtin_mul_overflow(s1, shape[1], &s0) ||
          __builtin_mul_overflow(s0, shape[0], &s3))
        return api::Fail(OCTATTN_ERROR_OVERFLOW, "element count overflows");
      s2 = d;
    } else {  // memory order [B, T, H, D]
      if (__builtin_mul_overflow(d, shape[1], &s2) || __builtin_mul_overflow(s2, shape[2], &s0) ||
          __builtin_mul_overflow(s0, shape[0], &s3))
        return api::Fail(OCTATTN_ERROR_OVERFLOW, "element count overflows");
      s1 = d;
    }
    tensor->data = data;
    tensor->dtype = OCTATTN_DTYPE_F32;
    tensor->reserved = 0;
    for (int k = 0; k < 4; ++k) tensor->shape[k] = shape[k];
    tensor->stride[0] = s0;
    tensor->stride[1] = s1;
    tensor->stride[2] = s2;
    tensor->stride[3] = 1;
    return api::Check();
  });
}

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
    if (!octattn::api::ResolveTarget(b, t, &table).failed()) {
      ctx->backend = b;
      ctx->target = t;
    } else if (!octattn::api::ResolveTarget(b, OCTATTN_TARGET_AUTO, &table).failed()) {
      ctx->backend = b;
    } else {
      octattn::api::ResolveTarget(OCTATTN_BACKEND_AUTO, OCTATTN_TARGET_AUTO, &table);
    }
    ctx->table = table;
    *out = ctx.release();
    return api::Check();
  });
}

void octattn_context_destroy(octattn_context* ctx) { delete ctx; }

octattn_status octattn_context_set_threads(octattn_context* ctx, int32_t threads) {
  return api::Guard(ctx, [&]() -> api::Check {
    OCTATTN_CHECK(NeedContext(ctx));
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
    OCTATTN_CHECK(NeedContext(ctx));
    const kernels::Table* table;
    OCTATTN_CHECK(octattn::api::ResolveTarget(backend, target, &table));
    ctx->backend = backend;
    ctx->target = target;
    ctx->table = table;
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
    // Best first, then the targets auto never picks (amx_bf16).
    auto add = [&](octattn_target t) {
      const kernels::Table* table;
      if (octattn::api::ResolveTarget(backend, t, &table).failed()) return;
      if (n < capacity) targets[n] = t;
      ++n;
    };
    for (octattn_target t = octattn::kernels::kLastTarget; t >= OCTATTN_TARGET_SCALAR; --t)
      if (t != OCTATTN_TARGET_AMX_BF16) add(t);
    add(OCTATTN_TARGET_AMX_BF16);
    *count = n;
    return api::Check();
  });
}

// Four versions of octattn_attention_options_init, all named by .symver directives (the
// symver attribute is GCC-only): the default (OCTATTN_0.6 on) writes the current struct,
// which programs linked now get, statically too; @OCTATTN_0.3, @OCTATTN_0.2 and
// @OCTATTN_0.1 write the 104, 56 and 48 bytes of those versions for programs linked
// against them, whose structs are that size.
__attribute__((visibility("default"))) octattn_status octattn_attention_options_init_0_6(
    octattn_attention_options* options) {
  return InitOptions(options, sizeof(*options));
}
__asm__(".symver octattn_attention_options_init_0_6, octattn_attention_options_init@@OCTATTN_0.6");

__attribute__((visibility("default"))) octattn_status octattn_attention_options_init_0_3(
    octattn_attention_options* options) {
  return InitOptions(options, octattn::api::kOptionsSize_0_3);
}
__asm__(".symver octattn_attention_options_init_0_3, octattn_attention_options_init@OCTATTN_0.3");

__attribute__((visibility("default"))) octattn_status octattn_attention_options_init_0_2(
    octattn_attention_options* options) {
  return InitOptions(options, octattn::api::kOptionsSize_0_2);
}
__asm__(".symver octattn_attention_options_init_0_2, octattn_attention_options_init@OCTATTN_0.2");

__attribute__((visibility("default"))) octattn_status octattn_attention_options_init_0_1(
    octattn_attention_options* options) {
  return InitOptions(options, octattn::api::kOptionsSize_0_1);
}
__asm__(".symver octattn_attention_options_init_0_1, octattn_attention_options_init@OCTATTN_0.1");

// The defaults of the caller's struct of struct_size bytes, whatever version declared it:
// the one init a caller that resolves symbols at run time can call safely.
octattn_status octattn_attention_options_init_size(octattn_attention_options* options,
                                                   size_t struct_size) {
  if (!options) return OCTATTN_ERROR_NULL_POINTER;
  if (struct_size < octattn::api::kOptionsSize_0_1) return OCTATTN_ERROR_STRUCT_SIZE;
  const size_t known = sizeof(*options);
  InitOptions(options, struct_size < known ? struct_size : known);
  if (struct_size > known)
    std::memset(reinterpret_cast<char*>(options) + known, 0, struct_size - known);
  options->struct_size = struct_size;
  return OCTATTN_OK;
}

octattn_status octattn_attention_workspace_size(octattn_context* ctx,
                                                const octattn_attention_options* options,
                                                const octattn_tensor* q, const octattn_tensor* k,
                                                const octattn_tensor* v, const octattn_tensor* o,
                                                const octattn_tensor* lse,
                                                const octattn_tensor* weights, size_t* bytes) {
  return api::Guard(ctx, [&]() -> api::Check {
    AttentionCall c;
    OCTATTN_CHECK(ValidateAttention(ctx, options, q, k, v, o, lse, weights, &c));
    if (!bytes) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "bytes is NULL");
    const size_t need = CallWorkspaceBytes(ctx, c);
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
    AttentionCall c;
    OCTATTN_CHECK(ValidateAttention(ctx, options, q, k, v, o, lse, weights, &c));
    OCTATTN_CHECK(CheckWorkspaceDisjoint(workspace, workspace_size, c));
    if (c.sequences.count > 0) {
      // Sized first; then the sequences and their plans are laid out in the scratch.
      const plan::BatchSchedule sizes = BatchScheduleOf(c, nullptr);
      const int threads = ctx->pool->threads();
      void* scratch = nullptr;
      OCTATTN_CHECK(octattn::api::AcquireScratch(ctx, plan::WorkspaceBytes(sizes, threads),
                                                 workspace, workspace_size, &scratch));
      const plan::SequenceTables tables = plan::TablesAfter(
          base::SatAdd(base::SatMul(sizes.slot_bytes, base::Count(threads)), sizes.shared_bytes),
          sizes.count, true);
      char* base = static_cast<char*>(scratch);
      octattn::api::BindSequences(&c, base + tables.offset);
      const plan::BatchSchedule b =
          BatchScheduleOf(c, reinterpret_cast<plan::SequencePlan*>(base + tables.plans));
      RunSequences(ctx, c, b, scratch);
      octattn::api::RecordRun(ctx, c.algorithm, c.table);
      return api::Check();
    }
    const plan::Schedule plan = plan::MakeSchedule(c.shape, c.plan_algorithm, c.table);
    void* scratch = nullptr;
    OCTATTN_CHECK(octattn::api::AcquireScratch(ctx,
                                               plan::WorkspaceBytes(plan, ctx->pool->threads()),
                                               workspace, workspace_size, &scratch));
    if (c.algorithm == OCTATTN_ALGORITHM_FUSED) {
      RunFused(ctx, c, plan, scratch);
    } else {
      const bool reference = c.algorithm == OCTATTN_ALGORITHM_REFERENCE;
      api::RunTasks(ctx, plan.tasks, scratch, plan.slot_bytes, [&](int64_t i, void* s) {
        const plan::HeadIndex x = plan::HeadTaskAt(c.shape, i);
        const kernels::Operands op = OperandsOf(c, x.batch, x.head);
        if (reference) {
          octattn::reference::AttentionHead(op, static_cast<double*>(s));
        } else {
          c.table->naive_head(op, static_cast<float*>(s));
        }
      });
    }
    octattn::api::RecordRun(ctx, c.algorithm, c.table);
    return api::Check();
  });
}

}  // extern "C"
