// LSE merge of partial rows: weights exp(lse_p - lse) in double, -inf partials skipped.
#include "lib/kernels/merge/merge.h"

#include <cmath>
#include <limits>

namespace octattn {
namespace kernels {

void MergeRow(const PartialRow* rows, size_t parts, int64_t value_dim, float* o, int64_t o_dim,
              float* lse, double* acc) {
  const double ninf = -std::numeric_limits<double>::infinity();
  double m = ninf;
  bool nan = false;
  for (size_t p = 0; p < parts; ++p) {
    nan |= std::isnan(rows[p].lse);
    if (rows[p].lse > m) m = rows[p].lse;
  }
  if (nan) {
    for (int64_t d = 0; d < value_dim; ++d) o[d * o_dim] = std::numeric_limits<float>::quiet_NaN();
    if (lse) *lse = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  if (m == ninf) {  // no partial has an allowed key: as one call's empty row
    for (int64_t d = 0; d < value_dim; ++d) o[d * o_dim] = 0.0f;
    if (lse) *lse = -std::numeric_limits<float>::infinity();
    return;
  }
  double sum = 0.0;
  for (size_t p = 0; p < parts; ++p)
    if (rows[p].lse != ninf) sum += std::exp(rows[p].lse - m);
  const double total = m + std::log(sum);
  for (int64_t d = 0; d < value_dim; ++d) acc[d] = 0.0;
  for (size_t p = 0; p < parts; ++p) {
    if (rows[p].lse == ninf) continue;  // its o is never read
    const double w = std::exp(rows[p].lse - total);
    for (int64_t d = 0; d < value_dim; ++d) acc[d] += w * rows[p].o[d * rows[p].o_dim];
  }
  for (int64_t d = 0; d < value_dim; ++d) o[d * o_dim] = static_cast<float>(acc[d]);
  if (lse) *lse = static_cast<float>(total);
}

}  // namespace kernels
}  // namespace octattn
