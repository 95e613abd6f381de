// How an attention call runs: the algorithm's tasks and their order, the scratch of one
// thread's slot, the shared bytes and the layout of decode partials. Pure functions of a
// validated call's shape and the target's table (whose size functions are pure too).
#ifndef OCTATTN_LIB_PLAN_SCHEDULE_H_
#define OCTATTN_LIB_PLAN_SCHEDULE_H_

#include <stddef.h>
#include <stdint.h>

#include "lib/base/mask.h"
#include "lib/base/sizes.h"
#include "lib/kernels/kernels.h"

namespace octattn {
namespace plan {

// The sizes of a validated call, with the mask's q_start resolved.
struct CallShape {
  int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, value_dim;
  int64_t v_dim;  // element stride of v along value_dim (packed copies when not 1)
  base::Mask mask;
  kernels::Mods mods;  // the call's modifiers (scratch sizes depend on their presence)
  // Whether the kv heads share key rows (k's and v's strides from one head to the next
  // below those from one row to the next: [T, H, D] layouts, vLLM's pools): decode tasks
  // then cover every kv head of a unit, so that whole rows stream in order.
  bool shared_rows = false;
  // The element types of q, k, v and o (16-bit ones take conversion scratch).
  base::Dtype q_type = base::kF32, k_type = base::kF32, v_type = base::kF32, o_type = base::kF32;
  // OCTATTN_QK_INT8: q's rows rounded to int8 in blocks of this many dimensions (0: exact;
  // the rounded rows take scratch).
  int64_t qk_block = 0;
  // Key scores are wanted (their records take scratch; prefill tasks take fewer rows where
  // their records would exceed kRecordBytes).
  bool key_scores = false;
  // The (sequence, kv head) pairs of the whole call this shape is a plan of (0: those of
  // the shape itself, batch * kv_heads): whether its keys split (kSplitPairs) depends on
  // the call's other tasks too.
  int64_t call_pairs = 0;
};
constexpr size_t kRecordBytes = size_t{16} << 20;

enum class Algorithm { kReference, kNaive, kFused };

// Fused calls with at most this many query rows per kv head (the GQA group's heads
// stacked) are decode-shaped: their keys are split into units run as parallel tasks and
// merged in unit order, which changes no byte (kernels::kSpanKeys).
constexpr int64_t kDecodeRows = 16;
// Decode tasks covering every kv head (CallShape::shared_rows) only where a call has at
// least this many (batch, unit) pairs: fewer would leave threads idle.
constexpr int64_t kSharedRowsTasks = 4;
// Fused calls with more rows per kv head than kDecodeRows but one query tile of them
// (QueryTile) and fewer than kSplitPairs (sequence, kv head) pairs in the call have
// their keys split into units as decode's are, where the partials (and key-score
// records) of the call's pairs take at most kSplitBytes: without it such a call (MLA's
// absorbed decode: one latent kv head and 16-128 query heads on a row, or a chunk of
// prompt over a long cache) is a task or a few, one thread each. The bytes are those of
// the unsplit task (the units are its key spans).
constexpr int64_t kSplitPairs = 16;
constexpr size_t kSplitBytes = size_t{64} << 20;

struct Schedule {
  Algorithm algorithm = Algorithm::kFused;
  size_t slot_bytes = 0;    // one thread's scratch (SIZE_MAX: does not fit in size_t)
  size_t shared_bytes = 0;  // decode partials, after every slot
  int64_t tasks = 0;        // tasks of the first phase (decode: a merge phase follows)
  bool decode = false;      // keys split into units, merged in a second phase
  bool gathered = false;    // the mask has strided columns: unit 0 gathers them
  int64_t units = 0;        // decode: key units per (batch, kv head)
  int64_t q_tile = 0;       // prefill: query rows per head of a task (QueryTile)
  int64_t q_tiles = 0;      // prefill: query tiles per (batch, kv head)
  size_t state_floats = 0;  // decode: floats of one row's partial state
  int64_t kv_per_task = 1;  // decode: the kv heads a task covers (shared rows: all)
  // Decode with key scores: floats of a pair's records (its rows' kernels::RecordShape),
  // kept after every pair's partials.
  size_t record_floats = 0;
};

// Query rows per head of a prefill task for a GQA group of `group` heads: about
// kernels::kTaskRows rows per task in whole micro-kernel blocks, so that every block of
// a full task is full and each packed K/V tile serves that many rows.
int64_t QueryTile(int64_t group);

// One past the last key any row of the call may read.
int64_t CallKeyEnd(const CallShape& c);
// The keys the fused path's units cover: CallKeyEnd, or with key lists the most keys a
// row's lists name (a row's listed keys are its units' keys).
int64_t ListedKeyEnd(const CallShape& c);

Schedule MakeSchedule(const CallShape& c, Algorithm algorithm, const kernels::Table* table);

// One sequence of a padded or ragged batch: its query rows [q_row, q_row + q_len) and its
// valid key rows [k_row, k_row + kv_len) of batch entry `batch`, inside its key rows
// [seg_row, seg_row + seg_len) (padded: all of the entry's), and its mask (key row k_row
// at key coordinate 0).
// Paged (paging.blocks set): k_row is the first valid logical row and the key rows are
// found through paging. k_col is key 0's column in the bias, mask and weights tensors.
struct Sequence {
  int64_t batch, q_row, q_len, k_row, kv_len;
  int64_t seg_row, seg_len;
  base::Mask mask;
  int64_t k_col = 0;
  int64_t entry = 0;  // its index among the call's sequences (a block mask's batch entry)
  kernels::Paging paging{};
  // Cascade decode (CascadeGroup): its leading key spans below `covered` run in the
  // group's tasks, not its own; `shared`: the spans it shares with the group's lead; its
  // group's next sequence (-1: none).
  int64_t covered = 0, shared = 0, next_member = -1;
};

// Cascade decode. Decode-shaped sequences of a call whose leading key spans are the same
// key and value rows (a paged cache's shared blocks, or the same rows of a contiguous
// cache) form a group; a task of the group runs one such span for up to kCascadeMembers
// of them (FlashTask::members), reading it once for all, and writes each one's partial of
// that unit, the bytes its own task writes. A call forms at most kCascadeGroups groups
// (sequences past those run alone).
constexpr int64_t kCascadeMembers = 16;
static_assert(kCascadeMembers <= kernels::kMaxTaskKvHeads, "a stacked task's members");
constexpr int64_t kCascadeGroups = 64;
struct CascadeGroup {
  int64_t lead = 0;     // its first sequence; the others follow Sequence::next_member
  int64_t members = 0;  // sequences in it
  int64_t spans = 0;    // leading spans at least two of them share (their units run here)
  int64_t first_task = 0, tasks = 0;  // its tasks, numbered from the call's cascade tasks
};
// The leading whole key spans every row of a sequence (its shape: batch 1) reads whole,
// where its call may share them: fused and decode-shaped, no strided columns, and no
// modifier that depends on the row's sequence or position (softcap and sinks may be
// present); 0 otherwise.
int64_t WholeSpans(const CallShape& c, Algorithm algorithm);
// The sequences of a group that read span c: those whose `shared` exceeds c.
int64_t SpanMembers(const CascadeGroup& g, const Sequence* seqs, int64_t c);
// A cascade task's slot: the scratch of one task of `members` sequences' rows stacked (shape c).
size_t CascadeSlotBytes(const CallShape& c, int64_t members, const kernels::Table* table);

// A call of sequences: each is scheduled as a call of batch 1 with its own sizes and
// mask, its tasks numbered after those of the sequences before it; the first phase runs
// every sequence's tasks (prefill tiles, decode units, or for reference and naive its
// heads), the second the merges of the decode-shaped ones. A sequence with no query row
// has no task; one with no valid key (`empty`) has one task per query head, which
// writes its empty rows. A dense call is the same with one plan over its batch entries,
// each a sequence of the call's sizes (AddEntries).
struct SequencePlan {
  CallShape shape;  // batch: the sequences it covers (1, or a dense call's batch)
  Schedule schedule;
  bool empty = false;
  int64_t first_seq = 0;                // the sequence of its batch entry 0
  int64_t first_task = 0, tasks = 0;    // first phase
  int64_t first_merge = 0, merges = 0;  // second phase (decode: its (entry, kv head) pairs)
  size_t partials = 0;  // decode: its partials' offset from the shared base, in floats
};
struct BatchSchedule {
  SequencePlan* plans = nullptr;  // each plan (null while only sizing)
  int64_t count = 0;              // plans added
  int64_t sequences = 0;          // sequences they cover
  size_t slot_bytes = 0;          // the largest slot of any plan
  size_t shared_bytes = 0;        // every decode-shaped plan's partials
  int64_t tasks = 0, merges = 0;
  // Cascade decode: its groups (null while only sizing) and their tasks, run in the first
  // phase after the plans' tasks; K/V rows of one kv head read once for several sequences
  // (a span of n rows read for m of them counts n * (m - 1)).
  CascadeGroup* groups = nullptr;
  int64_t group_count = 0, cascade_tasks = 0, shared_kv_rows = 0;
  // A dense call whose entries all read the same rows: one group of every entry, its
  // leading spans below this (its tasks: per span, chunks of entries, per kv head).
  int64_t dense_spans = 0;
  // Key scores: the byte offset of the call's fixed-point sums from the shared base (the
  // last of the shared bytes).
  size_t key_acc = 0;
};
// Adds the next sequence of a call to b (`call`: the call's shape, its sizes those of
// the tensors); its plan goes to b.plans[b.count] when b.plans is set.
void AddSequence(const CallShape& call, const Sequence& seq, Algorithm algorithm,
                 const kernels::Table* table, BatchSchedule* b);
// Adds a dense call's batch entries as one plan.
void AddEntries(const CallShape& call, Algorithm algorithm, const kernels::Table* table,
                BatchSchedule* b);
// Bytes of workspace for `threads` slots and the shared bytes, with `tables` the call's
// Sequence and SequencePlan entries (SequenceTables), plus alignment slack.
size_t WorkspaceBytes(const BatchSchedule& s, int threads, bool tables);
// A call of `count` sequences keeps its tables in its scratch, so that a caller's
// workspace is all the memory it uses: from `offset` (past `used` bytes of slots and
// shared bytes) its Sequence entries, then, with `plans` (the forward), the SequencePlans.
struct SequenceTables {
  size_t offset = 0, plans = 0, groups = 0, end = 0;  // byte offsets from the scratch's base
};
SequenceTables TablesAfter(size_t used, int64_t count, bool plans);
// The plan whose first-phase (merge: second-phase) tasks hold task i.
size_t PlanOfTask(const BatchSchedule& s, int64_t i);
size_t PlanOfMerge(const BatchSchedule& s, int64_t i);

// The backward (reference or fused) of a call of `sequences` sequences (a dense call:
// its batch entries): one task per (sequence, kv head), its slot the scratch of the
// largest sequence's group (AddBackwardSequence); shared: `sequences * q_heads` doubles
// of per-sequence sink sums when `sinks` (the gradient of the sinks is wanted).
Schedule BackwardSchedule(const CallShape& call, Algorithm algorithm, int64_t sequences,
                          bool sinks);
// Grows s's slot to that of one sequence of the call (every sequence of a dense call
// has the call's sizes: adding one is enough).
void AddBackwardSequence(const CallShape& call, const Sequence& seq, const kernels::Table* table,
                         Schedule* s);

// Bytes of workspace for `threads` slots plus the shared bytes and alignment slack, and
// with `sequences` > 0 the tables of that many Sequence entries (SequenceTables, no
// plans: the backward's); SIZE_MAX if that does not fit in size_t.
size_t WorkspaceBytes(const Schedule& s, int threads, int64_t sequences = 0);

// Reference and naive task i: one (batch, query head).
struct HeadIndex {
  int64_t batch, head;
};
HeadIndex HeadTaskAt(const CallShape& c, int64_t i);

// Fused prefill task i: one (batch, kv head, query tile). The tasks of one (batch, kv
// head) come together, its last query tiles first (under a causal mask they read the
// most keys): tasks that run at the same time or one after the other read the same K
// and V, which stay in the last-level cache, and the shortest tasks of the call come
// last, so that no long task runs alone at the end.
struct PrefillIndex {
  int64_t batch, kv_head, row_begin, row_end;
};
PrefillIndex PrefillTaskAt(const Schedule& s, const CallShape& c, int64_t i);

// Fused decode task i: one (batch, kv head) pair and one key unit, or with kv_per_task >
// 1 that pair and the next kv_heads - 1 (the batch's other kv heads); unit 0 is the
// gathered strided columns when the mask has them, the others key spans in key order.
struct DecodeIndex {
  int64_t batch, kv_head, pair, unit;
  int64_t kv_heads;
  bool gathered;
  int64_t span;  // the key span of a non-gathered unit (kernels::kSpanKeys)
};
DecodeIndex DecodeTaskAt(const Schedule& s, const CallShape& c, int64_t i);
// Offset, in floats from the partials' base, of a pair's (and unit's) partial states:
// [pair][unit][row] states of state_floats each.
size_t PartialOffset(const Schedule& s, const CallShape& c, int64_t pair, int64_t unit);
// Offset, in floats from the partials' base, of a pair's records (key scores).
size_t RecordOffset(const Schedule& s, const CallShape& c, int64_t pair);

}  // namespace plan
}  // namespace octattn

#endif  // OCTATTN_LIB_PLAN_SCHEDULE_H_
