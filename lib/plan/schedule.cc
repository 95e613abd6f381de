// Planning of an attention call: pure functions, unit-tested in tests/plan_test.cc.
#include "lib/plan/schedule.h"

#include <algorithm>
#include <new>

namespace octattn {
namespace plan {

using namespace base;  // NOLINT(google-build-using-namespace): sizes and masks

namespace {

size_t AlignBytes(size_t n) { return RoundUp(n, kAlign); }
size_t FloatBytes(size_t floats) { return AlignBytes(SatMul(floats, sizeof(float))); }

// The size functions only ask whether a task keeps key scores: a non-null key_acc.
int64_t probe_acc = 0;

// The fused task of a call's first (batch, kv head) with every row and every key span, for
// the size functions (which read shapes only).
kernels::FlashTask ProbeTask(const CallShape& c) {
  kernels::FlashTask t{};
  t.op.q_len = c.q_len;
  t.op.kv_len = c.kv_len;
  t.op.head_dim = c.head_dim;
  t.op.value_dim = c.value_dim;
  t.op.v_dim = c.v_dim;
  t.op.mask = c.mask;
  t.op.mods = c.mods;
  t.op.q_type = c.q_type;
  t.op.k_type = c.k_type;
  t.op.v_type = c.v_type;
  t.op.o_type = c.o_type;
  t.op.qk_block = c.qk_block;
  t.heads = c.q_heads / c.kv_heads;
  t.row_begin = 0;
  t.row_end = c.q_len;
  return t;
}

}  // namespace

int64_t QueryTile(int64_t group) {
  const int64_t rows = (kernels::kTaskRows + group - 1) / group;
  return (rows + kernels::kBlockRows - 1) / kernels::kBlockRows * kernels::kBlockRows;
}

namespace {

// Whether a fused call of more than kDecodeRows rows per kv head splits its keys into
// `units` (kSplitPairs): bounded by the partials and records of every pair of the call,
// as if each were this shape's.
bool SplitsKeys(const CallShape& c, int64_t units, const kernels::Table* table) {
  const int64_t group = c.q_heads / c.kv_heads;
  const int64_t call_pairs = c.call_pairs > 0 ? c.call_pairs : c.batch * c.kv_heads;
  if (call_pairs >= kSplitPairs || c.q_len > QueryTile(group)) return false;
  size_t row = SatMul(Count(units), table->flash_state_floats(c.value_dim));
  if (c.key_scores)
    row = SatAdd(row,
                 Count(kernels::RecordOf(c.mask, c.mask.q_start + c.q_len, c.kv_len).RowFloats()));
  const size_t pair = SatMul(SatMul(Count(group * c.q_len), row), sizeof(float));
  return SatMul(pair, Count(call_pairs)) <= kSplitBytes;
}

}  // namespace

int64_t CallKeyEnd(const CallShape& c) {
  return KeyEnd(c.mask, c.mask.q_start + c.q_len, c.kv_len);
}

int64_t ListedKeyEnd(const CallShape& c) {
  const int64_t end = CallKeyEnd(c);
  return c.mods.Listed() ? std::min(end, c.mods.ListCapacity()) : end;
}

Schedule MakeSchedule(const CallShape& c, Algorithm algorithm, const kernels::Table* table) {
  Schedule s;
  s.algorithm = algorithm;
  kernels::FlashTask probe = ProbeTask(c);
  if (algorithm != Algorithm::kFused) {  // one task per head (the reference's table too)
    if (c.key_scores) probe.op.key_acc = &probe_acc;
    s.tasks = c.batch * c.q_heads;
    s.slot_bytes = FloatBytes(table->naive_scratch_floats(probe.op));
    return s;
  }
  const int64_t group = c.q_heads / c.kv_heads, pairs = c.batch * c.kv_heads;
  const int64_t spans = (ListedKeyEnd(c) + kernels::kSpanKeys - 1) / kernels::kSpanKeys;
  // (Key lists: a row's listed keys in units; their strided columns are among them.)
  s.gathered = c.mask.causal && c.mask.window > 0 && c.mask.stride > 0 && !c.mods.Listed();
  s.units = spans + (s.gathered ? 1 : 0);
  const bool few_rows = group * c.q_len <= kDecodeRows;
  s.decode = s.units > 1 && (few_rows || SplitsKeys(c, s.units, table));
  if (s.decode) {
    // Kv heads sharing key rows: one task per (batch, unit) reads every head's slice of
    // the rows, where that leaves tasks enough for a few threads (no modifiers: a task's
    // heads then differ in their pointers only).
    if (few_rows && c.shared_rows && c.kv_heads > 1 && c.kv_heads <= kernels::kMaxTaskKvHeads &&
        !c.mods.Scores() && !c.mods.sinks && c.batch * s.units >= kSharedRowsTasks)
      s.kv_per_task = c.kv_heads;
    probe.kv_heads = s.kv_per_task;
    s.tasks = pairs / s.kv_per_task * s.units;
    s.state_floats = table->flash_state_floats(c.value_dim);
    // A merge task's scratch: one state and one padded output row (then with key scores a
    // float per key of its records and one per row: the kernel's RecordSumFloats).
    size_t merge = SatAdd(s.state_floats, SatAdd(Count(c.value_dim), 2 * kAlign));
    const int64_t task_rows = group * c.q_len;
    const kernels::RecordShape rec = kernels::RecordOf(c.mask, c.mask.q_start + c.q_len, c.kv_len);
    if (c.key_scores) {
      merge = SatAdd(merge, Count((rec.tiles + rec.gathered) * kernels::kTileKeys + task_rows));
      s.record_floats = SatMul(Count(task_rows), Count(rec.RowFloats()));
    }
    s.slot_bytes = FloatBytes(std::max(table->flash_scratch_floats(probe), merge));
    size_t rows = SatMul(Count(pairs), Count(s.units));
    rows = SatMul(rows, Count(task_rows));
    s.shared_bytes =
        FloatBytes(SatAdd(SatMul(rows, s.state_floats), SatMul(Count(pairs), s.record_floats)));
  } else {
    s.q_tile = QueryTile(group);
    if (c.key_scores) {
      // A task's records take 4 bytes per (row, key): fewer rows where the keys are many.
      probe.op.key_acc = &probe_acc;
      const size_t row_bytes =
          SatMul(Count(kernels::RecordOf(c.mask, c.mask.q_start + c.q_len, c.kv_len).RowFloats()),
                 sizeof(float));
      while (s.q_tile > kernels::kBlockRows &&
             SatMul(Count(s.q_tile * group), row_bytes) > kRecordBytes)
        s.q_tile -= kernels::kBlockRows;
    }
    s.q_tiles = (c.q_len + s.q_tile - 1) / s.q_tile;
    s.tasks = pairs * s.q_tiles;
    // (The last rows read the most keys: their records are the largest.)
    probe.row_begin = c.q_len - std::min(c.q_len, s.q_tile);
    probe.row_end = c.q_len;
    s.slot_bytes = FloatBytes(table->flash_scratch_floats(probe));
  }
  return s;
}

Schedule BackwardSchedule(const CallShape& call, Algorithm algorithm, int64_t sequences,
                          bool sinks) {
  Schedule s;
  s.algorithm = algorithm;
  s.tasks = sequences * call.kv_heads;
  if (sinks) s.shared_bytes = AlignBytes(SatMul(SatMul(Count(sequences), Count(call.q_heads)), 8));
  return s;
}

void AddBackwardSequence(const CallShape& call, const Sequence& seq, const kernels::Table* table,
                         Schedule* s) {
  if (seq.q_len == 0 || seq.kv_len == 0) return;  // no task of its runs a kernel
  CallShape one = call;
  one.batch = 1;
  one.q_len = seq.q_len;
  one.kv_len = seq.kv_len;
  one.mask = seq.mask;
  kernels::BackwardTask probe{};
  probe.op = ProbeTask(one).op;
  probe.heads = one.q_heads / one.kv_heads;
  s->slot_bytes = std::max(s->slot_bytes, FloatBytes(table->backward_scratch_floats(probe)));
}

size_t WorkspaceBytes(const Schedule& s, int threads, int64_t sequences) {
  const size_t used = SatAdd(SatMul(s.slot_bytes, Count(threads)), s.shared_bytes);
  if (sequences == 0) return SatAdd(used, kAlign);
  return SatAdd(TablesAfter(used, sequences, false).end, kAlign);
}

namespace {

// Adds a plan of shape `p.shape` (its batch entries: the next p.shape.batch sequences).
void AddPlan(SequencePlan p, Algorithm algorithm, const kernels::Table* table, BatchSchedule* b) {
  const CallShape& c = p.shape;
  p.first_seq = b->sequences;
  p.first_task = b->tasks;
  p.first_merge = b->merges;
  if (c.q_len > 0 && c.kv_len == 0) {
    p.empty = true;
    p.tasks = c.batch * c.q_heads;
    b->tasks += p.tasks;
  } else if (c.q_len > 0) {
    p.schedule = MakeSchedule(c, algorithm, table);
    p.tasks = p.schedule.tasks;
    b->tasks += p.tasks;
    b->slot_bytes = std::max(b->slot_bytes, p.schedule.slot_bytes);
    if (p.schedule.decode) {
      p.merges = c.batch * c.kv_heads;
      b->merges += p.merges;
      p.partials = b->shared_bytes / sizeof(float);
      b->shared_bytes = SatAdd(b->shared_bytes, p.schedule.shared_bytes);
    }
  }
  if (b->plans) new (&b->plans[b->count]) SequencePlan(p);
  ++b->count;
  b->sequences += c.batch;
}

}  // namespace

void AddSequence(const CallShape& call, const Sequence& seq, Algorithm algorithm,
                 const kernels::Table* table, BatchSchedule* b) {
  SequencePlan p;
  p.shape = call;
  p.shape.batch = 1;
  p.shape.q_len = seq.q_len;
  p.shape.kv_len = seq.kv_len;
  p.shape.mask = seq.mask;
  AddPlan(p, algorithm, table, b);
}

void AddEntries(const CallShape& call, Algorithm algorithm, const kernels::Table* table,
                BatchSchedule* b) {
  SequencePlan p;
  p.shape = call;
  AddPlan(p, algorithm, table, b);
}

SequenceTables TablesAfter(size_t used, int64_t count, bool plans) {
  SequenceTables t;
  t.offset = AlignBytes(used);
  t.plans = AlignBytes(SatAdd(t.offset, SatMul(Count(count), sizeof(Sequence))));
  if (!plans) {
    t.groups = t.end = t.plans;
    return t;
  }
  t.groups = AlignBytes(SatAdd(t.plans, SatMul(Count(count), sizeof(SequencePlan))));
  t.end = AlignBytes(SatAdd(t.groups, kCascadeGroups * sizeof(CascadeGroup)));
  return t;
}

int64_t WholeSpans(const CallShape& c, Algorithm algorithm) {
  if (algorithm != Algorithm::kFused || c.q_len == 0) return 0;
  const int64_t group = c.q_heads / c.kv_heads;
  const Mask& m = c.mask;
  if (group * c.q_len > kDecodeRows || (m.causal && m.window > 0 && m.stride > 0)) return 0;
  if (c.mods.slopes || c.mods.bias || c.mods.keep || c.mods.block_kv > 0 || c.mods.Listed())
    return 0;
  const int64_t end = CallKeyEnd(c);
  if ((end + kernels::kSpanKeys - 1) / kernels::kSpanKeys <= 1) return 0;  // not decode-shaped
  int64_t n = 0;
  for (; (n + 1) * kernels::kSpanKeys <= end; ++n)
    if (Classify(m, m.q_start, m.q_start + c.q_len, n * kernels::kSpanKeys,
                 (n + 1) * kernels::kSpanKeys, c.kv_len) != kTileFull)
      break;
  return n;
}

int64_t SpanMembers(const CascadeGroup& g, const Sequence* seqs, int64_t c) {
  int64_t n = 0;
  for (int64_t s = g.lead; s >= 0; s = seqs[s].next_member) n += seqs[s].shared > c ? 1 : 0;
  return n;
}

size_t CascadeSlotBytes(const CallShape& c, int64_t members, const kernels::Table* table) {
  kernels::FlashTask probe = ProbeTask(c);
  probe.heads *= members;  // (their rows stacked)
  return FloatBytes(table->flash_scratch_floats(probe));
}

size_t WorkspaceBytes(const BatchSchedule& s, int threads, bool tables) {
  const size_t used = SatAdd(SatMul(s.slot_bytes, Count(threads)), s.shared_bytes);
  if (!tables) return SatAdd(used, kAlign);
  return SatAdd(TablesAfter(used, s.count, true).end, kAlign);
}

namespace {

// The plan whose tasks of one phase (first and count: members of SequencePlan) hold
// task i: the last one that starts at or before i and has tasks (plans without tasks
// start where the next one does).
size_t PlanOf(const BatchSchedule& s, int64_t i, int64_t SequencePlan::*first,
              int64_t SequencePlan::*count) {
  size_t lo = 0, hi = Count(s.count);
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    if (s.plans[mid].*first <= i)
      lo = mid;
    else
      hi = mid;
  }
  while (s.plans[lo].*count == 0) ++lo;
  return lo;
}

}  // namespace

size_t PlanOfTask(const BatchSchedule& s, int64_t i) {
  return PlanOf(s, i, &SequencePlan::first_task, &SequencePlan::tasks);
}

size_t PlanOfMerge(const BatchSchedule& s, int64_t i) {
  return PlanOf(s, i, &SequencePlan::first_merge, &SequencePlan::merges);
}

HeadIndex HeadTaskAt(const CallShape& c, int64_t i) { return {i / c.q_heads, i % c.q_heads}; }

PrefillIndex PrefillTaskAt(const Schedule& s, const CallShape& c, int64_t i) {
  const int64_t tile = s.q_tiles - 1 - i % s.q_tiles, pair = i / s.q_tiles;
  const int64_t begin = tile * s.q_tile;
  return {pair / c.kv_heads, pair % c.kv_heads, begin, std::min(c.q_len, begin + s.q_tile)};
}

DecodeIndex DecodeTaskAt(const Schedule& s, const CallShape& c, int64_t i) {
  DecodeIndex d;
  d.pair = i / s.units * s.kv_per_task;
  d.unit = i % s.units;
  d.batch = d.pair / c.kv_heads;
  d.kv_head = d.pair % c.kv_heads;
  d.kv_heads = s.kv_per_task;
  d.gathered = s.gathered && d.unit == 0;
  d.span = d.unit - (s.gathered ? 1 : 0);
  return d;
}

size_t PartialOffset(const Schedule& s, const CallShape& c, int64_t pair, int64_t unit) {
  const size_t rows = Count((c.q_heads / c.kv_heads) * c.q_len);
  return (Count(pair) * Count(s.units) + Count(unit)) * rows * s.state_floats;
}

size_t RecordOffset(const Schedule& s, const CallShape& c, int64_t pair) {
  return PartialOffset(s, c, c.batch * c.kv_heads, 0) + Count(pair) * s.record_floats;
}

}  // namespace plan
}  // namespace octattn
