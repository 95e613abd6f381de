// The oracle: scalar, double-accumulating attention and stages, written to be obviously
// right rather than fast. The `reference` algorithm of the API and every test use it.
#ifndef OCTATTN_LIB_REFERENCE_REFERENCE_H_
#define OCTATTN_LIB_REFERENCE_REFERENCE_H_

#include <stddef.h>
#include <stdint.h>

#include "lib/kernels/kernels.h"

namespace octattn {
namespace reference {

// Doubles of scratch one head needs.
size_t HeadScratchDoubles(const kernels::Operands& op);
// o (and lse, weights when set) of one head, by the formula of the header. Reads only the
// key and value rows the mask allows.
void AttentionHead(const kernels::Operands& op, double* scratch);

// The backward of one (batch, kv head) group, by the formula (every product in double,
// the probabilities recomputed from q, k and v, not from the forward's o and lse): dq,
// dk, dv, dbias (when wanted) and the per-head sink sums. Reads only allowed pairs.
size_t BackwardScratchDoubles(const kernels::BackwardTask& t);
void BackwardGroup(const kernels::BackwardTask& t, double* scratch);

// The reference algorithm as a kernel table: its naive_head is AttentionHead and its
// backward_task BackwardGroup (scratch counted in floats); it has no fused and no stage
// entries (the runners call neither for it).
const kernels::Table* Table();

// Stages on one head, same conventions as the kernel table's.
void ScoresHead(kernels::ConstMatrix q, kernels::ConstMatrix k, kernels::Matrix scores,
                int64_t q_len, int64_t kv_len, int64_t head_dim);
void SoftmaxRow(float* row, int64_t n, int64_t col, float* lse);
void WeightedSumHead(kernels::ConstMatrix p, kernels::ConstMatrix v, kernels::Matrix o,
                     int64_t q_len, int64_t kv_len, int64_t value_dim);
// The mask stage pair by pair from the formula (base::Allowed).
void MaskHead(float* scores, int64_t row, int64_t col, int64_t q_len, int64_t kv_len,
              const base::Mask& mask);

}  // namespace reference
}  // namespace octattn

#endif  // OCTATTN_LIB_REFERENCE_REFERENCE_H_
