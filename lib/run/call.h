// A validated call as the runners take it: its tensors, shape, kernel table and
// sequences. A dense call is a batch of sequences computed by index (batch entry n,
// every row); a padded, ragged or paged call resolves its sequences through the
// boundary's resolver into the call's scratch. Every descriptor a kernel receives is
// built here, from a sequence and a head, by one builder per descriptor.
#ifndef OCTATTN_LIB_RUN_CALL_H_
#define OCTATTN_LIB_RUN_CALL_H_

#include <stddef.h>
#include <stdint.h>

#include "lib/base/dtype.h"
#include "lib/kernels/kernels.h"
#include "lib/plan/schedule.h"

namespace octattn {
namespace run {

// A tensor that passed validation: sizes >= 1, strides >= 0, and the byte range [lo, hi)
// its elements occupy.
struct TensorInfo {
  float* data = nullptr;  // the data pointer (bytes for a bool tensor, 16-bit elements)
  base::Dtype type = base::kF32;
  int64_t shape[4] = {0, 0, 0, 0};
  int64_t stride[4] = {0, 0, 0, 0};
  uintptr_t lo = 0, hi = 0;
};

// Sequence n of a call of sequences, resolved from the caller's arrays (checked by
// validation: it cannot fail).
struct SequenceSource {
  const void* arrays = nullptr;
  void (*resolve)(const void* arrays, int64_t n, plan::Sequence* out) = nullptr;
};

// The scale tensor of a quantized cache (hi == 0: none): key row r reads its row r /
// rows (paged: of the row's block), one scale per `group` channels.
struct ScaleInfo {
  TensorInfo t;
  int64_t rows = 1, group = 1;
};

struct Call {
  TensorInfo q, k, v, o, lse, weights;
  TensorInfo key_scores;  // options.key_scores (has_key_scores)
  ScaleInfo k_scale, v_scale;
  // Of the modifiers (hi == 0: absent); mask: or the tree's bits (shape.mods.keep_bits).
  TensorInfo bias, mask;
  TensorInfo blocks[4];  // a block mask's tensors (hi 0: absent), for the aliasing checks
  TensorInfo lists[4];   // key lists: key_indices, key_counts, key_indices2, key_counts2
  bool has_lse = false, has_weights = false, has_key_scores = false;
  // Key scores: the fixed-point sums ([batch][kv_heads][kv_len] of key_scores' shape) in the
  // call's scratch, once the forward holds it.
  int64_t* key_acc = nullptr;
  plan::CallShape shape{};
  float scale = 0;
  plan::Algorithm algorithm = plan::Algorithm::kFused;
  const kernels::Table* table = nullptr;  // the reference's own table for the reference
  kernels::Tuning tuning;                 // the context's
  // Sequences of a padded, ragged or paged batch (0: a dense call, each batch entry a
  // sequence with every row), and once a runner holds the call's scratch, their entries
  // there.
  int64_t sequences = 0;
  SequenceSource source;
  const plan::Sequence* seqs = nullptr;
  // Set by the forward: K/V rows its cascade tasks read once for several sequences.
  int64_t shared_kv_rows = 0;
};

// The gradients' tensors of a backward call beside its forward call.
struct BackwardCall {
  Call fwd;
  TensorInfo dout, dlse, dq, dk, dv, dbias;
  TensorInfo dsinks, sinks, slopes;  // the arrays' extents (hi == 0: absent)
  float* dsinks_data = nullptr;
};

// Pointers of (batch b, head h) into a call's modifiers (`m` at batch 0, head 0; the
// tensors' strides from bias and mask).
kernels::Mods ModsAt(const kernels::Mods& m, const TensorInfo& bias, const TensorInfo& mask,
                     int64_t b, int64_t h);
// The number of sequences of a call (a dense call's: its batch entries).
inline int64_t SequenceCount(const Call& c) {
  return c.sequences > 0 ? c.sequences : c.shape.batch;
}
// Sequence n of a call: batch entry n with every row for a dense call, else the entry
// bound in the call's scratch (or, before that, resolved from the caller's arrays).
plan::Sequence SequenceAt(const Call& c, int64_t n);
// The operands of query head `h` of a sequence: its rows' views, sizes and mask (k and
// v those of its kv head). A paged sequence's operands point at its paging: seq outlives
// them (and the tasks below).
kernels::Operands OperandsOf(const Call& c, const plan::Sequence& seq, int64_t h);
// The fused task of kv head `kvh` of a sequence: every query head of its group, every
// row, every key span.
kernels::FlashTask FlashTaskOf(const Call& c, const plan::Sequence& seq, int64_t kvh);
// The backward task of kv head `kvh` of sequence `n`, its sink sums at sink_sums (one
// per (sequence, query head)) when set.
kernels::BackwardTask BackwardTaskOf(const BackwardCall& c, const plan::Sequence& seq, int64_t n,
                                     int64_t kvh, double* sink_sums);

}  // namespace run
}  // namespace octattn

#endif  // OCTATTN_LIB_RUN_CALL_H_
