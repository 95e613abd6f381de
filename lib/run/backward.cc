// The backward runner: one task per (sequence, kv head) of any call (a dense call's
// sequences are its batch entries), then the sinks' gradient summed in sequence order.
#include <math.h>

#include <new>

#include "lib/base/sizes.h"
#include "lib/run/run.h"

namespace octattn {
namespace run {

namespace {

// The schedule of a call (every sequence of a dense call has its sizes: one is enough).
plan::Schedule ScheduleOf(const BackwardCall& c) {
  const Call& f = c.fwd;
  plan::Schedule s =
      plan::BackwardSchedule(f.shape, f.algorithm, SequenceCount(f), c.dsinks_data != nullptr);
  const int64_t sized = f.sequences > 0 ? f.sequences : 1;
  for (int64_t n = 0; n < sized; ++n)
    plan::AddBackwardSequence(f.shape, SequenceAt(f, n), f.table, &s);
  return s;
}

// What the kernels do not write for a sequence's task: dk and dv of its key rows that no
// row reads (outside its valid range; all of them without query rows), dbias of its rows
// outside its valid keys, and for a sequence without valid keys its rows' dq, dbias and
// sink terms (empty rows: a finite sink receives dlse). Nothing for a dense call's.
void FillAround(const BackwardCall& c, const plan::Sequence& seq, int64_t n, int64_t kvh,
                double* sink_sums) {
  const plan::CallShape& sh = c.fwd.shape;
  const bool no_rows = seq.q_len == 0, no_keys = seq.kv_len == 0;
  const int64_t key_end = seq.k_row + seq.kv_len;
  const bool dbias_outside = c.dbias.hi != 0 && (no_keys || seq.k_row > 0 || key_end < sh.kv_len);
  const bool dkv_outside =
      no_rows || seq.seg_row < seq.k_row || key_end < seq.seg_row + seq.seg_len;
  if (!no_rows && !no_keys && !dbias_outside && !dkv_outside) return;
  const int64_t group = sh.q_heads / sh.kv_heads, h0 = kvh * group;
  plan::Sequence whole = seq;  // the task's pointers at the entry's row 0 and key row 0
  whole.q_row = 0;
  whole.k_row = 0;
  const kernels::BackwardTask all = BackwardTaskOf(c, whole, n, kvh, nullptr);
  for (int64_t j = seq.seg_row; j < seq.seg_row + seq.seg_len; ++j) {
    if (!no_rows && j >= seq.k_row && j < key_end) continue;
    for (int64_t d = 0; d < sh.head_dim; ++d) all.dk[j * all.dk_row + d * all.dk_dim] = 0.0f;
    for (int64_t d = 0; d < sh.value_dim; ++d) all.dv[j * all.dv_row + d * all.dv_dim] = 0.0f;
  }
  for (int64_t g = 0; g < group; ++g) {
    double sink_sum = 0.0;
    const float* sink = all.op.mods.sinks ? all.op.mods.sinks + g : nullptr;
    for (int64_t i = seq.q_row; i < seq.q_row + seq.q_len; ++i) {
      if (dbias_outside) {
        float* row = all.dbias + g * all.db_head + i * all.db_row;
        const int64_t lo = no_keys ? sh.kv_len : seq.k_row, hi = no_keys ? sh.kv_len : key_end;
        for (int64_t j = 0; j < lo; ++j) row[j * all.db_col] = 0.0f;
        for (int64_t j = hi; j < sh.kv_len; ++j) row[j * all.db_col] = 0.0f;
      }
      if (!no_keys) continue;
      for (int64_t d = 0; d < sh.head_dim; ++d)
        all.dq[g * all.dq_head + i * all.dq_row + d * all.dq_dim] = 0.0f;
      if (sink && *sink != -INFINITY && all.dlse)
        sink_sum += static_cast<double>(all.dlse[g * all.dlse_head + i * all.dlse_row]);
    }
    if (sink_sums && (no_keys || no_rows)) sink_sums[n * sh.q_heads + h0 + g] = sink_sum;
  }
}

}  // namespace

size_t BackwardWorkspaceBytes(const BackwardCall& c, int threads) {
  return plan::WorkspaceBytes(ScheduleOf(c), threads, c.fwd.sequences);
}

void Backward(parallel::Pool& pool, BackwardCall* c, void* scratch) {
  const plan::Schedule s = ScheduleOf(*c);
  const int threads = pool.threads();
  const size_t used =
      base::SatAdd(base::SatMul(s.slot_bytes, base::Count(threads)), s.shared_bytes);
  Call& f = c->fwd;
  if (f.sequences > 0) {
    plan::Sequence* seqs = reinterpret_cast<plan::Sequence*>(
        static_cast<char*>(scratch) + plan::TablesAfter(used, f.sequences, false).offset);
    for (int64_t n = 0; n < f.sequences; ++n) new (&seqs[n]) plan::Sequence(SequenceAt(f, n));
    f.seqs = seqs;
  }
  double* sink_sums = c->dsinks_data
                          ? reinterpret_cast<double*>(static_cast<char*>(scratch) +
                                                      s.slot_bytes * static_cast<size_t>(threads))
                          : nullptr;
  const int64_t kv_heads = f.shape.kv_heads;
  RunTasks(pool, s.tasks, scratch, s.slot_bytes, [&](int64_t i, void* slot) {
    const int64_t n = i / kv_heads, kvh = i % kv_heads;
    const plan::Sequence seq = SequenceAt(f, n);
    FillAround(*c, seq, n, kvh, sink_sums);
    if (seq.q_len == 0 || seq.kv_len == 0) return;
    f.table->backward_task(BackwardTaskOf(*c, seq, n, kvh, sink_sums), static_cast<float*>(slot));
  });
  // Over the sequences in order: the same bytes for any thread count.
  if (!sink_sums) return;
  const int64_t q_heads = f.shape.q_heads, count = SequenceCount(f);
  for (int64_t h = 0; h < q_heads; ++h) {
    double sum = 0.0;
    for (int64_t n = 0; n < count; ++n) sum += sink_sums[n * q_heads + h];
    c->dsinks_data[h] = static_cast<float>(sum);
  }
}

}  // namespace run
}  // namespace octattn
