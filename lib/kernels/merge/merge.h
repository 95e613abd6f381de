// Merging partial attention results by their log-sum-exp: the kernel behind
// octattn_merge (scalar, double per row: the work is a few multiply-adds per element).
#ifndef OCTATTN_LIB_KERNELS_MERGE_MERGE_H_
#define OCTATTN_LIB_KERNELS_MERGE_MERGE_H_

#include <stddef.h>
#include <stdint.h>

namespace octattn {
namespace kernels {

// One partial's row: its value_dim outputs (o[d * o_dim]) and its lse.
struct PartialRow {
  const float* o;
  int64_t o_dim;
  float lse;
};

// o[d * o_dim] and *lse (may be null) from `parts` partial rows, in their order (see the
// header's formula). `acc` holds value_dim doubles. All inputs are read before the first
// write, so o may be one of the partials' rows.
void MergeRow(const PartialRow* rows, size_t parts, int64_t value_dim, float* o, int64_t o_dim,
              float* lse, double* acc);

}  // namespace kernels
}  // namespace octattn

#endif  // OCTATTN_LIB_KERNELS_MERGE_MERGE_H_
