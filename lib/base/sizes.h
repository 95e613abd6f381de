// The ground floor's checked sizes: scratch sizes in size_t with saturating arithmetic,
// and the one alignment of every scratch buffer, slot and table (mask.h says why the
// functions have internal linkage).
#ifndef OCTATTN_LIB_BASE_SIZES_H_
#define OCTATTN_LIB_BASE_SIZES_H_

#include <stddef.h>
#include <stdint.h>

namespace octattn {
namespace base {

// The alignment of every scratch buffer, slot and table (a cache line).
constexpr size_t kAlign = 64;

namespace {

// Sizes of scratch, in size_t with saturating arithmetic: a size that does not fit
// becomes SIZE_MAX, which no allocation satisfies and validation reports as OVERFLOW.
inline size_t SatAdd(size_t a, size_t b) {
  size_t r;
  return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}
inline size_t SatMul(size_t a, size_t b) {
  size_t r;
  return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}
// log2(n) where n (> 0) is a power of two, else -1: a shift that replaces a division.
inline int Log2IfPow2(int64_t n) { return (n & (n - 1)) == 0 ? __builtin_ctzll(n) : -1; }
// A non-negative count as a size.
inline size_t Count(int64_t n) { return n < 0 ? 0 : static_cast<size_t>(n); }
// n rounded up to a multiple of `to` (saturating).
inline size_t RoundUp(size_t n, size_t to) {
  return n > SIZE_MAX - to ? SIZE_MAX : (n + to - 1) / to * to;
}

}  // namespace
}  // namespace base
}  // namespace octattn

#endif  // OCTATTN_LIB_BASE_SIZES_H_
