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

// The mask of one call in the coordinates of its keys: key row j is at position j, query
// row i at q_start + i (the call's q_start minus its k_start), and the strided columns
// are the key rows with j % stride == phase (the call's positions k_start + j that are
// multiples of the stride).
struct Mask {
  int32_t causal;  // 0: every key allowed
  int64_t window;  // 0: plain causal
  int64_t stride;  // global columns, only with a window
  int64_t q_start;
  int64_t phase;  // in [0, stride)
};

// The keys row `qpos` may read, out of [0, kv_len): the dense run [lo, hi) plus the
// strided columns j < strided_end with j % stride == phase (strided_end <= lo).
struct RowKeys {
  int64_t lo, hi;
  int64_t stride, strided_end;
  int64_t phase;
};

// A set of strided columns: key rows j with j % stride == phase (stride 0: none).
struct Columns {
  int64_t stride, phase;
  bool Has(int64_t j) const { return stride > 0 && j % stride == phase; }
};

enum TileKind { kTileEmpty = 0, kTileFull = 1, kTilePartial = 2 };

namespace {

inline int64_t MinI(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t MaxI(int64_t a, int64_t b) { return a > b ? a : b; }

// The first strided column (j % stride == phase) at or after j >= 0.
inline int64_t NextOnStride(int64_t j, int64_t stride, int64_t phase) {
  return j + (phase - j % stride + stride) % stride;
}

// The normative formula, one pair at a time (used for partial tiles and by tests).
inline bool Allowed(const Mask& m, int64_t qpos, int64_t j) {
  if (!m.causal) return true;
  const int64_t d = qpos - j;
  if (d < 0) return false;
  if (m.window <= 0) return true;
  return d < m.window || Columns{m.stride, m.phase}.Has(j);
}

inline RowKeys KeysOf(const Mask& m, int64_t qpos, int64_t kv_len) {
  RowKeys r{0, kv_len, 0, 0, 0};
  if (!m.causal) return r;
  r.hi = MinI(qpos + 1, kv_len);
  if (r.hi <= 0) return RowKeys{0, 0, 0, 0, 0};
  if (m.window > 0) {
    r.lo = MaxI(qpos - m.window + 1, 0);
    if (r.lo > r.hi) r.lo = r.hi;  // the window lies past the last key
    if (m.stride > 0) {
      r.stride = m.stride;
      r.strided_end = r.lo;
      r.phase = m.phase;
    }
  }
  return r;
}

// Number of strided columns j < end with j % stride == phase.
inline int64_t StridedCount(int64_t stride, int64_t phase, int64_t end) {
  return (stride > 0 && end > phase) ? (end - 1 - phase) / stride + 1 : 0;
}

inline int64_t AllowedCount(const RowKeys& r) {
  return (r.hi - r.lo) + StridedCount(r.stride, r.phase, r.strided_end);
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
    const int64_t first_col = NextOnStride(j0, last.stride, last.phase);
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
// position or later reads no key below it except the strided columns (with a window and
// a stride), so nothing else below it is ever loaded.
inline int64_t KeyBegin(const Mask& m, int64_t qpos_first) {
  if (!m.causal || m.window <= 0) return 0;
  return MaxI(0, qpos_first - m.window + 1);
}
// The strided columns below KeyBegin, which stay readable (stride 0: none).
inline Columns StridedBelow(const Mask& m) {
  if (!m.causal || m.window <= 0) return Columns{0, 0};
  return Columns{m.stride, m.phase};
}

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
