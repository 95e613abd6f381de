// The forward runner: every call is a batch of sequences under plans (one plan over a
// dense call's batch entries, one per sequence of a padded, ragged or paged call). The
// first phase runs every plan's tasks, the second merges the decode-shaped plans'
// partials in unit order.
#include <math.h>

#include "lib/base/sizes.h"
#include "lib/run/cascade.h"
#include "lib/run/run.h"

namespace octattn {
namespace run {

namespace {

// The schedule of a call: its sizes only, or with `plans` set each plan written there
// (and a call of sequences' entries `seqs` and cascade groups at `groups`).
plan::BatchSchedule ScheduleOf(const Call& c, plan::SequencePlan* plans,
                               plan::Sequence* seqs = nullptr,
                               plan::CascadeGroup* groups = nullptr) {
  plan::BatchSchedule b;
  b.plans = plans;
  plan::CallShape shape = c.shape;
  shape.call_pairs = SequenceCount(c) * shape.kv_heads;
  if (c.sequences == 0) {
    plan::AddEntries(shape, c.algorithm, c.table, &b);
    FormCascade(c, nullptr, &b);
  } else {
    for (int64_t n = 0; n < c.sequences; ++n)
      plan::AddSequence(shape, SequenceAt(c, n), c.algorithm, c.table, &b);
    b.groups = groups;
    FormCascade(c, seqs, &b);
  }
  if (c.has_key_scores) {  // the fixed-point sums, one per element of key_scores
    b.key_acc = base::RoundUp(b.shared_bytes, base::kAlign);
    const TensorInfo& ks = c.key_scores;
    const size_t n = base::SatMul(base::Count(ks.shape[0] * ks.shape[1]), base::Count(ks.shape[2]));
    b.shared_bytes = base::SatAdd(b.key_acc, base::SatMul(n, sizeof(int64_t)));
  }
  return b;
}

// Key scores: the (batch entry, kv head) rows of the sums zeroed, or converted into
// key_scores, a row a task.
void KeyScoresPhase(parallel::Pool& pool, const Call& c, bool zero, void* scratch, size_t slot) {
  const TensorInfo& ks = c.key_scores;
  const int64_t keys = ks.shape[2], heads = ks.shape[1];
  RunTasks(pool, ks.shape[0] * heads, scratch, slot, [&](int64_t i, void*) {
    int64_t* acc = c.key_acc + i * keys;
    if (zero) {
      for (int64_t j = 0; j < keys; ++j) acc[j] = 0;
      return;
    }
    float* out = ks.data + i / heads * ks.stride[0] + i % heads * ks.stride[1];
    for (int64_t j = 0; j < keys; ++j) out[j * ks.stride[2]] = kernels::KeyScoreOf(acc[j]);
  });
}

// The weights of a sequence's rows (query head h) outside its valid keys: 0.
void ZeroWeightsOutside(const Call& c, const plan::Sequence& seq, int64_t h) {
  const int64_t all = c.shape.kv_len, end = seq.k_col + seq.kv_len;
  if (seq.k_col == 0 && end == all) return;
  const TensorInfo& w = c.weights;
  for (int64_t i = seq.q_row; i < seq.q_row + seq.q_len; ++i) {
    float* row = w.data + seq.batch * w.stride[0] + h * w.stride[1] + i * w.stride[2];
    for (int64_t j = 0; j < seq.k_col; ++j) row[j * w.stride[3]] = 0.0f;
    for (int64_t j = end; j < all; ++j) row[j * w.stride[3]] = 0.0f;
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

// A decode task of x.kv_heads kv heads (the first one's task t): the strides to the next
// kv head's operands and partials.
void CoverKvHeads(const Call& c, const plan::SequencePlan& p, const plan::DecodeIndex& x,
                  kernels::FlashTask* t) {
  if (x.kv_heads <= 1) return;
  const int64_t group = c.shape.q_heads / c.shape.kv_heads;
  t->kv_heads = x.kv_heads;
  t->q_kv = c.q.stride[1] * group;
  t->k_kv = c.k.stride[1];
  t->v_kv = c.v.stride[1];
  t->ks_kv = c.k_scale.t.stride[1];  // (0 where absent or broadcast)
  t->vs_kv = c.v_scale.t.stride[1];
  t->o_kv = c.o.stride[1] * group;
  t->lse_kv = c.has_lse ? c.lse.stride[1] * group : 0;
  t->partial_kv = plan::PartialOffset(p.schedule, p.shape, 1, 0) -
                  plan::PartialOffset(p.schedule, p.shape, 0, 0);
  t->rec_kv = p.schedule.record_floats;
}

// First-phase task `task` of plan p: a head (empty rows, naive, reference), a prefill
// tile or a decode unit (none of a dense call's units below `dense_spans`: cascade tasks
// run those).
void RunTask(const Call& c, const plan::SequencePlan& p, int64_t task, float* shared, void* slot,
             int64_t dense_spans) {
  float* s = static_cast<float*>(slot);
  if (p.empty || p.schedule.algorithm != plan::Algorithm::kFused) {
    const plan::HeadIndex x = plan::HeadTaskAt(p.shape, task);
    const plan::Sequence seq = SequenceAt(c, p.first_seq + x.batch);
    const kernels::Operands op = OperandsOf(c, seq, x.head);
    if (op.weights) ZeroWeightsOutside(c, seq, x.head);
    if (p.empty) {
      WriteEmptyRows(op);
    } else {
      c.table->naive_head(op, s);
    }
    return;
  }
  if (!p.schedule.decode) {
    const plan::PrefillIndex x = plan::PrefillTaskAt(p.schedule, p.shape, task);
    const plan::Sequence seq = SequenceAt(c, p.first_seq + x.batch);
    kernels::FlashTask t = FlashTaskOf(c, seq, x.kv_head);
    t.row_begin = x.row_begin;
    t.row_end = x.row_end;
    c.table->flash_task(t, s);
    return;
  }
  const plan::DecodeIndex x = plan::DecodeTaskAt(p.schedule, p.shape, task);
  const plan::Sequence seq = SequenceAt(c, p.first_seq + x.batch);
  if (x.unit < seq.covered || x.unit < dense_spans) return;  // its group's tasks run it
  kernels::FlashTask t = FlashTaskOf(c, seq, x.kv_head);
  t.gathered = x.gathered;
  t.span_begin = x.gathered ? 0 : x.span;
  t.span_end = x.gathered ? 0 : x.span + 1;
  t.partial = shared + p.partials + plan::PartialOffset(p.schedule, p.shape, x.pair, x.unit);
  if (c.key_acc) t.rec = shared + p.partials + plan::RecordOffset(p.schedule, p.shape, x.pair);
  CoverKvHeads(c, p, x, &t);
  c.table->flash_task(t, s);
}

// Cascade task i: one span of a group's sequences for one kv head (plan::CascadeGroup).
void RunCascadeTask(const Call& c, const plan::BatchSchedule& b, int64_t i, float* shared,
                    void* slot) {
  kernels::FlashTask members[plan::kCascadeMembers];
  int64_t count = 0;
  auto run = [&](int64_t span) {
    kernels::FlashTask t0 = members[0];
    t0.members = members;
    t0.n_members = count;
    t0.gathered = 0;
    t0.span_begin = span;
    t0.span_end = span + 1;
    c.table->flash_task(t0, static_cast<float*>(slot));
  };
  if (b.dense_spans > 0) {  // a dense call: span, chunk of entries, kv head
    const int64_t kv_heads = c.shape.kv_heads, batch = c.shape.batch;
    const int64_t chunks = (batch + plan::kCascadeMembers - 1) / plan::kCascadeMembers;
    const int64_t kvh = i % kv_heads, chunk = i / kv_heads % chunks, span = i / kv_heads / chunks;
    const plan::SequencePlan& p = b.plans[0];
    for (int64_t e = chunk * plan::kCascadeMembers; e < batch && count < plan::kCascadeMembers;
         ++e) {
      kernels::FlashTask& m = members[count++];
      m = FlashTaskOf(c, SequenceAt(c, e), kvh);
      m.partial =
          shared + p.partials + plan::PartialOffset(p.schedule, p.shape, e * kv_heads + kvh, span);
      if (c.key_acc)
        m.rec = shared + p.partials + plan::RecordOffset(p.schedule, p.shape, e * kv_heads + kvh);
    }
    return run(span);
  }
  int64_t g = 0;
  while (g + 1 < b.group_count && b.groups[g + 1].first_task <= i) ++g;
  const plan::CascadeGroup& gr = b.groups[g];
  const int64_t kv_heads = c.shape.kv_heads;
  int64_t t = i - gr.first_task, span = 0;
  for (;; ++span) {
    const int64_t m = plan::SpanMembers(gr, c.seqs, span);
    const int64_t n = (m + plan::kCascadeMembers - 1) / plan::kCascadeMembers * kv_heads;
    if (t < n) break;
    t -= n;
  }
  const int64_t kvh = t % kv_heads, skip = t / kv_heads * plan::kCascadeMembers;
  int64_t seen = 0;
  for (int64_t n = gr.lead; n >= 0 && count < plan::kCascadeMembers; n = c.seqs[n].next_member) {
    const plan::Sequence& seq = c.seqs[n];
    if (seq.shared <= span || seen++ < skip) continue;
    const plan::SequencePlan& p = b.plans[n];  // (one plan per sequence)
    kernels::FlashTask& m = members[count++];
    m = FlashTaskOf(c, seq, kvh);
    m.partial = shared + p.partials + plan::PartialOffset(p.schedule, p.shape, kvh, span);
    if (c.key_acc) m.rec = shared + p.partials + plan::RecordOffset(p.schedule, p.shape, kvh);
  }
  run(span);
}

void Run(parallel::Pool& pool, Call* call, const plan::BatchSchedule& b, void* scratch) {
  float* shared = reinterpret_cast<float*>(static_cast<char*>(scratch) +
                                           b.slot_bytes * static_cast<size_t>(pool.threads()));
  if (call->has_key_scores) {
    call->key_acc = reinterpret_cast<int64_t*>(reinterpret_cast<char*>(shared) + b.key_acc);
    KeyScoresPhase(pool, *call, true, scratch, b.slot_bytes);
  }
  const Call& c = *call;
  RunTasks(pool, b.tasks + b.cascade_tasks, scratch, b.slot_bytes, [&](int64_t i, void* s) {
    if (i >= b.tasks) return RunCascadeTask(c, b, i - b.tasks, shared, s);
    const plan::SequencePlan& p = b.plans[plan::PlanOfTask(b, i)];
    RunTask(c, p, i - p.first_task, shared, s, b.dense_spans);
  });
  if (b.merges > 0)
    RunTasks(pool, b.merges, scratch, b.slot_bytes, [&](int64_t i, void* s) {
      const plan::SequencePlan& p = b.plans[plan::PlanOfMerge(b, i)];
      const int64_t pair = i - p.first_merge, kv_heads = c.shape.kv_heads;
      const plan::Sequence seq = SequenceAt(c, p.first_seq + pair / kv_heads);
      kernels::FlashTask t = FlashTaskOf(c, seq, pair % kv_heads);
      if (c.key_acc) t.rec = shared + p.partials + plan::RecordOffset(p.schedule, p.shape, pair);
      c.table->flash_merge(t,
                           shared + p.partials + plan::PartialOffset(p.schedule, p.shape, pair, 0),
                           p.schedule.units, static_cast<float*>(s));
    });
  if (c.has_key_scores) KeyScoresPhase(pool, c, false, scratch, b.slot_bytes);
}

// The scratch's bytes before a call of sequences' tables: the slots and the partials.
size_t UsedBytes(const plan::BatchSchedule& b, int threads) {
  return base::SatAdd(base::SatMul(b.slot_bytes, base::Count(threads)), b.shared_bytes);
}

}  // namespace

size_t ForwardWorkspaceBytes(const Call& c, int threads) {
  return plan::WorkspaceBytes(ScheduleOf(c, nullptr), threads, c.sequences > 0);
}

void Forward(parallel::Pool& pool, Call* c, void* scratch) {
  if (c->sequences == 0) {
    plan::SequencePlan entries;
    const plan::BatchSchedule b = ScheduleOf(*c, &entries);
    c->shared_kv_rows = b.shared_kv_rows;
    Run(pool, c, b, scratch);
    return;
  }
  // Sized first; then the sequences and their plans are laid out in the scratch.
  const plan::SequenceTables tables =
      plan::TablesAfter(UsedBytes(ScheduleOf(*c, nullptr), pool.threads()), c->sequences, true);
  char* base = static_cast<char*>(scratch);
  plan::Sequence* seqs = reinterpret_cast<plan::Sequence*>(base + tables.offset);
  for (int64_t n = 0; n < c->sequences; ++n) new (&seqs[n]) plan::Sequence(SequenceAt(*c, n));
  c->seqs = seqs;
  const plan::BatchSchedule b =
      ScheduleOf(*c, reinterpret_cast<plan::SequencePlan*>(base + tables.plans), seqs,
                 reinterpret_cast<plan::CascadeGroup*>(base + tables.groups));
  c->shared_kv_rows = b.shared_kv_rows;
  Run(pool, c, b, scratch);
}

}  // namespace run
}  // namespace octattn
