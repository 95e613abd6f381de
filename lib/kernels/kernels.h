// The kernel interface: the operand description every family reads, the fused-path
// task, and one table of entry points per (backend, target). Kernels take pointers,
// sizes and strides; they never fail.
#ifndef OCTATTN_LIB_KERNELS_KERNELS_H_
#define OCTATTN_LIB_KERNELS_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

#include <algorithm>    // std::sort of key lists
#include <type_traits>  // std::integral_constant of the families

#include "lib/base/dtype.h"
#include "lib/base/mask.h"
#include "lib/base/sizes.h"

#define OCTATTN_INLINE inline __attribute__((always_inline))
// The same for a lambda, after its parameter list: the compiler's own choice moves with
// unrelated code in the same translation unit (a register block passed out of line to a
// lambda lives in memory: prefill's weighted sums once ran at 0.61x so).
#define OCTATTN_LAMBDA_INLINE __attribute__((always_inline))

namespace octattn {
namespace kernels {

// The kernels stand on the ground floor: its dtypes, mask geometry and sizes by name.
using namespace base;  // NOLINT(google-build-using-namespace)

enum Backend : int32_t { kReference = 0, kHighway = 1, kXsimd = 2 };
// Numbering matches OCTATTN_TARGET_*.
enum Target : int32_t {
  kScalar = 1,
  kSse2 = 2,
  kSsse3 = 3,
  kSse4 = 4,
  kAvx2 = 5,
  kAvx512 = 6,
  kNeon = 7,
  kSve2_128 = 8,
  kSve256 = 9,
  kAvx512Bf16 = 10,
  kAmxBf16 = 11,
};
constexpr Target kLastTarget = kAmxBf16;

// The score modifiers of one attention call seen from one (batch, query head), applied
// in this order to s = scale * q.k: softcap (s = cap * tanh(s / cap)), ALiBi
// (s += slope * (j - qpos), in key coordinates), bias (s += bias). A pair whose keep bit
// (the mask tensor's entry) is 0 or whose bias is -inf is masked like one the analytic mask
// excludes (its value row is not read); sinks add exp(sink - m) to the softmax denominator. The
// per-head arrays point at this head's entry (the next query head's is at +1); the tensors at this
// head's row 0, key 0, with the strides to the next head, row and key.
struct Mods {
  float softcap = 0.0f;           // 0: off
  const float* slopes = nullptr;  // null: no ALiBi
  const float* sinks = nullptr;   // null: no sinks
  const float* bias = nullptr;    // null: no bias
  int64_t bias_head = 0, bias_row = 0, bias_col = 0;
  const uint8_t* keep = nullptr;  // the mask tensor's keep bytes or a tree's bits (null: none)
  int64_t keep_head = 0, keep_row = 0, keep_col = 0;
  // A tree (keep_bits): its rows are packed bits, bit c of a row the entry of key
  // keep_from + c; keys below keep_from (the cached prefix) are kept unread.
  bool keep_bits = false;
  int64_t keep_from = 0;
  // A block mask (block_kv > 0): each list's counts (one per query block, count_row
  // apart) and entries (index_row from a query block's to the next, index_col between
  // entries), at this head's; *_entry: to the next batch entry (sequence). Null
  // full.count: no full blocks.
  struct Lists {
    const int32_t* count = nullptr;
    const int32_t* index = nullptr;
    int64_t count_entry = 0, count_head = 0, count_row = 0;
    int64_t index_entry = 0, index_head = 0, index_row = 0, index_col = 0;
  };
  Lists partial, full;
  int64_t block_q = 0, block_kv = 0;
  // Key lists (token-sparse attention): a query row's lists of key rows, shared by the
  // query heads of its kv head: row i's list holds the first count[i * count_row] (null
  // count: n) entries idx[i * idx_row + x * idx_col], -1 for none; at the op's kv head and
  // row 0 (*_entry and *_head: the call's strides, which OperandsOf applies). Null
  // keys[0].idx: none.
  struct KeyList {
    const int32_t* idx = nullptr;
    const int32_t* count = nullptr;
    int64_t n = 0, idx_row = 0, idx_col = 0, count_row = 0;
    int64_t idx_entry = 0, idx_head = 0, count_entry = 0, count_head = 0;
  };
  KeyList keys[2];
  bool Listed() const { return keys[0].idx != nullptr; }
  // The most keys a row's lists name (0: no lists).
  int64_t ListCapacity() const { return Listed() ? keys[0].n + (keys[1].idx ? keys[1].n : 0) : 0; }
  // Whether a score modifier or a mask tensor, tree or block mask applies to the scores.
  bool Modifies() const { return softcap > 0.0f || slopes || bias || keep || block_kv > 0; }
  // Whether any of them or key lists is present (else the kernels' plain path runs).
  bool Scores() const { return Modifies() || Listed(); }
};

// Paged keys and values (vLLM's PagedAttention): key j of an op is row first + j of its
// sequence, which lives in block blocks[(first + j) / size] at row (first + j) % size; the
// op's k and v point at block 0 of its kv head, k_block and v_block are the element
// strides from one block to the next (k_row and v_row: from one row to the next in a
// block).
struct Paging {
  const int32_t* blocks;
  int64_t size, first, k_block, v_block;
  int shift = -1;  // log2(size) where size is a power of two: rows found without a division
};

// The scales of a quantized cache operand (kI8, kE4m3, kE5m2) of one kv head: scale row
// (r / rows) of key row r holds one scale per `group` channels, `col` elements apart; rows
// `row` elements apart (paged: within a block, blocks `block` elements apart). data points
// at the kv head's scale row 0 (paged: of block 0); null: no scales (fp8 values as they
// are). row0: the tensor row of the operand's key 0 (contiguous keys; a sequence's first).
struct Scales {
  const void* data = nullptr;
  Dtype type = kF32;
  int64_t row = 0, col = 0, block = 0;
  int64_t rows = 1, group = 1, row0 = 0;
  // log2(rows) where rows is a power of two (one scale row per key row: 0), else -1: the
  // scale row of a key found without a division (a test of rows == 1 is not enough: the
  // compiler folds it into the division, which then runs for every key the loops fetch).
  int rows_shift = 0;
};

// The operands of one attention call seen from one (batch, query head): every pointer
// points at that head's first element (k and v at its kv head's); strides are in
// elements. The *_head strides step to the next query head of the same kv head, for
// tasks that block a GQA group's heads together. lse and weights may be null. q, k, v
// and o hold elements of their *_type (a 16-bit type behind the float pointer: step
// through them with ElemAt); lse and weights are f32.
struct Operands {
  const float* q;
  int64_t q_head, q_row, q_dim;
  const float* k;
  int64_t k_row, k_dim;
  const float* v;
  int64_t v_row, v_dim;
  float* o;
  int64_t o_head, o_row, o_dim;
  float* lse;
  int64_t lse_head, lse_row;
  float* weights;
  int64_t w_row, w_col;
  int64_t q_len, kv_len, head_dim, value_dim;
  float scale;
  base::Mask mask;
  Mods mods;
  const Paging* paging = nullptr;  // null: key j at k + j * k_row (v likewise)
  Dtype q_type = kF32, k_type = kF32, v_type = kF32, o_type = kF32;
  Scales k_scales, v_scales;  // quantized k or v (Scaled): their scales
  // OCTATTN_QK_INT8 (integer keys): q's rows rounded to int8 in blocks of qk_block
  // dimensions (base::QuantizeQBlock), q . k as integer dot products (0: exact).
  int64_t qk_block = 0;
  // Key scores (options.key_scores): the fixed-point sums (AddKeyScore) of the op's kv head,
  // key j of its sequence at key_acc[j]; null: not wanted.
  int64_t* key_acc = nullptr;
  // Whether every operand is f32 (the 16-bit ones are widened as they are read).
  bool F32() const { return q_type == kF32 && k_type == kF32 && v_type == kF32 && o_type == kF32; }
};

namespace {  // internal linkage: included by per-arch units (base/mask.h says why)

// A block mask's lists moved to those of `entries` entries and `heads` heads further.
OCTATTN_INLINE void AdvanceLists(Mods* m, int64_t entries, int64_t heads) {
  for (Mods::Lists* l : {&m->partial, &m->full}) {
    if (!l->count) continue;
    l->count += entries * l->count_entry + heads * l->count_head;
    l->index += entries * l->index_entry + heads * l->index_head;
  }
}

// The block lists of row `row` of query head `head` (both counted from the Mods').
OCTATTN_INLINE RowBlocks RowBlocksOf(const Mods& m, int64_t head, int64_t row) {
  RowBlocks r;
  if (m.block_kv <= 0) return r;
  r.size = m.block_kv;
  const int64_t qb = row / m.block_q;
  for (int l = 0; l < 2; ++l) {
    const Mods::Lists& src = l == 0 ? m.partial : m.full;
    BlockList& dst = l == 0 ? r.partial : r.full;
    if (!src.count) continue;
    dst.n = src.count[head * src.count_head + qb * src.count_row];
    dst.idx = src.index + head * src.index_head + qb * src.index_row;
    dst.col = src.index_col;
  }
  return r;
}

// Key (value) row j of an op, contiguous or paged.
inline const float* PagedRow(const float* base, int64_t row, int64_t block, const Paging& p,
                             int64_t j, Dtype t) {
  const int64_t r = p.first + j;
  const int64_t b = p.shift >= 0 ? r >> p.shift : r / p.size;
  return ElemAt(base, static_cast<int64_t>(p.blocks[b]) * block + (r - b * p.size) * row, t);
}
inline const float* KeyRow(const Operands& op, int64_t j) {
  return op.paging ? PagedRow(op.k, op.k_row, op.paging->k_block, *op.paging, j, op.k_type)
                   : ElemAt(op.k, j * op.k_row, op.k_type);
}
inline const float* ValueRow(const Operands& op, int64_t j) {
  return op.paging ? PagedRow(op.v, op.v_row, op.paging->v_block, *op.paging, j, op.v_type)
                   : ElemAt(op.v, j * op.v_row, op.v_type);
}

// The scale row of key j of an op (Scales), or null where it has no scales.
OCTATTN_INLINE const void* ScaleRow(const Operands& op, const Scales& s, int64_t j) {
  if (!s.data) return nullptr;
  const float* base = static_cast<const float*>(s.data);
  auto over_rows = [&s](int64_t r) { return s.rows_shift >= 0 ? r >> s.rows_shift : r / s.rows; };
  if (!op.paging) return ElemAt(base, over_rows(s.row0 + j) * s.row, s.type);
  const Paging& p = *op.paging;
  const int64_t r = p.first + j;
  const int64_t b = p.shift >= 0 ? r >> p.shift : r / p.size;
  const int64_t in = r - b * p.size;
  return ElemAt(base, static_cast<int64_t>(p.blocks[b]) * s.block + over_rows(in) * s.row, s.type);
}

// Key (value) row j of a quantized op dequantized into dst (head_dim, value_dim floats).
inline void DequantKey(const Operands& op, int64_t j, float* dst) {
  const Scales& s = op.k_scales;
  DequantRow(KeyRow(op, j), op.k_dim, op.k_type, op.head_dim, ScaleRow(op, s, j), s.type, s.col,
             s.group, dst);
}
inline void DequantValue(const Operands& op, int64_t j, float* dst) {
  const Scales& s = op.v_scales;
  DequantRow(ValueRow(op, j), op.v_dim, op.v_type, op.value_dim, ScaleRow(op, s, j), s.type, s.col,
             s.group, dst);
}

// Key lists: f(j) for each entry j >= 0 of row `row`'s lists (of batch entry `entry` and
// list head `head`, counted from the lists' pointers), in list order, duplicates too.
template <class F>
inline void ForEachListed(const Mods& m, int64_t row, F&& f, int64_t entry = 0, int64_t head = 0) {
  for (const Mods::KeyList& l : m.keys) {
    if (!l.idx) continue;
    const int64_t c =
        l.count ? l.count[entry * l.count_entry + head * l.count_head + row * l.count_row] : l.n;
    const int32_t* e = l.idx + entry * l.idx_entry + head * l.idx_head + row * l.idx_row;
    for (int64_t x = 0; x < c; ++x)
      if (e[x * l.idx_col] >= 0) f(static_cast<int64_t>(e[x * l.idx_col]));
  }
}

// Key lists: the keys row `row` of an op reads (its lists' entries that the analytic mask
// allows, in [0, kv_len)) into out, ascending, each once; returns their count. out holds
// ListCapacity() entries, bits ListBitWords(ListCapacity()) words: the entries are
// ordered through a bitmap of their range where it is short next to their count, else
// sorted.
constexpr int64_t ListBitWords(int64_t capacity) { return 4 * capacity + 64; }
inline int64_t ListedKeys(const Mods& m, int64_t row, const base::Mask& mask, int64_t qpos,
                          int64_t kv_len, int32_t* out, uint64_t* bits) {
  const base::RowKeys k = base::KeysOf(mask, qpos, kv_len);
  int64_t n = 0, lo = INT64_MAX, hi = -1;
  ForEachListed(m, row, [&](int64_t j) {
    const bool in = (j >= k.lo && j < k.hi) || (k.stride > 0 && j >= k.strided_begin &&
                                                j < k.strided_end && j % k.stride == k.phase);
    if (!in) return;  // (keys the analytic mask excludes)
    out[n++] = static_cast<int32_t>(j);
    lo = j < lo ? j : lo;
    hi = j > hi ? j : hi;
  });
  if (n <= 1) return n;
  const int64_t w0 = lo >> 6, w1 = hi >> 6;
  if (w1 - w0 + 1 > ListBitWords(n)) {
    std::sort(out, out + n);
    return std::unique(out, out + n) - out;
  }
  for (int64_t w = w0; w <= w1; ++w) bits[w - w0] = 0;
  for (int64_t x = 0; x < n; ++x) bits[(out[x] >> 6) - w0] |= uint64_t{1} << (out[x] & 63);
  n = 0;
  for (int64_t w = w0; w <= w1; ++w)
    for (uint64_t b = bits[w - w0]; b; b &= b - 1)
      out[n++] = static_cast<int32_t>(w * 64 + __builtin_ctzll(b));
  return n;
}

}  // namespace

// A strided matrix (rows, then columns) of the stages: scores, weights, one head's q, k,
// v or o. Sizes travel as separate arguments.
struct Matrix {
  float* data;
  int64_t row, col;
};
struct ConstMatrix {
  const float* data;
  int64_t row, col;
};

// Fused path. A row's keys are processed in units: first (with a window and a stride)
// the strided columns below the key tile its window starts in, gathered into compact
// tiles; then the keys from that tile on, in spans of kSpanKeys at fixed positions
// (0, 1024, ...). Each unit starts a fresh online softmax and its (max, sum, output) is
// merged into the row's running state in unit order. A row therefore goes through the
// same operations whether its units run in one task (prefill) or in parallel tasks
// merged afterwards (decode), and whatever the other rows of its task are.
constexpr int64_t kSpanKeys = 1024;
constexpr int64_t kTileKeys = 256;  // keys per packed K/V tile (L2-sized)
// Rows of the fused path's micro-kernel block, on every target.
constexpr int64_t kBlockRows = 6;
// Rows (the GQA group's heads stacked) a prefill task aims at: each packed K/V tile is
// used by that many rows (plan::QueryTile).
constexpr int64_t kTaskRows = 256;

// Key scores. Each key's sum of the weights it received is kept as a fixed-point integer,
// 2^-kKeyScoreBits a unit, so that the order in which tasks add to it changes no bit; a
// NaN sets kKeyScoreNaN (sums stay below it: validation bounds the rows and heads).
constexpr int kKeyScoreBits = 32;
constexpr int64_t kKeyScoreNaN = int64_t{1} << 62;
// A fused task keeps each row's weights of every tile it reads until the row's lse is
// known, a tile a record: the tile's kTileKeys weights exp(s - m) (0 where masked or not
// the row's), then m, the row's running max they are relative to (-inf: the row read
// no key of the tile), padded to whole cache lines. A row's records: its real key tiles
// (tile j / kTileKeys), then the gathered strided columns' tiles.
constexpr int64_t kRecordFloats = kTileKeys + 16;
struct RecordShape {
  int64_t tiles = 0, gathered = 0;  // tiles of real keys, of gathered columns
  OCTATTN_INLINE int64_t RowFloats() const { return (tiles + gathered) * kRecordFloats; }
};

namespace {  // internal linkage: included by per-arch units (base/mask.h says why)

// The records of rows up to position `qpos_end` (exclusive) of an op's mask and keys.
OCTATTN_INLINE RecordShape RecordOf(const base::Mask& m, int64_t qpos_end, int64_t kv_len) {
  RecordShape r;
  const int64_t end = base::KeyEnd(m, qpos_end, kv_len);
  r.tiles = (end + kTileKeys - 1) / kTileKeys;
  if (m.causal && m.window > 0 && m.stride > 0 && m.chunk <= 0)
    r.gathered = (base::StridedCount(m.stride, m.phase, end) + kTileKeys - 1) / kTileKeys;
  return r;
}

OCTATTN_INLINE void AddKeyScore(int64_t* acc, double w) {
  if (w == 0.0) return;
  if (!(w <= 1e9)) {  // NaN (or a sum no call reaches)
    __atomic_fetch_or(acc, kKeyScoreNaN, __ATOMIC_RELAXED);
    return;
  }
  const double units = w * static_cast<double>(int64_t{1} << kKeyScoreBits);
  __atomic_fetch_add(acc, static_cast<int64_t>(__builtin_nearbyint(units)), __ATOMIC_RELAXED);
}
// The units of a sum w in [0, 2^19) (a task's: a few hundred rows at most), rounded half
// to even as AddKeyScore rounds them, without a branch (w * 2^32 + 1.5 * 2^52 leaves the
// integer in the low bits of the double), so that loops of them vectorize.
OCTATTN_INLINE int64_t KeyScoreUnits(float w) {
  const double x = static_cast<double>(w) * static_cast<double>(int64_t{1} << kKeyScoreBits) +
                   6755399441055744.0;
  int64_t bits;
  __builtin_memcpy(&bits, &x, sizeof(bits));
  return bits - 0x4338000000000000;
}
OCTATTN_INLINE float KeyScoreOf(int64_t acc) {
  if (acc & kKeyScoreNaN) return __builtin_nanf("");
  return static_cast<float>(static_cast<double>(acc) /
                            static_cast<double>(int64_t{1} << kKeyScoreBits));
}

}  // namespace

// One fused-path task: query rows [row_begin, row_end) of `heads` consecutive query heads
// sharing one kv head (op points at the first of them), against the key units below.
// The fused kernel's choices that depend on the core rather than on the call: resolved
// once per context from the CPU (DefaultTuning) and carried in every task, so that a
// test can force each value on any host. Every value gives the same bytes.
struct Tuning {
  // Direct tiles' key rows that lie a multiple of 4 KiB apart ([T, H, D] caches): false
  // copies each group of them into scratch before reading it (AMD cores); true reads
  // every row in place, one key vector a step where rows share L1 sets (Intel cores).
  bool in_place_rows = false;
  // Where direct tiles fetch [T, H, D] rows ahead: false into L1; true (Intel cores)
  // 16-bit rows into L2 and f32 rows that share L1 sets not at all. Which rows also take
  // far fetches into L2: false f32 rows (and bf16 rows that lie apart); true contiguous
  // 16-bit rows (SetDirectFetches).
  bool vendor_fetch = false;
  // The most rows (a GQA group's heads stacked) for which a task reads its tiles in place
  // (direct tiles, quantized ones dequantized in registers); more rows pack them for the
  // micro-kernel, which serves six rows a step. 16; 4 on AMD Zen 1, whose 128-bit units
  // split the direct tiles' ymm transposes and reductions. (Heads wider than 256
  // dimensions take at most 8 rows whatever this says: DirectRows.)
  int32_t direct_rows = 16;
};
// This CPU's tuning (Intel cores: in_place_rows and vendor_fetch; Zen 1: direct_rows 4).
Tuning DefaultTuning();

struct FlashTask {
  Operands op;
  int64_t heads, row_begin, row_end;
  // Units of keys, in this order: the gathered strided columns (if `gathered` and the
  // mask has them), then key spans [span_begin, span_end) (units of the fused path,
  // not the chunks of chunked attention, Mask::chunk).
  int32_t gathered;
  int64_t span_begin, span_end;
  // If set, the unnormalized state of the task's rows is written here (one unit's
  // partial, `flash_state_floats` per row) instead of o and lse.
  float* partial;
  // Decode of layouts whose kv heads share key rows ([T, H, D], vLLM's pools): the task
  // covers `kv_heads` consecutive kv heads (op at the first; at most kMaxTaskKvHeads),
  // the next one's q, k, v, o and lse `*_kv` elements on and its partial `partial_kv`
  // floats on. The tiles they read in place are read by all of them a few keys at a
  // time, so that whole rows stream in order; each head's bytes are its own task's.
  int64_t kv_heads = 1;
  int64_t q_kv = 0, k_kv = 0, v_kv = 0, o_kv = 0, lse_kv = 0;
  int64_t ks_kv = 0, vs_kv = 0;  // quantized caches: their scales' (Operands::k_scales)
  size_t partial_kv = 0;
  Tuning tuning;
  // Cascade decode: the task runs span span_begin for `n_members` tasks (members[x], at
  // most kMaxTaskKvHeads; op and rows those of members[0]) whose keys of that span are
  // the same rows and which every row of each reads whole: their rows stacked as one
  // task's, each tile read once for all; each member's partial is its own task's bytes.
  const FlashTask* members = nullptr;
  int64_t n_members = 0;
  // Key scores of a decode task (op.key_acc set, partial set): its rows' records
  // (RecordOf its rows), for the merge; with kv_heads > 1 the next one's rec_kv floats on.
  // A prefill task keeps them in its scratch.
  float* rec = nullptr;
  size_t rec_kv = 0;
};
constexpr int64_t kMaxTaskKvHeads = 16;

// Backward (backward/): the gradients of one (batch, kv head), every query head of its
// GQA group, every row and every key. op describes the forward call (o and lse as the
// forward wrote them, read here); the gradients' pointers are those of the group's first
// query head (dq, dbias) and of the kv head (dk, dv), strides in elements.
struct BackwardTask {
  Operands op;
  int64_t heads;      // query heads of the group
  const float* dout;  // of do_type (ElemAt), as op's q, k, v and o of theirs
  int64_t do_head, do_row, do_dim;
  Dtype do_type = kF32;
  const float* dlse;  // null: zero
  int64_t dlse_head, dlse_row;
  float* dq;
  int64_t dq_head, dq_row, dq_dim;
  float* dk;
  int64_t dk_row, dk_dim;
  float* dv;
  int64_t dv_row, dv_dim;
  float* dbias;  // null: not wanted; else [heads][q_len][kv_len], every entry written
  int64_t db_head, db_row, db_col;
  double* dsinks;  // with sinks: per head, the sum over its rows of -p_sink * (do . o)
};

// A row of the cache store (store/, Table::store_rows): n values x (widened) into one cache
// row `out` of dtype t, its elements contiguous: 16-bit rounded to nearest even; INT8 with
// each group of `group` values' scale max|x| / 127 written to element g * sc_col of sc
// (type sc_type) and read back; FP8 divided by its group's scale (sc null: by 1, group n);
// Q8_0 and Q4_0 as ggml quantizes (n whole blocks, out at the first).
struct StoreRow {
  const float* x;
  int64_t n;
  Dtype t;
  // The lines the row fills whole may be written past the caches (a decode step's rows:
  // new lines, far apart; the same for every row of a call).
  bool stream;
  void* out;
  void* sc;
  Dtype sc_type;
  int64_t sc_col, group;
};

// Scratch sizes are counted in floats with saturating arithmetic (base::SatMul): a size
// that does not fit in size_t comes back as SIZE_MAX, which no allocation satisfies.
struct Table {
  Backend backend;
  Target target;
  // naive/: one head, scores materialized in scratch; weights written when op has them.
  size_t (*naive_scratch_floats)(const Operands& op);
  void (*naive_head)(const Operands& op, float* scratch);
  // qk/: scores = q k^T (unscaled, unmasked) of one head.
  size_t (*scores_scratch_floats)(int64_t kv_len, int64_t head_dim);
  void (*scores_head)(ConstMatrix q, ConstMatrix k, Matrix scores, int64_t q_len, int64_t kv_len,
                      int64_t head_dim, float* scratch);
  // softmax/: rows *= scale; row-wise stable softmax, lse[i * lse_row] (lse optional).
  void (*scale_rows)(Matrix scores, int64_t rows, int64_t cols, float scale);
  size_t (*softmax_scratch_floats)(int64_t cols);
  // `sink`: an extra logit in each row's denominator (-inf: none).
  void (*softmax_rows)(Matrix scores, int64_t rows, int64_t cols, float* lse, int64_t lse_row,
                       float sink, float* scratch);
  // mask/: entries (i, j) the mask does not allow become -inf, row i at mask.q_start + i.
  void (*mask_rows)(Matrix scores, int64_t rows, int64_t cols, const base::Mask& mask);
  // mods/: softcap, ALiBi and bias of `mods` (its slope and tensors those of this head)
  // applied in place to the scores of one head, row i at q_start + i; mask entries 0 and
  // -inf biases become -inf, the other entries of the mask tensor are not read.
  size_t (*modify_scratch_floats)(int64_t cols);
  void (*modify_rows)(Matrix scores, int64_t rows, int64_t cols, int64_t q_start, const Mods& mods,
                      float* scratch);
  // av/: o = p v over every key of one head.
  size_t (*weighted_sum_scratch_floats)(int64_t kv_len, int64_t value_dim, int64_t v_dim);
  void (*weighted_sum_head)(ConstMatrix p, ConstMatrix v, Matrix o, int64_t q_len, int64_t kv_len,
                            int64_t value_dim, float* scratch);
  // flash/: scratch of one task, floats of one row's state, a task, and the merge of
  // `units` partials ([unit][row] states) of a task's rows into o and lse (its scratch:
  // one state and one padded output row).
  size_t (*flash_scratch_floats)(const FlashTask& task);
  size_t (*flash_state_floats)(int64_t value_dim);
  void (*flash_task)(const FlashTask& task, float* scratch);
  void (*flash_merge)(const FlashTask& task, const float* partials, int64_t units, float* scratch);
  // backward/: scratch of one task and the task.
  size_t (*backward_scratch_floats)(const BackwardTask& task);
  void (*backward_task)(const BackwardTask& task, float* scratch);
  // store/: rows of the cache store, in order (a decode step's rows in one call).
  void (*store_rows)(const StoreRow* rows, int64_t count);
};

// Per-backend tables; nullptr when the target is not compiled or the CPU lacks it.
const Table* HighwayTable(Target target);
const Table* XsimdTable(Target target);
// Whether auto takes avx512_bf16 where the CPU has AVX512_BF16: on AMD cores, where
// vdpbf16ps runs bf16 prefill 1.6-1.7x and decode 1.1-1.3x the widened path; not on Intel
// cores, where it ran both slower than widening (docs/PERFORMANCE.md).
bool AutoTakesBf16Dot();
// The best target of each backend on this CPU (Highway honours
// hwy::SetSupportedTargetsForTest: it asks hwy::SupportedTargets(), which costs
// microseconds in a VM, so contexts resolve their table once); bf16_dot false passes
// over avx512_bf16 where the plain avx512 unit is compiled (tests force either choice).
const Table* HighwayBest(bool bf16_dot = AutoTakesBf16Dot());
// The table of OCTATTN_QK_INT8 calls under auto, where auto chose `chosen`: avx512_bf16's
// where that is the plain avx512 unit and the CPU runs avx512_bf16 (Intel cores), whose
// vpdpbusd computes q . k's integer sums that the plain unit runs on f32 FMAs; else
// `chosen`. Such a call's bytes are the same on both: its integer sums are exact either
// way and the rest of it is the same f32 code.
const Table* HighwayQkInt8(const Table* chosen);
const Table* XsimdBest();

}  // namespace kernels
}  // namespace octattn

#endif  // OCTATTN_LIB_KERNELS_KERNELS_H_
