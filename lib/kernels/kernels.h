// The kernel interface: one task descriptor and one table of entry points per
// (backend, target). Kernels take pointers, sizes and strides; they never fail.
#ifndef OCTATTN_LIB_KERNELS_KERNELS_H_
#define OCTATTN_LIB_KERNELS_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

#include "lib/plan/plan.h"

#define OCTATTN_INLINE inline __attribute__((always_inline))

namespace octattn {
namespace kernels {

enum Backend : int32_t { kReference = 0, kHighway = 1, kXsimd = 2 };
// Numbering matches OCTATTN_TARGET_*.
enum Target : int32_t {
  kScalar = 1,
  kSse2 = 2,
  kSsse3 = 3,
  kSse4 = 4,
  kAvx2 = 5,
  kAvx512 = 6,
};

// One (batch, query head): every pointer already points at that head's first element;
// strides are in elements. lse and weights may be null.
struct HeadTask {
  const float* q;
  int64_t q_row, q_dim;
  const float* k;
  int64_t k_row, k_dim;
  const float* v;
  int64_t v_row, v_dim;
  float* o;
  int64_t o_row, o_dim;
  float* lse;
  int64_t lse_row;
  float* weights;  // the weights output; the input weights of WeightedSum; the scores out
  int64_t w_row, w_col;
  int64_t q_len, kv_len, head_dim, value_dim;
  float scale;
  plan::Mask mask;
};

// Fused path. A row's keys are processed in units: first (with a window and a stride)
// the strided columns below the key tile its window starts in, gathered into compact
// tiles; then the keys from that tile on, in chunks of kChunkKeys at fixed positions
// (0, 1024, ...). Each unit starts a fresh online softmax and its (max, sum, output) is
// merged into the row's running state in unit order. A row therefore goes through the
// same operations whether its units run in one task (prefill) or in parallel tasks
// merged afterwards (decode), and whatever the other rows of its task are.
constexpr int64_t kChunkKeys = 1024;
constexpr int64_t kTileKeys = 256;  // keys per packed K/V tile (L2-sized)
constexpr int64_t kQueryTile = 128;  // query rows per head in a prefill task

// One fused-path task: query rows [row_begin, row_end) of `heads` consecutive query heads
// sharing one kv head, against key chunks [chunk_begin, chunk_end). Pointers point at
// the first query head of the group and its kv head.
struct FlashTask {
  const float* q;
  int64_t q_head, q_row, q_dim;
  const float* k;
  int64_t k_row, k_dim;
  const float* v;
  int64_t v_row, v_dim;
  float* o;
  int64_t o_head, o_row, o_dim;
  float* lse;  // optional
  int64_t lse_head, lse_row;
  int64_t heads, row_begin, row_end;
  int64_t q_len, kv_len, head_dim, value_dim;
  float scale;
  plan::Mask mask;
  // Units of keys, in this order: the gathered strided columns (if `gathered` and the
  // mask has them), then key chunks [chunk_begin, chunk_end).
  int32_t gathered;
  int64_t chunk_begin, chunk_end;
  // If set, the unnormalized state of the task's rows is written here (one unit's
  // partial, `flash_state_floats` per row) instead of o and lse.
  float* partial;
};

struct Table {
  Backend backend;
  Target target;
  size_t lanes;
  // Naive path: one head, scores materialized in scratch.
  size_t (*naive_scratch_floats)(const HeadTask& task);
  void (*naive_head)(const HeadTask& task, float* scratch);
  // Stages. scores_head writes q k^T (unscaled, unmasked) to task.weights.
  size_t (*scores_scratch_floats)(const HeadTask& task);
  void (*scores_head)(const HeadTask& task, float* scratch);
  void (*scale_row)(float* row, int64_t n, float scale);
  // Softmax of a row padded with -inf to a multiple of `lanes`; *lse gets log-sum-exp.
  void (*softmax_row)(float* row, int64_t n, float* lse);
  // o = weights v over every key.
  size_t (*weighted_sum_scratch_floats)(const HeadTask& task);
  void (*weighted_sum_head)(const HeadTask& task, float* scratch);
  // Fused path: scratch of one task, floats of one row's state, a task, and the merge
  // of `chunks` partials ([chunk][row] states) of a task's rows into o and lse (its
  // scratch: one state and one padded output row).
  size_t (*flash_scratch_floats)(const FlashTask& task);
  size_t (*flash_state_floats)(const FlashTask& task);
  void (*flash_task)(const FlashTask& task, float* scratch);
  void (*flash_merge)(const FlashTask& task, const float* partials, int64_t chunks,
                      float* scratch);
};

// Per-backend tables; nullptr when the target is not compiled or the CPU lacks it.
const Table* HighwayTable(Target target);
const Table* XsimdTable(Target target);
// The best target of each backend on this CPU (Highway honours
// hwy::SetSupportedTargetsForTest through HWY_DYNAMIC_DISPATCH).
const Table* HighwayBest();
const Table* XsimdBest();

}  // namespace kernels
}  // namespace octattn

#endif  // OCTATTN_LIB_KERNELS_KERNELS_H_
