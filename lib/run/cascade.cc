// Cascade decode: the groups of a call's sequences whose leading key spans are the same
// rows, and their tasks (plan::CascadeGroup says what they run).
#include "lib/run/cascade.h"

#include <algorithm>

#include "lib/base/sizes.h"

namespace octattn {
namespace run {

namespace {

// Where key 0 of a sequence is: equal for two sequences of a call exactly when their
// key 0 (and value 0, and their scales) are the same rows. Paged: the block and the
// row in it (the block's values and scales are that block's); contiguous: the rows'
// element offsets in k, v and the scale tensors, and the tensor row (scale rows count
// from it).
struct Origin {
  int64_t q_len, a, b, c, d, e;
  bool operator==(const Origin& o) const {
    return q_len == o.q_len && a == o.a && b == o.b && c == o.c && d == o.d && e == o.e;
  }
};

Origin OriginOf(const Call& c, const plan::Sequence& s) {
  if (s.paging.blocks) {
    const kernels::Paging& p = s.paging;
    return {s.q_len, p.blocks[p.first / p.size], p.first % p.size, 0, 0, 0};
  }
  return {s.q_len,
          s.batch * c.k.stride[0] + s.k_row * c.k.stride[2],
          s.batch * c.v.stride[0] + s.k_row * c.v.stride[2],
          s.batch * c.k_scale.t.stride[0],
          s.batch * c.v_scale.t.stride[0],
          s.k_row};
}

// The leading spans, of the first `limit`, whose keys are the same rows for a and b
// (their origins equal). Contiguous rows of equal origins are the same rows throughout.
int64_t SameSpans(const plan::Sequence& a, const plan::Sequence& b, int64_t limit) {
  if (!a.paging.blocks) return limit;
  const kernels::Paging &p = a.paging, &q = b.paging;
  int64_t n = 0;
  for (; n < limit; ++n) {
    const int64_t end = (n + 1) * kernels::kSpanKeys;
    for (int64_t j = n * kernels::kSpanKeys; j < end;) {
      const int64_t ra = p.first + j, rb = q.first + j;
      const int64_t off = ra % p.size;
      if (p.blocks[ra / p.size] != q.blocks[rb / q.size] || off != rb % q.size) return n;
      j += p.size - off;
    }
  }
  return n;
}

}  // namespace

void FormCascade(const Call& c, plan::Sequence* seqs, plan::BatchSchedule* b) {
  if (c.algorithm != plan::Algorithm::kFused) return;
  if (c.sequences == 0) {
    // A dense call whose entries read the same rows (k, v and their scales with batch
    // stride 0): one group of every entry, over the spans they read whole.
    const int64_t n = c.shape.batch;
    if (n < 2 || c.k.stride[0] != 0 || c.v.stride[0] != 0 || c.k_scale.t.stride[0] != 0 ||
        c.v_scale.t.stride[0] != 0)
      return;
    plan::CallShape one = c.shape;
    one.batch = 1;
    const int64_t spans = plan::WholeSpans(one, c.algorithm);
    if (spans == 0) return;
    b->dense_spans = spans;
    b->slot_bytes = std::max(
        b->slot_bytes, plan::CascadeSlotBytes(one, std::min(n, plan::kCascadeMembers), c.table));
    const int64_t chunks = (n + plan::kCascadeMembers - 1) / plan::kCascadeMembers;
    b->cascade_tasks = spans * chunks * c.shape.kv_heads;
    b->shared_kv_rows = spans * (n - chunks) * kernels::kSpanKeys * c.shape.kv_heads;
    return;
  }
  if (c.sequences < 2) return;
  // Sizing (no tables yet) forms the same groups from the same sequences into a table
  // of its own, without linking their members.
  plan::CascadeGroup own[plan::kCascadeGroups];
  plan::CascadeGroup* groups = b->groups ? b->groups : own;
  Origin origins[plan::kCascadeGroups];
  int64_t whole[plan::kCascadeGroups], tail[plan::kCascadeGroups];
  int64_t count = 0;
  plan::CallShape one = c.shape;
  one.batch = 1;
  auto shape_of = [&](const plan::Sequence& s) {
    plan::CallShape sh = one;
    sh.q_len = s.q_len;
    sh.kv_len = s.kv_len;
    sh.mask = s.mask;
    return sh;
  };
  auto at = [&](int64_t n) { return seqs ? seqs[n] : SequenceAt(c, n); };
  for (int64_t n = 0; n < c.sequences; ++n) {
    const plan::Sequence s = at(n);
    const int64_t spans = plan::WholeSpans(shape_of(s), c.algorithm);
    if (spans == 0) continue;
    const Origin o = OriginOf(c, s);
    int64_t g = 0;
    while (g < count && !(origins[g] == o)) ++g;
    if (g == count) {  // a new group's lead (none past the table's size)
      if (count == plan::kCascadeGroups) continue;
      origins[g] = o;
      groups[g] = plan::CascadeGroup{n, 1, 0, 0, 0};
      whole[g] = spans;
      tail[g] = n;
      ++count;
      if (seqs) seqs[n].shared = spans;
      continue;
    }
    // A member: the spans it shares with the lead (the lead's are all it reads whole).
    const int64_t shared = SameSpans(at(groups[g].lead), s, std::min(spans, whole[g]));
    if (shared == 0) continue;
    if (seqs) {
      seqs[n].shared = shared;
      seqs[tail[g]].next_member = n;
    }
    tail[g] = n;
    ++groups[g].members;
    groups[g].spans = std::max(groups[g].spans, shared);  // two members read these
  }
  int64_t kept = 0;
  for (int64_t g = 0; g < count; ++g) {
    plan::CascadeGroup gr = groups[g];
    if (gr.members < 2) continue;
    b->slot_bytes =
        std::max(b->slot_bytes,
                 plan::CascadeSlotBytes(shape_of(at(gr.lead)),
                                        std::min(gr.members, plan::kCascadeMembers), c.table));
    ++kept;
    if (!seqs) continue;  // sizing: the slot is all it needs
    for (int64_t s = gr.lead; s >= 0; s = seqs[s].next_member)
      seqs[s].covered = std::min(seqs[s].shared, gr.spans);
    // Its tasks: per span, its members in chunks of kCascadeMembers, each chunk once per
    // kv head; each chunk reads the span once for its members.
    gr.first_task = b->cascade_tasks;
    for (int64_t sp = 0; sp < gr.spans; ++sp) {
      const int64_t m = plan::SpanMembers(gr, seqs, sp);
      const int64_t chunks = (m + plan::kCascadeMembers - 1) / plan::kCascadeMembers;
      gr.tasks += chunks * c.shape.kv_heads;
      b->shared_kv_rows += (m - chunks) * kernels::kSpanKeys * c.shape.kv_heads;
    }
    b->cascade_tasks += gr.tasks;
    groups[kept - 1] = gr;
  }
  b->group_count = kept;
}

}  // namespace run
}  // namespace octattn
