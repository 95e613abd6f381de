// Strided 4-d copies: the one kernel behind split, merge and packed-QKV split.
#include "lib/kernels/layout/layout.h"

#include <cstring>

namespace octattn {
namespace kernels {

void CopyRows(const View4& src, const View4& dst, const int64_t shape[4], int64_t row_begin,
              int64_t row_end) {
  const bool contiguous = src.stride[3] == 1 && dst.stride[3] == 1;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t a = row / shape[1], b = row % shape[1];
    const float* s = src.data + a * src.stride[0] + b * src.stride[1];
    float* d = dst.data + a * dst.stride[0] + b * dst.stride[1];
    for (int64_t c = 0; c < shape[2]; ++c) {
      const float* sc = s + c * src.stride[2];
      float* dc = d + c * dst.stride[2];
      if (contiguous) {
        std::memcpy(dc, sc, static_cast<size_t>(shape[3]) * sizeof(float));
      } else {
        for (int64_t e = 0; e < shape[3]; ++e) dc[e * dst.stride[3]] = sc[e * src.stride[3]];
      }
    }
  }
}

}  // namespace kernels
}  // namespace octattn
