// Strided 4-d copies: the one kernel behind split, merge and packed-QKV split.
#include "lib/kernels/layout/layout.h"

#include <cstring>

namespace octattn {
namespace kernels {

void CopyRows(const View4& src, const View4& dst, const int64_t shape[4], int64_t row_begin,
              int64_t row_end) {
  const bool contiguous = src.stride[3] == 1 && dst.stride[3] == 1;
  const int64_t n = src.elem;  // == dst.elem
  const char* sb = reinterpret_cast<const char*>(src.data);
  char* db = reinterpret_cast<char*>(dst.data);
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t a = row / shape[1], b = row % shape[1];
    const char* s = sb + (a * src.stride[0] + b * src.stride[1]) * n;
    char* d = db + (a * dst.stride[0] + b * dst.stride[1]) * n;
    for (int64_t c = 0; c < shape[2]; ++c) {
      const char* sc = s + c * src.stride[2] * n;
      char* dc = d + c * dst.stride[2] * n;
      if (contiguous) {
        std::memcpy(dc, sc, static_cast<size_t>(shape[3] * n));
      } else {
        for (int64_t e = 0; e < shape[3]; ++e)
          std::memcpy(dc + e * dst.stride[3] * n, sc + e * src.stride[3] * n,
                      static_cast<size_t>(n));
      }
    }
  }
}

}  // namespace kernels
}  // namespace octattn
