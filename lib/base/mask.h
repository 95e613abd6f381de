// The ground floor's mask geometry: the analytic mask's formula as key ranges and the
// classification of tiles against it, pure functions below both the plan and the
// kernels.
//
// Everything on the ground floor has internal linkage (unnamed namespace): its headers
// are included by per-arch translation units compiled with wider instruction sets, and
// an inline function with external linkage could be merged by the linker into one
// AVX-512 copy that every caller then runs.
#ifndef OCTATTN_LIB_BASE_MASK_H_
#define OCTATTN_LIB_BASE_MASK_H_

#include <stddef.h>
#include <stdint.h>

#include <initializer_list>

namespace octattn {
namespace base {

// The mask of one call in the coordinates of its keys: key row j is at position j, query
// row i at q_start + i (the call's q_start minus its k_start), and the strided columns
// are the key rows with j % stride == phase (the call's positions k_start + j that are
// multiples of the stride). With chunks, a row reads only keys of its own chunk: chunks
// begin at the key rows j with j % chunk == chunk_phase (positions that are multiples
// of chunk), causal or not.
struct Mask {
  int32_t causal;  // 0: every key allowed (within the row's chunk)
  int64_t window;  // 0: plain causal
  int64_t stride;  // global columns, only with a window
  int64_t q_start;
  int64_t phase;            // in [0, stride)
  int64_t chunk = 0;        // 0: no chunks
  int64_t chunk_phase = 0;  // in [0, chunk)
};

// The keys row `qpos` may read, out of [0, kv_len): the dense run [lo, hi) plus the
// strided columns strided_begin <= j < strided_end with j % stride == phase
// (strided_end <= lo; strided_begin is the start of the row's chunk, else 0).
struct RowKeys {
  int64_t lo, hi;
  int64_t stride, strided_end;
  int64_t phase;
  int64_t strided_begin = 0;
};

// A set of strided columns: key rows j >= begin with j % stride == phase (stride 0: none).
struct StridedColumns {
  int64_t stride, phase;
  int64_t begin = 0;
  bool Has(int64_t j) const { return stride > 0 && j >= begin && j % stride == phase; }
};

// One query block's list of a block mask: n strictly ascending key block indices, `col`
// elements apart.
struct BlockList {
  const int32_t* idx = nullptr;
  int64_t n = 0, col = 0;
};

enum BlockKind { kBlockNone = 0, kBlockPartial = 1, kBlockFull = 2 };

// A row's key blocks under a block mask: the lists of its query block; size 0: no block
// mask (every key's block is full).
struct RowBlocks {
  BlockList partial, full;
  int64_t size = 0;  // key rows per block
};

enum TileKind { kTileEmpty = 0, kTileFull = 1, kTilePartial = 2 };

namespace {

inline int64_t MinI(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t MaxI(int64_t a, int64_t b) { return a > b ? a : b; }

// The first strided column (j % stride == phase) at or after j >= 0.
inline int64_t NextOnStride(int64_t j, int64_t stride, int64_t phase) {
  return j + (phase - j % stride + stride) % stride;
}

// The first key row of the chunk of a row at `qpos` (floor division: qpos may be < 0).
inline int64_t ChunkStart(const Mask& m, int64_t qpos) {
  const int64_t off = ((qpos - m.chunk_phase) % m.chunk + m.chunk) % m.chunk;
  return qpos - off;
}

// The normative formula, one pair at a time (used by the reference and by tests).
inline bool Allowed(const Mask& m, int64_t qpos, int64_t j) {
  if (m.chunk > 0) {
    const int64_t c0 = ChunkStart(m, qpos);
    if (j < c0 || j >= c0 + m.chunk) return false;
  }
  if (!m.causal) return true;
  const int64_t d = qpos - j;
  if (d < 0) return false;
  if (m.window <= 0) return true;
  return d < m.window || StridedColumns{m.stride, m.phase}.Has(j);
}

inline RowKeys KeysOf(const Mask& m, int64_t qpos, int64_t kv_len) {
  RowKeys r{0, kv_len, 0, 0, 0};
  if (m.chunk > 0) {  // positions are within +-2^62 and chunk <= 2^62: no overflow
    const int64_t c0 = ChunkStart(m, qpos);
    r.lo = MaxI(c0, 0);
    r.hi = MinI(kv_len, c0 + m.chunk);
    r.strided_begin = r.lo;
  }
  if (m.causal) r.hi = MinI(qpos + 1, r.hi);
  // Rows with no key keep lo and hi monotone in qpos: rows before every key (causal,
  // qpos < 0) read [0, 0), rows whose chunk starts past the keys [kv_len, kv_len).
  if (r.hi <= 0) return RowKeys{0, 0, 0, 0, 0};
  if (r.lo >= r.hi) return RowKeys{kv_len, kv_len, 0, 0, 0, kv_len};
  if (m.causal && m.window > 0) {
    const int64_t chunk_lo = r.lo;
    r.lo = MaxI(qpos - m.window + 1, r.lo);
    if (r.lo > r.hi) r.lo = r.hi;  // the window lies past the last key
    if (m.stride > 0) {
      r.stride = m.stride;
      r.strided_end = r.lo;
      r.phase = m.phase;
      r.strided_begin = chunk_lo;
    }
  }
  return r;
}

// Number of strided columns j < end with j % stride == phase.
inline int64_t StridedCount(int64_t stride, int64_t phase, int64_t end) {
  return (stride > 0 && end > phase) ? (end - 1 - phase) / stride + 1 : 0;
}

inline int64_t AllowedCount(const RowKeys& r) {
  const int64_t strided = r.strided_end > r.strided_begin
                              ? StridedCount(r.stride, r.phase, r.strided_end) -
                                    StridedCount(r.stride, r.phase, r.strided_begin)
                              : 0;
  return (r.hi - r.lo) + strided;
}

// Rows [qpos0, qpos1) against keys [j0, j1) (all < kv_len), in O(1). Conservative:
// Full and Empty are exact claims; Partial means "check each pair". Always inlined: an
// outlined copy in an SVE unit would be SVE code outside its target's namespace, which
// tests/check_isa.py cannot tell from code a NEON-only CPU may run.
inline __attribute__((always_inline)) TileKind Classify(const Mask& m, int64_t qpos0, int64_t qpos1,
                                                        int64_t j0, int64_t j1, int64_t kv_len) {
  if (!m.causal && m.chunk <= 0) return kTileFull;
  const RowKeys first = KeysOf(m, qpos0, kv_len);
  const RowKeys last = KeysOf(m, qpos1 - 1, kv_len);
  // lo, hi and strided_begin never decrease with qpos (an empty row has lo = hi = 0 and
  // precedes the others).
  if (j0 >= last.lo && j1 <= first.hi) return kTileFull;
  const bool dense_miss = last.hi <= j0 || first.lo >= j1;
  bool strided_hit = false;
  if (last.stride > 0 && j0 < last.strided_end) {
    const int64_t from = MaxI(j0, m.chunk > 0 ? MinI(first.strided_begin, last.strided_begin) : 0);
    const int64_t first_col = NextOnStride(from, last.stride, last.phase);
    strided_hit = first_col < j1 && first_col < last.strided_end;
  }
  // Rows of more than one chunk: a later chunk's row may hold none of the keys (past
  // kv_len) and so no strided columns, while an earlier chunk's row reads them here; the
  // last row does not bound them then, so such a tile is never called empty.
  const bool chunks = m.chunk > 0 && ChunkStart(m, qpos0) != ChunkStart(m, qpos1 - 1);
  if (dense_miss && chunks && m.causal && m.window > 0 && m.stride > 0) return kTilePartial;
  if (dense_miss && !strided_hit) return kTileEmpty;
  return kTilePartial;
}

// One past the last key that a row at a position below `qpos_end` may read (every key
// for full attention).
inline int64_t KeyEnd(const Mask& m, int64_t qpos_end, int64_t kv_len) {
  if (m.chunk > 0) {
    // The last row's chunk ends the keys; a causal row reads none past itself either.
    const int64_t end = MinI(kv_len, ChunkStart(m, qpos_end - 1) + m.chunk);
    return MaxI(0, m.causal ? MinI(end, qpos_end) : end);
  }
  if (!m.causal) return kv_len;
  return MaxI(0, MinI(kv_len, qpos_end));
}

// The first key of the dense run of a row at position `qpos_first`: a row at that
// position or later reads no key below it except the strided columns (with a window and
// a stride), so nothing else below it is ever loaded.
inline int64_t KeyBegin(const Mask& m, int64_t qpos_first) {
  int64_t begin = m.chunk > 0 ? MaxI(0, ChunkStart(m, qpos_first)) : 0;
  if (m.causal && m.window > 0) begin = MaxI(begin, qpos_first - m.window + 1);
  return begin;
}
// The strided columns below KeyBegin(m, qpos_first) that rows from `qpos_first` on may
// still read (stride 0: none).
inline StridedColumns StridedBelow(const Mask& m, int64_t qpos_first) {
  if (!m.causal || m.window <= 0) return StridedColumns{0, 0};
  return StridedColumns{m.stride, m.phase, m.chunk > 0 ? MaxI(0, ChunkStart(m, qpos_first)) : 0};
}

// Whether a row's keep entries keep key j: a mask tensor's bytes (`col` apart), or a
// tree's packed bits (`bits`), which keep every key below `from` and give key from + c
// bit c % 8 of byte c / 8.
inline bool KeepAt(const uint8_t* row, int64_t col, bool bits, int64_t from, int64_t j) {
  if (!bits) return row[j * col] != 0;
  if (j < from) return true;
  const int64_t c = j - from;
  return ((row[c >> 3] >> (c & 7)) & 1u) != 0;
}

// Block lists. Always inlined, as Classify (above) is.
// The entries of a list below block kb (binary search: lists hold up to thousands).
inline __attribute__((always_inline)) int64_t BlocksBelow(const BlockList& l, int64_t kb) {
  int64_t lo = 0, hi = l.n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (l.idx[mid * l.col] < kb)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}
inline __attribute__((always_inline)) bool BlockListed(const BlockList& l, int64_t kb) {
  const int64_t p = BlocksBelow(l, kb);
  return p < l.n && l.idx[p * l.col] == kb;
}

// The kind of the block of key j.
inline __attribute__((always_inline)) BlockKind BlockKindOf(const RowBlocks& b, int64_t j) {
  if (b.size == 0) return kBlockFull;
  const int64_t kb = j / b.size;
  if (BlockListed(b.full, kb)) return kBlockFull;
  return BlockListed(b.partial, kb) ? kBlockPartial : kBlockNone;
}

// Whether a listed block holds a key of [j0, j1) (j0 < j1).
inline __attribute__((always_inline)) bool BlocksAny(const RowBlocks& b, int64_t j0, int64_t j1) {
  if (b.size == 0) return true;
  const int64_t kb0 = j0 / b.size, kb1 = (j1 - 1) / b.size + 1;
  for (const BlockList* l : {&b.partial, &b.full}) {
    const int64_t p = BlocksBelow(*l, kb0);
    if (p < l->n && l->idx[p * l->col] < kb1) return true;
  }
  return false;
}

// The kinds of the blocks holding keys of [j0, j1) (j0 < j1): bit 1 << kind each.
inline __attribute__((always_inline)) unsigned BlockKinds(const RowBlocks& b, int64_t j0,
                                                          int64_t j1) {
  if (b.size == 0) return 1u << kBlockFull;
  unsigned kinds = 0;
  for (int64_t kb = j0 / b.size; kb <= (j1 - 1) / b.size && kinds != 7u; ++kb)
    kinds |= 1u << BlockKindOf(b, kb * b.size);
  return kinds;
}

// The keys of [j0, j1) that listed blocks hold, as one run [*lo, *hi) (empty: none);
// false where they are not one run, or a partial block's entries are to be read
// (`entries`: a mask tensor or tree decides there).
inline __attribute__((always_inline)) bool BlockRun(const RowBlocks& b, int64_t j0, int64_t j1,
                                                    bool entries, int64_t* lo, int64_t* hi) {
  *lo = *hi = j0;
  if (b.size == 0) {  // no lists: every key
    *hi = j1;
    return true;
  }
  bool started = false, ended = false;
  for (int64_t kb = j0 / b.size; kb * b.size < j1; ++kb) {
    const BlockKind kind = BlockKindOf(b, kb * b.size);
    if (kind == kBlockNone) {
      ended = started;
      continue;
    }
    if (ended || (entries && kind == kBlockPartial)) return false;
    if (!started) *lo = MaxI(j0, kb * b.size);
    started = true;
    *hi = MinI(j1, (kb + 1) * b.size);
  }
  return true;
}

// Whether a row keeps key j by its own entries: j's block (of kind `kind`) listed, and
// where there are no lists or the block is partial, the row's keep entry (a mask
// tensor's byte or a tree's bit, KeepAt; null `row`: none) set.
inline __attribute__((always_inline)) bool RowKeeps(const RowBlocks& b, BlockKind kind,
                                                    const uint8_t* row, int64_t col, bool bits,
                                                    int64_t from, int64_t j) {
  if (kind == kBlockNone) return false;
  return !row || (b.size > 0 && kind == kBlockFull) || KeepAt(row, col, bits, from, j);
}

// [*lo, *hi) narrowed to the keys from the first listed block's to the last's (empty:
// *hi = *lo).
inline __attribute__((always_inline)) void BlockEnvelope(const RowBlocks& b, int64_t* lo,
                                                         int64_t* hi) {
  if (b.size == 0 || *lo >= *hi) return;
  int64_t first = -1, last = -1;
  for (const BlockList* l : {&b.partial, &b.full}) {
    const int64_t p = BlocksBelow(*l, *lo / b.size);
    if (p < l->n && (first < 0 || l->idx[p * l->col] < first)) first = l->idx[p * l->col];
    const int64_t q = BlocksBelow(*l, (*hi - 1) / b.size + 1);
    if (q > 0 && l->idx[(q - 1) * l->col] > last) last = l->idx[(q - 1) * l->col];
  }
  if (first < 0 || last < first) {
    *hi = *lo;
    return;
  }
  *lo = MaxI(*lo, first * b.size);
  *hi = MaxI(*lo, MinI(*hi, (last + 1) * b.size));
}

}  // namespace
}  // namespace base
}  // namespace octattn

#endif  // OCTATTN_LIB_BASE_MASK_H_
