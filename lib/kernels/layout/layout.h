// Head split, merge and packed-QKV split: byte-exact copies between 4-d strided views.
#ifndef OCTATTN_LIB_KERNELS_LAYOUT_LAYOUT_H_
#define OCTATTN_LIB_KERNELS_LAYOUT_LAYOUT_H_

#include <stdint.h>

namespace octattn {
namespace kernels {

// A 4-d view: base pointer, element strides and bytes per element.
struct View4 {
  float* data;  // elements of `elem` bytes (f32, or 16-bit behind the float pointer)
  int64_t stride[4];
  int64_t elem;
};

// dst[a][b][c][d] = src[a][b][c][d] for the rows (a, b) in [row_begin, row_end) of the
// flattened first two dimensions; the last dimension is copied with memcpy when both
// sides are contiguous there.
void CopyRows(const View4& src, const View4& dst, const int64_t shape[4], int64_t row_begin,
              int64_t row_end);

}  // namespace kernels
}  // namespace octattn

#endif  // OCTATTN_LIB_KERNELS_LAYOUT_LAYOUT_H_
