// Shapes to work: the mask formula as key ranges, tile classification, the per-task
// descriptor every kernel family reads, and scratch sizing. Pure functions only.
//
// Everything here has internal linkage (unnamed namespace): the header is included by
// per-arch translation units compiled with wider instruction sets, and an inline
// function with external linkage could be merged by the linker into one AVX-512 copy.
#ifndef OCTATTN_LIB_PLAN_PLAN_H_
#define OCTATTN_LIB_PLAN_PLAN_H_

#include <stddef.h>
#include <stdint.h>

namespace octattn {
namespace plan {

// The mask of one call, with q_start already resolved.
struct Mask {
  int32_t causal;  // 0: every key allowed
  int64_t window;  // 0: plain causal
  int64_t stride;  // global columns, only with a window
  int64_t q_start;
};

// The keys row `qpos` may read, out of [0, kv_len): the dense run [lo, hi) plus the
// strided columns j < strided_end with j % stride == 0 (strided_end <= lo).
struct RowKeys {
  int64_t lo, hi;
  int64_t stride, strided_end;
};

enum TileKind { kTileEmpty = 0, kTileFull = 1, kTilePartial = 2 };

namespace {

inline int64_t MinI(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t MaxI(int64_t a, int64_t b) { return a > b ? a : b; }

// The normative formula, one pair at a time (used for partial tiles and by tests).
inline bool Allowed(const Mask& m, int64_t qpos, int64_t j) {
  if (!m.causal) return true;
  const int64_t d = qpos - j;
  if (d < 0) return false;
  if (m.window <= 0) return true;
  return d < m.window || (m.stride > 0 && j % m.stride == 0);
}

inline RowKeys KeysOf(const Mask& m, int64_t qpos, int64_t kv_len) {
  RowKeys r{0, kv_len, 0, 0};
  if (!m.causal) return r;
  r.hi = MinI(qpos + 1, kv_len);
  if (r.hi <= 0) return RowKeys{0, 0, 0, 0};
  if (m.window > 0) {
    r.lo = MaxI(qpos - m.window + 1, 0);
    if (r.lo > r.hi) r.lo = r.hi;  // the window lies past the last key
    if (m.stride > 0) {
      r.stride = m.stride;
      r.strided_end = r.lo;
    }
  }
  return r;
}

// Number of strided columns j < end with j % stride == 0.
inline int64_t StridedCount(int64_t stride, int64_t end) {
  return (stride > 0 && end > 0) ? (end - 1) / stride + 1 : 0;
}

inline int64_t AllowedCount(const RowKeys& r) {
  return (r.hi - r.lo) + StridedCount(r.stride, r.strided_end);
}

// Allowed (i, j) pairs of a whole head: the unit of useful work.
inline int64_t AllowedPairs(const Mask& m, int64_t q_len, int64_t kv_len) {
  int64_t n = 0;
  for (int64_t i = 0; i < q_len; ++i) n += AllowedCount(KeysOf(m, m.q_start + i, kv_len));
  return n;
}

// Rows [qpos0, qpos1) against keys [j0, j1) (all < kv_len), in O(1). Conservative:
// Full and Empty are exact claims; Partial means "check each pair".
inline TileKind Classify(const Mask& m, int64_t qpos0, int64_t qpos1, int64_t j0, int64_t j1,
                         int64_t kv_len) {
  if (!m.causal) return kTileFull;
  const RowKeys first = KeysOf(m, qpos0, kv_len);
  const RowKeys last = KeysOf(m, qpos1 - 1, kv_len);
  // lo and hi never decrease with qpos.
  if (j0 >= last.lo && j1 <= first.hi) return kTileFull;
  const bool dense_miss = last.hi <= j0 || first.lo >= j1;
  bool strided_hit = false;
  if (last.stride > 0 && j0 < last.strided_end) {
    const int64_t first_col = (j0 + last.stride - 1) / last.stride * last.stride;
    strided_hit = first_col < j1 && first_col < last.strided_end;
  }
  if (dense_miss && !strided_hit) return kTileEmpty;
  return kTilePartial;
}

// One past the last key that a row at a position below `qpos_end` may read (every key
// for full attention).
inline int64_t KeyEnd(const Mask& m, int64_t qpos_end, int64_t kv_len) {
  if (!m.causal) return kv_len;
  return MaxI(0, MinI(kv_len, qpos_end));
}

// The first key of the dense run of a row at position `qpos_first`: a row at that
// position or later reads no key below it except the strided columns (j % stride == 0,
// with a window and a stride), so nothing else below it is ever loaded.
inline int64_t KeyBegin(const Mask& m, int64_t qpos_first) {
  if (!m.causal || m.window <= 0) return 0;
  return MaxI(0, qpos_first - m.window + 1);
}
// The stride of the columns below KeyBegin that stay readable (0: none).
inline int64_t StrideBelow(const Mask& m) { return m.causal && m.window > 0 ? m.stride : 0; }

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
// A non-negative count as a size.
inline size_t Count(int64_t n) { return n < 0 ? 0 : static_cast<size_t>(n); }
// n rounded up to a multiple of `to` (saturating).
inline size_t RoundUp(size_t n, size_t to) {
  return n > SIZE_MAX - to ? SIZE_MAX : (n + to - 1) / to * to;
}

}  // namespace
}  // namespace plan
}  // namespace octattn

#endif  // OCTATTN_LIB_PLAN_PLAN_H_
