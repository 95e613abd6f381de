// The fused path, direct tiles. Decode: tiles that every row reads whole, read in place. Q K^T
// transposes eight dimensions of kLanes keys at a time in registers from the keys' rows
// (TransposeRows) and runs QkStore's chains on them; the softmax update is SoftmaxTile; the
// weighted sums read the value rows in place, a group of keys at a time, with AvRange's chains. So
// a row's bits are those of FlashBlock on the packed tile, with no copy of K or V, and K and V each
// stream through the core once, in order, each step prefetching the rows of the next. Key vectors
// per Q K^T step (but see OneKeyVec): two, so that 2R chains hide the FMA latency
// (docs/PERFORMANCE.md, decode's choices).
constexpr int kDirectVecs = 2;
constexpr int64_t kDirectKeys = kDirectVecs * static_cast<int64_t>(S::kLanes);
// f32 rows fetched ahead of the row being read: far enough for memory's latency at its
// bandwidth, near enough that the fetched rows stay in L1. bf16 rows as many rows ahead;
// f16 rows (widened by F16C) as many bytes (twice the rows).
constexpr int64_t kDirectAhead = 32;
template <Dtype T>
constexpr int64_t DirectAhead() {
  return T == kF16 ? 2 * kDirectAhead : kDirectAhead;
}
// f32 rows also fetched this many bytes ahead, into L2 (DirectTile::far, in rows): L1's
// fetches alone, each holding one of its few miss buffers for memory's whole latency,
// left the rows' compute waiting on memory rather than beside it. A distance in bytes,
// so that every head_dim gets the same lead in time (D 64 and 256 did better so than
// at 128 rows, D 128 is the same). Also for bf16 rows read as pairs (FlashPairsV),
// whose loop is as fast as f32's, and on the 16-lane targets bf16 rows widened in
// registers that lie apart (RowsApart, SetDirectFetches); not for contiguous rows widened
// in registers, whose loop is bound by its instructions, nor where Tuning::vendor_fetch
// chooses otherwise.
constexpr int64_t kDirectFarBytes = 65536;
// Of each row fetched into L1 ahead of its step, at most this many bytes where the far
// fetches bring it into L2 (the rest comes from there as the step's transposes reach
// it): a step's kDirectKeys whole rows of 2 KiB (D 512 f32) are twice L1, so that
// fetching them whole evicted the rows before they were read.
constexpr int64_t kDirectNearBytes = 512;

// The most rows for which a task reads its tiles in place: the core's
// (Tuning::direct_rows), and at most 8 for heads wider than 256 dimensions (MLA's 576),
// whose many flops per key the micro-kernel serves better with the rows stacked.
static inline int64_t DirectRows(const FlashTask& t) {
  const int64_t n = base::MinI(t.tuning.direct_rows, kPackValueRows);
  return t.op.head_dim > 256 ? base::MinI(n, 8) : n;
}

// Whether a task reads its whole tiles in place (FlashDirect): decode-sized row lists,
// keys in rows of whole 8-dimension blocks, values in rows of whole vectors, keys and
// values of one element type (16-bit ones widened in registers), on a target with a fast
// block transpose (DirectReadable: these); real keys one apart, no score modifiers.
// bf16 pairs (FlashPairs) take sixteen dimensions a step.
static inline bool DirectReadable(const FlashTask& t) {
  return S::kBlockTranspose && FlashRows(t) <= DirectRows(t) && t.op.k_type == t.op.v_type &&
         !Quantized(t.op.k_type) && t.op.k_dim == 1 && t.op.head_dim % 8 == 0 &&
         (t.op.q_type != kBf16 || t.op.head_dim % 16 == 0) &&
         ValuesDirect(t.op.v_dim, t.op.value_dim);
}
static inline bool FlashDirect(const FlashTask& t, int64_t step) {
  return step == 1 && DirectReadable(t) && !t.op.mods.Scores();
}

// Whether a task's quantized tiles are read in place and dequantized in registers
// (DirectScoresQuant, DirectValuesQuant): decode-sized row lists, keys and values of one
// quantized type in rows of contiguous elements, whole vectors of value columns, scales
// (int8, fp8) that hold for eight key dimensions and for a vector of value columns (not
// KIVI's keys by channel), no score modifiers, on a target with the transposes (not
// FP8_DS_MLA rows, which are widened: FlashDirectWidened).
static inline bool FlashDirectQuant(const FlashTask& t, int64_t step) {
  const Operands& op = t.op;
  auto whole = [](const Scales& s, int64_t n) { return !s.data || s.group % n == 0; };
  return S::kQuantRows && step == 1 && FlashRows(t) <= DirectRows(t) && Quantized(op.k_type) &&
         op.k_type != kDsMla && op.v_type == op.k_type && op.k_dim == 1 && op.v_dim == 1 &&
         op.head_dim % 8 == 0 && op.value_dim % Lanes() == 0 && whole(op.k_scales, 8) &&
         whole(op.v_scales, Lanes()) && op.qk_block % 8 == 0 && !op.mods.Scores();
}

// Whether a task's quantized tiles, dequantized into f32 rows (WidenTile), run as direct
// tiles on those rows: FlashDirect's conditions for the rows as widened (where
// FlashDirectQuant does not hold).
static inline bool FlashDirectWidened(const FlashTask& t, int64_t step) {
  return S::kBlockTranspose && step == 1 && FlashRows(t) <= DirectRows(t) &&
         Quantized(t.op.k_type) && Quantized(t.op.v_type) && t.op.head_dim % 8 == 0 &&
         ValuesDirect(1, t.op.value_dim) && !t.op.mods.Scores() && !t.op.qk_block;
}

// Whether a task of key lists reads the whole tiles of listed keys [t0, t1) in place
// (DirectTile::keys) as FlashDirect reads real keys: f32 or 16-bit keys and values (not
// as bf16 pairs), no score modifier or mask tensor, and keys that lie mostly in runs
// (spanning at most 5/4 of their count), which the core's prefetchers stream as they
// stream a dense tile; scattered keys are gathered (WidenTile), whose copies hide their
// latency better.
static inline bool ListedDirect(const FlashTask& t, const int32_t* keys, int64_t t0, int64_t t1) {
  return 4 * (int64_t{keys[t1 - 1]} - keys[t0] + 1) <= 5 * (t1 - t0) && DirectReadable(t) &&
         !FlashPairs(t.op) && !t.op.mods.Modifies();
}

// Whether rows `row` elements apart hold `dim` elements each with at least one row
// between them: [T, H, D] and paged caches of several heads, a head's slices of rows.
static inline bool RowsApart(int64_t row, int64_t dim) { return row >= 2 * dim; }
// Whether rows `row` elements of `bytes` apart lie a multiple of 4 KiB apart: they then
// share a few L1 sets (4 KiB an L1 way on the x86 cores measured here).
static inline bool RowsShareSets(int64_t row, int64_t bytes) { return (row * bytes) % 4096 == 0; }

// Whether a direct tile copies each kv head's group of kDirectKeys key rows (`dim`
// elements of `bytes`, `row` elements apart) into scratch before reading it: where the
// rows lie a multiple of 4 KiB apart ([T, H, D] layouts with H * D * bytes a multiple of
// 4096: f32 with 8 kv heads of 128) they all fall in the same few L1 sets, so that the
// transposes, reading each row's lines in pieces, find them evicted by the group's other
// rows and by the rows fetched ahead. The copy reads each line once, whole; the
// transposes read a contiguous block. Same values, same bytes. Where the rows spread over
// the sets the copy costs more than it saves, and paged rows are read in place. Value
// rows are never copied: the weighted sums read each line of a value row whole, at one
// key's step.
// Whether key rows are read in place whatever their spacing: paged ones, and with
// Tuning::in_place_rows (Intel cores, where it beat the copy) all, which then take one
// key vector a step where they share sets (OneKeyVec), as paged rows do.
static inline bool InPlaceRows(const Paging* paging, const Tuning& tn) {
  return paging || tn.in_place_rows;
}
static inline bool StageRows(int64_t row, int64_t dim, int64_t bytes, const Paging* paging,
                             const Tuning& tn) {
  return !InPlaceRows(paging, tn) && RowsApart(row, dim) && RowsShareSets(row, bytes);
}
// Whether Q K^T steps take one key vector (sixteen keys) at a time, not kDirectVecs:
// where key rows read in place lie a multiple of 4 KiB apart (vLLM's pools of f32 rows of
// 8 kv heads of 128), so that each step's rows share a few L1 sets. With sixteen rows a
// step rather than 32, fewer of a line's first-half readers evict it before its second
// half is read. And where rows hold 2 KiB or more (f32 rows of 512 dimensions): 32 of
// them are twice L1, sixteen fit it (f32, D 512, one thread: 1.07-1.21x for 2 to 8 rows
// a kv head; D 256 lost 0.94x and keeps two). Same chains, same bytes. Eight-lane
// targets already take sixteen rows a step.
static inline bool OneKeyVec(int64_t row, int64_t dim, int64_t bytes, const Paging* paging,
                             const Tuning& tn) {
  return S::kLanes >= 16 &&
         ((InPlaceRows(paging, tn) && RowsShareSets(row, bytes)) || dim * bytes >= 2048);
}
// Whether the nh kv heads of a task group, whose slices share each key row ([T, H, D]
// and paged layouts), fetch the rows of a group of keys whole between them (DirectTile::
// heads) rather than each head its own slice of every row: memory then serves each row's
// lines together. Same bytes. f32 rows only: 16-bit rows gained nothing so.
static_assert((kDirectKeys & (kDirectKeys - 1)) == 0, "groups of a power of two keys");
static inline bool WholeRows(const Operands& op, int64_t nh) {
  return nh > 1 && kDirectKeys % nh == 0 && op.k_type == kF32;
}
// Where a direct tile's fetches bring its rows ahead (DirectTile::FetchAs): L1
// (prefetcht0), but with Tuning::vendor_fetch (Intel cores) where the rows are [T, H, D]
// ones (a row stride of at least two rows) 16-bit rows into L2 (prefetcht1) and f32 rows
// that share L1 sets not at all: there the core's own prefetchers carry them better than
// prefetcht0, whose misses hold L1's few fill buffers.
enum FetchTo { kFetchL1, kFetchL2, kFetchNone };
static inline FetchTo DirectFetch(const Operands& op, const Tuning& tn) {
  if (!RowsApart(op.k_row, op.head_dim) || !tn.vendor_fetch) return kFetchL1;
  if (op.k_type != kF32) return kFetchL2;
  return RowsShareSets(op.k_row, DtypeBytes(kF32)) ? kFetchNone : kFetchL1;
}

// Rows a staged copy fetches ahead of the row it copies.
constexpr int64_t kStageAhead = 4;

// Where a direct tile's rows are, and the order they are read in: the stream of its key
// rows, then its value rows, then the next tile's key rows.
struct DirectTile {
  const Operands* op;
  int64_t first;  // space key g is key first + g of op
  int64_t t0, t1;
  int64_t next0, next1;  // the next tile's keys (none: next0 == next1)
  // kDirectKeys * head_dim floats (at least kTileKeys * head_dim); quantized rows: the
  // scores and state of the rows that pad a block (FlashDirectTileHeads).
  float* scratch;
  // With FlashAmx and FlashPairsV: a group's value rows joined into pairs (kDirectKeys /
  // 2 rows of value_dim pairs).
  float* vbuf = nullptr;
  // Staged keys: with ks set, the key rows of keys [s0, s0 + kDirectKeys) are read from
  // there, head_dim elements apart (StageRows). Value rows are always read in place.
  const float* ks = nullptr;
  int64_t s0 = 0;
  AmxTiles* amx = nullptr;  // the task's tiles (FlashAmx)

  // Key lists (else null): space key g is key keys[g] of op (f32 and 16-bit rows only).
  const int32_t* keys = nullptr;
  // Whether v is a view of k (ValuesInKeys): the value rows are key rows, not fetched.
  bool values_in_keys = false;

  int64_t Key(int64_t g) const { return keys ? keys[g] : first + g; }
  const float* SrcK(int64_t g) const { return KeyRow(*op, Key(g)); }
  OCTATTN_INLINE const float* K(int64_t g) const {
    return ks ? ElemAt(ks, (g - s0) * op->head_dim, op->k_type) : SrcK(g);
  }
  const float* V(int64_t g) const { return ValueRow(*op, Key(g)); }
  // Copies the key rows of [a, b) (at most kDirectKeys) into dst and reads them from
  // there.
  void Stage(int64_t a, int64_t b, float* dst) {
    const Dtype t = op->k_type;
    const size_t bytes = static_cast<size_t>(op->head_dim * DtypeBytes(t));
    for (int64_t g = a; g < b; ++g) {
      // The row kStageAhead on, into L1 (the rows fetched a group ahead are in L2 by
      // now, no longer in L1's few sets that such rows share).
      if (g + kStageAhead < b) {
        const char* r = reinterpret_cast<const char*>(SrcK(g + kStageAhead));
        for (size_t e = 0; e < bytes; e += 64) __builtin_prefetch(r + e, 0, 3);
      }
      memcpy(ElemAt(dst, (g - a) * op->head_dim, t), SrcK(g), bytes);
    }
    ks = dst;
    s0 = a;
  }
  int64_t KStride() const { return ks ? op->head_dim : op->k_row; }
  int64_t VStride() const { return op->v_row; }
  // One past the last key from g (< end) whose row is a row stride after g's.
  int64_t Run(int64_t g, int64_t end) const {
    if (keys) {  // listed keys: those that follow each other in one block
      int64_t x = g + 1;
      while (x < end && keys[x] == keys[x - 1] + 1 &&
             (!op->paging || (op->paging->first + keys[x]) % op->paging->size != 0))
        ++x;
      return x;
    }
    if (!op->paging) return end;  // (staged keys are never paged: StageRows)
    const int64_t size = op->paging->size, r = op->paging->first + first + g;
    return base::MinI(end, g + size - r % size);
  }
  // Where the stream's rows are a stride apart in each of its three runs (rows not
  // paged, keys not listed; SetStream), the first row of each run and the strides: Row
  // then takes a multiply where KeyRow's general case takes a dozen operations, and the
  // fetches call it twice a row.
  const char* k_first = nullptr;  // null: Row finds rows through SrcK and V
  const char* v_first = nullptr;
  const char* n_first = nullptr;
  int64_t k_step = 0, v_step = 0, k_bytes = 0, v_bytes = 0;
  // And the scale rows of the three runs where each row has one of its own (else null):
  // the fetch targets that quantized rows find for every key (QuantTargets) then take a
  // multiply where ScaleRow takes a dozen operations.
  const char* s_first[3] = {nullptr, nullptr, nullptr};
  int64_t s_step[3] = {0, 0, 0};
  void SetStream() {
    if (op->paging || keys) return;
    const auto scales = [&](const Scales& s, int run, int64_t g) {
      if (!s.data || s.rows_shift != 0) return;
      s_first[run] = static_cast<const char*>(kernels::ScaleRow(*op, s, first + g));
      s_step[run] = s.row * DtypeBytes(s.type);
    };
    scales(op->k_scales, 0, t0);
    scales(op->v_scales, 1, t0);
    if (next1 > next0) scales(op->k_scales, 2, next0);
    const auto at = [](const float* p) { return reinterpret_cast<const char*>(p); };
    k_first = at(SrcK(t0));
    k_step = at(SrcK(t0 + 1)) - k_first;
    v_first = at(V(t0));
    v_step = at(V(t0 + 1)) - v_first;
    n_first = next1 > next0 ? at(SrcK(next0)) : nullptr;
    k_bytes = RowBytes(op->k_type, op->head_dim);
    v_bytes = RowBytes(op->v_type, op->value_dim);
  }
  // Row i of the stream and its bytes (none past the stream: null).
  OCTATTN_INLINE const char* Row(int64_t i, int64_t* bytes) const {
    const int64_t n = t1 - t0;
    const auto at = [](const float* p) { return reinterpret_cast<const char*>(p); };
    if (i < n) {
      *bytes = k_first ? k_bytes : RowBytes(op->k_type, op->head_dim);
      return k_first ? k_first + i * k_step : at(SrcK(t0 + i));
    }
    if (i < 2 * n) {
      if (values_in_keys) return nullptr;  // (the key rows, which the key pass read)
      *bytes = k_first ? v_bytes : RowBytes(op->v_type, op->value_dim);
      return k_first ? v_first + (i - n) * v_step : at(V(t0 + i - n));
    }
    if (i - 2 * n >= next1 - next0) return nullptr;
    *bytes = k_first ? k_bytes : RowBytes(op->k_type, op->head_dim);
    return k_first ? n_first + (i - 2 * n) * k_step : at(SrcK(next0 + i - 2 * n));
  }
  // Quantized rows (FlashDirectQuant): what stream row i's fetch brings into L1, the
  // row and the line of its scale row where its operand has scales of their own (found
  // before the loops that issue them, which then keep their registers).
  // (No member initializers: the loops' arrays of them are not zeroed first.)
  struct QuantFetch {
    const char* row;
    int64_t bytes;
    const void* scale;
  };
  // Row by row: QuantTargets' way where the runs are not a stride apart.
  OCTATTN_INLINE QuantFetch QuantTarget(int64_t i) const {
    QuantFetch f;
    f.bytes = 0;
    f.scale = nullptr;
    f.row = Row(i, &f.bytes);
    if (!f.row) return f;
    const int64_t n = t1 - t0;
    const bool value = i >= n && i < 2 * n;
    const Scales& s = value ? op->v_scales : op->k_scales;
    const int64_t g = i < n ? t0 + i : value ? t0 + i - n : next0 + i - 2 * n;
    if (s.data) f.scale = kernels::ScaleRow(*op, s, first + g);
    return f;
  }
  // QuantTarget(i0 + e) into f[e] for e < count: where the runs are a stride apart
  // (SetStream), each run's rows and scale rows stepped, not found row by row (each row's
  // run tested and its place multiplied out).
  OCTATTN_INLINE void QuantTargets(int64_t i0, int64_t count, QuantFetch* f) const {
    if (!k_first) {
      for (int64_t e = 0; e < count; ++e) f[e] = QuantTarget(i0 + e);
      return;
    }
    const int64_t n = t1 - t0;
    for (int64_t e = 0; e < count;) {
      const int64_t i = i0 + e;
      const int run = i < n ? 0 : i < 2 * n ? 1 : 2;
      const int64_t at = i - (run == 2 ? 2 * n : run * n);
      const int64_t m = base::MinI(count - e, (run == 2 ? next1 - next0 : n) - at);
      const bool none = m <= 0 || (run == 1 && values_in_keys);  // (past the stream)
      const int64_t take = m <= 0 ? count - e : m;
      const char* row = run == 0 ? k_first : run == 1 ? v_first : n_first;
      const int64_t step = run == 1 ? v_step : k_step, bytes = run == 1 ? v_bytes : k_bytes;
      const Scales& sc = run == 1 ? op->v_scales : op->k_scales;
      const int64_t g = (run == 2 ? next0 : t0) + at;  // the run's key
      for (int64_t x = 0; x < take; ++x) {
        QuantFetch& q = f[e + x];
        q.row = none ? nullptr : row + (at + x) * step;
        q.bytes = none ? 0 : bytes;
        q.scale = none || !sc.data ? nullptr
                  : s_first[run]   ? s_first[run] + (at + x) * s_step[run]
                                   : kernels::ScaleRow(*op, sc, first + g + x);
      }
      e += take;
    }
  }
  // The rows of n keys from g (values: their value rows) and their scale rows (blocked
  // types: the rows; no scales: null): stepped by their strides where the rows are not
  // paged and each has a scale row of its own, else found key by key.
  OCTATTN_INLINE void QuantRows(bool value, int64_t g, int64_t n, const uint8_t** rows,
                                const void** srows) const {
    const Dtype t = value ? op->v_type : op->k_type;
    const Scales& s = value ? op->v_scales : op->k_scales;
    const bool blocked = Blocked(t);
    auto row = [&](int64_t k) { return reinterpret_cast<const uint8_t*>(value ? V(k) : SrcK(k)); };
    if (op->paging) {
      for (int64_t e = 0; e < n; ++e) {
        rows[e] = row(g + e);
        srows[e] = blocked ? rows[e] : kernels::ScaleRow(*op, s, first + g + e);
      }
      return;
    }
    const uint8_t* r0 = row(g);
    const int64_t step = (value ? op->v_row : op->k_row) * DtypeBytes(t);
    for (int64_t e = 0; e < n; ++e) rows[e] = r0 + e * step;
    if (blocked || !s.data) {
      for (int64_t e = 0; e < n; ++e) srows[e] = blocked ? rows[e] : nullptr;
    } else if (s.rows == 1) {
      const char* srow0 = static_cast<const char*>(kernels::ScaleRow(*op, s, first + g));
      const int64_t sstep = s.row * DtypeBytes(s.type);
      for (int64_t e = 0; e < n; ++e) srows[e] = srow0 + e * sstep;
    } else {
      for (int64_t e = 0; e < n; ++e) srows[e] = kernels::ScaleRow(*op, s, first + g + e);
    }
  }
  static OCTATTN_INLINE void Issue(const QuantFetch& f) {
    if (f.row) FetchLines<3>(f.row, f.bytes);
    if (f.scale) __builtin_prefetch(f.scale, 0, 3);
  }
  // With heads set (WholeRows), the tiles of the 2^lg kv heads whose slices share each
  // key row: the kDirectKeys rows of a group that this head's far fetches cover are then
  // a few rows whole, every head's slice of them (from row `row0` of the group on), not
  // this head's slice of every row. Between them the heads fetch the same lines, each
  // row's together.
  const DirectTile* heads = nullptr;
  int64_t lg = 0, row0 = 0;
  bool fetch = true;      // whether Fetch fetches (DirectFetch: not kFetchNone)
  bool fetch_l2 = false;  // whether FetchAs fetches 16-bit rows into L2 (kFetchL2)
  int64_t far = 0;        // stream rows on that Fetch also fetches into L2 (kDirectFarBytes)
  // The cache lines of stream row i into L1 (with far, its first kDirectNearBytes), and
  // with far those of row i + far into L2; not at all where DirectFetch says so.
  // (Always inlined: a call whose only effect is a prefetch may be dropped.)
  OCTATTN_INLINE void Fetch(int64_t i) const {
    if (!fetch) return;
    int64_t bytes = 0;
    const char* row = Row(i, &bytes);
    if (row) FetchLines<3>(row, far ? base::MinI(bytes, kDirectNearBytes) : bytes);
    if (far && (row = Row(i + far, &bytes)) != nullptr) FetchLines<2>(row, bytes);
  }
  // The cache lines of `bytes` at row, with locality `level` (3: prefetcht0, 2:
  // prefetcht1).
  template <int level>
  static OCTATTN_INLINE void FetchLines(const char* row, int64_t bytes) {
    const uintptr_t line0 = reinterpret_cast<uintptr_t>(row) >> 6;
    const uintptr_t line1 = (reinterpret_cast<uintptr_t>(row + bytes) - 1) >> 6;
    for (uintptr_t l = line0; l <= line1; ++l)
      __builtin_prefetch(reinterpret_cast<const char*>(l << 6), 0, level);
  }
  // Fetch(i), or with heads the row and head that stream row i stands for; 16-bit rows
  // into L2 where DirectFetch says so (only their instances test it: the f32 ones keep
  // Fetch's code as it is, which the f32 decode's speed depends on). Only f32 rows take
  // heads (WholeRows).
  template <Dtype T>
  OCTATTN_INLINE void FetchAs(int64_t i) const {
    if constexpr (T == kF32) {
      if (heads) {
        const int64_t k = i & (kDirectKeys - 1);
        return heads[k & ((int64_t{1} << lg) - 1)].Fetch(i - k + row0 + (k >> lg));
      }
    } else {
      if (fetch_l2) {
        int64_t bytes = 0;
        const char* row = Row(i, &bytes);
        if (row) FetchLines<2>(row, bytes);
        return;
      }
    }
    Fetch(i);
  }
};

// The rows of the L keys from j0, *row apart: in place, or (paged keys across a block
// boundary) copied into scratch slot g.
template <Dtype T>
static OCTATTN_INLINE const float* KeyVectorRows(const DirectTile& dt, int64_t j0, int g,
                                                 int64_t hd, int64_t* row) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  *row = dt.KStride();
  if (dt.ks || dt.Run(j0, j0 + L) >= j0 + L) return dt.K(j0);  // (staged rows: one apart)
  float* copy = ElemAt(dt.scratch, g * L * hd, T);
  for (int64_t e = 0; e < L; ++e)
    memcpy(ElemAt(copy, e * hd, T), dt.K(j0 + e), static_cast<size_t>(hd * DtypeBytes(T)));
  *row = hd;
  return copy;
}

// DirectScores on AMX (FlashAmx): each step's key pairs transposed into scratch as a
// packed panel holds them (pair rows of KP keys, after the first half of scratch, which
// holds staged or copied rows), then AmxQkStore on them: the packed tile's scores.
template <int R, Dtype T, int Vecs>
static OCTATTN_INLINE void DirectScoresAmx(const FlashTask& t, const DirectTile& dt,
                                           const float* const* q, float* const* s, int64_t j_begin,
                                           int64_t j_end) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes), KP = Vecs * L;
  const int64_t hd = t.op.head_dim;
  float* kp_buf = dt.scratch + kDirectKeys * hd / 2;
  for (int64_t j = j_begin; j < j_end; j += KP) {
    for (int64_t e = 0; e < KP; ++e) dt.template FetchAs<T>(j - dt.t0 + DirectAhead<T>() + e);
    for (int g = 0; g < Vecs; ++g) {
      int64_t row;
      const float* rows = KeyVectorRows<T>(dt, j + g * L, g, hd, &row);
      for (int64_t d = 0; d < hd; d += 16) {
        typename S::V kp[8];
        S::TransposeBf16Pairs(ElemAt(rows, d, T), row, kp);
        for (int i = 0; i < 8; ++i) S::Store(kp[i], kp_buf + (d / 2 + i) * KP + g * L);
      }
    }
    float* out[R];
    for (int r = 0; r < R; ++r) out[r] = s[r] + (j - dt.t0);
    AmxQkStore<R, Vecs>(dt.amx, q, kp_buf, KP, hd / 2, t.op.scale, out);
  }
}

// f(0) .. f(N - 1) in order, each index a compile-time constant (std::integral_constant).
template <int N, int I = 0, class F>
static OCTATTN_INLINE void Unrolled(F&& f) {
  if constexpr (I < N) {
    f(std::integral_constant<int, I>());
    Unrolled<N, I + 1>(f);
  }
}

// One 8-dimension step of the score chains: dimensions d .. d + 7 of R rows (q_dim
// apart) times the Vecs key vectors of kv (keys in lanes), added in that order; the f32,
// 16-bit and quantized direct tiles share it, so their bytes are the same.
template <int R, int Vecs>
static OCTATTN_INLINE void DirectDotStep(const float* const* q, int64_t q_dim, int64_t d,
                                         const typename S::V (&kv)[Vecs][8],
                                         typename S::V (&acc)[R][Vecs]) {
  for (int i = 0; i < 8; ++i)
    for (int r = 0; r < R; ++r) {
      const typename S::V qb = S::Set(q[r][(d + i) * q_dim]);
      for (int g = 0; g < Vecs; ++g) acc[r][g] = S::MulAdd(qb, kv[g][i], acc[r][g]);
    }
}

// DirectDotStep for key vector g alone (kv: its eight dimensions): the same chains.
template <int R, int Vecs>
static OCTATTN_INLINE void DirectDotStepOf(const float* const* q, int64_t q_dim, int64_t d,
                                           const typename S::V (&kv)[8], int g,
                                           typename S::V (&acc)[R][Vecs]) {
  for (int i = 0; i < 8; ++i)
    for (int r = 0; r < R; ++r)
      acc[r][g] = S::MulAdd(S::Set(q[r][(d + i) * q_dim]), kv[i], acc[r][g]);
}

// Scaled scores of R rows for the keys of the tile (elements of type T) into
// s[r][0, t1 - t0), Vecs key vectors a step (kDirectVecs, or one: OneKeyVec).
template <int R, Dtype T, int Vecs>
static inline void DirectScores(const FlashTask& t, const DirectTile& dt, const float* const* q,
                                float* const* s, int64_t j_begin, int64_t j_end) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes), KP = Vecs * L;
  const int64_t hd = t.op.head_dim, q_dim = t.op.q_dim;
  const int64_t per = (KP + hd / 8 - 1) / (hd / 8);  // rows fetched per 8 dims
  const typename S::V vs = S::Set(t.op.scale);
  if constexpr (T == kBf16 && S::kAmx) {
    if (FlashAmx(t.op)) return DirectScoresAmx<R, T, Vecs>(t, dt, q, s, j_begin, j_end);
  }
  for (int64_t j = j_begin; j < j_end; j += KP) {
    const float* rows[Vecs];
    int64_t row[Vecs];
    for (int g = 0; g < Vecs; ++g) rows[g] = KeyVectorRows<T>(dt, j + g * L, g, hd, &row[g]);
    float* out[R];
    for (int r = 0; r < R; ++r) out[r] = s[r] + (j - dt.t0);
    for (int64_t d0 = 0; d0 < hd; d0 += kDotBlock) {
      const int64_t d1 = base::MinI(hd, d0 + kDotBlock);
      typename S::V acc[R][Vecs];
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < Vecs; ++g) acc[r][g] = S::Zero();
      int64_t d = d0;
      if constexpr (T == kBf16 && S::kBf16Pairs) {
        // Sixteen bf16 dimensions a step, transposed as eight pairs. With bf16 pairs
        // (FlashPairs) each pair is one S::DotBf16 with q's pair, as QkChain's pairs on
        // the packed tile; else the pairs are widened after (Bf16Even, Bf16Odd): the same
        // chains in the same order as f32, a third of the shuffles. (Inlined: called
        // out of line, its chains lived in memory, stored after every product.)
        auto steps = [&](auto pairs) OCTATTN_LAMBDA_INLINE {
          for (; d + 16 <= d1; d += 16) {
            for (int64_t e = d / 8 * per; e < base::MinI((d / 8 + 2) * per, KP); ++e)
              dt.template FetchAs<T>(j - dt.t0 + DirectAhead<T>() + e);
            typename S::V kp[Vecs][8];
            for (int g = 0; g < Vecs; ++g)
              S::TransposeBf16Pairs(ElemAt(rows[g], d, T), row[g], kp[g]);
            for (int i = 0; i < 8; ++i) {
              if constexpr (decltype(pairs)::value) {
                for (int r = 0; r < R; ++r) {
                  const typename S::V qb = S::Set(q[r][d / 2 + i]);
                  for (int g = 0; g < Vecs; ++g) acc[r][g] = S::DotBf16(qb, kp[g][i], acc[r][g]);
                }
                continue;
              }
              typename S::V ev[Vecs], od[Vecs];
              for (int g = 0; g < Vecs; ++g) {
                ev[g] = S::Bf16Even(kp[g][i]);
                od[g] = S::Bf16Odd(kp[g][i]);
              }
              for (int r = 0; r < R; ++r) {
                const typename S::V qb = S::Set(q[r][(d + 2 * i) * q_dim]);
                for (int g = 0; g < Vecs; ++g) acc[r][g] = S::MulAdd(qb, ev[g], acc[r][g]);
              }
              for (int r = 0; r < R; ++r) {
                const typename S::V qb = S::Set(q[r][(d + 2 * i + 1) * q_dim]);
                for (int g = 0; g < Vecs; ++g) acc[r][g] = S::MulAdd(qb, od[g], acc[r][g]);
              }
            }
          }
        };
        if (S::kDotBf16 && t.op.q_type == kBf16) {
          steps(std::integral_constant<bool, S::kDotBf16>());
        } else {
          steps(std::false_type());
        }
      }
      for (; d < d1; d += 8) {
        // Rows [per * n, per * (n + 1)) of the step kDirectAhead keys on, n = d / 8.
        for (int64_t e = d / 8 * per; e < base::MinI((d / 8 + 1) * per, KP); ++e)
          dt.template FetchAs<T>(j - dt.t0 + DirectAhead<T>() + e);
        if constexpr (S::kLanes == 8 && S::kRegs < 32 && S::kBlockTranspose && T != kBf16) {
          // Sixteen registers (AVX2): four dimensions of the key vectors at a time, so
          // that they and the chains fit in the registers. The same chains in the same
          // order.
          for (int h = 0; h < 2; ++h) {
            typename S::V kv[Vecs][4];
            for (int g = 0; g < Vecs; ++g)
              S::template TransposeRowsHalf<T>(ElemAt(rows[g], d, T), row[g], h, kv[g]);
            for (int i = 0; i < 4; ++i)
              for (int r = 0; r < R; ++r) {
                const typename S::V qb = S::Set(q[r][(d + 4 * h + i) * q_dim]);
                for (int g = 0; g < Vecs; ++g) acc[r][g] = S::MulAdd(qb, kv[g][i], acc[r][g]);
              }
          }
          continue;
        }
        typename S::V kv[Vecs][8];
        for (int g = 0; g < Vecs; ++g)
          S::template TransposeRows<T>(ElemAt(rows[g], d, T), row[g], kv[g]);
        DirectDotStep<R, Vecs>(q, q_dim, d, kv, acc);
      }
      StoreDotBlock<R, Vecs>(acc, out, d0 > 0, d1 == hd, vs);
    }
  }
}

// The weighted sums of bf16 value pairs: keys 2m and 2m + 1 of the n rows vr (n even),
// columns c0 on, times the weight pairs pg[r][m], into acc (an even C: PairRows32's lane
// order), calling fetch(2m) first at each pair (a prefetch; it changes no result).
template <int R, int C, class Fetch>
static OCTATTN_INLINE void PairsRange(const float* const* vr, int64_t c0, int64_t n,
                                      const float* const* pg, typename S::V (&acc)[R][C],
                                      Fetch fetch) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  for (int64_t k = 0; k < n; k += 2) {
    fetch(k);
    const float *v0 = ElemAt(vr[k], c0, kBf16), *v1 = ElemAt(vr[k + 1], c0, kBf16);
    typename S::V x[C];
    if constexpr (C % 2 == 0) {
      for (int c = 0; c < C; c += 2)
        S::PairRows32(ElemAt(v0, c * L, kBf16), ElemAt(v1, c * L, kBf16), &x[c], &x[c + 1]);
    } else {
      for (int c = 0; c < C; ++c)
        x[c] = S::PairRows(ElemAt(v0, c * L, kBf16), ElemAt(v1, c * L, kBf16));
    }
    for (int r = 0; r < R; ++r) {
      const typename S::V pb = S::Set(pg[r][k / 2]);
      for (int c = 0; c < C; ++c) acc[r][c] = S::DotBf16(pb, x[c], acc[r][c]);
    }
  }
}

// DirectValues for one group of keys [g0, g1) with bf16 pairs (FlashPairsV): its keys
// two at a time (g0 - t0 and g1 - t0 even), each pair's value rows joined by PairRows32
// (or PairRows), one S::DotBf16 per pair with the weight pair (PairWeights: SBufRows
// rows on from p; PairsRange): FlashBlock's chains on the packed pairs.
template <int R, Dtype T>
static OCTATTN_INLINE void DirectValuesPairs(const FlashTask& t, const DirectTile& dt,
                                             const float* const* p, float* const* st, int64_t g0,
                                             int64_t g1) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes), W = kAvVecs * L;
  const int64_t dvp = t.op.value_dim;  // whole vectors (ValuesDirect)
  const float* pw[R];
  for (int r = 0; r < R; ++r) pw[r] = p[r] + SBufRows(t) * kTileKeys;
  if constexpr (S::kAmx) {
    if (FlashAmx(t.op) && g1 - g0 == kAmxKeys && (g0 - dt.t0) % kAmxKeys == 0) {
      // AMX (FlashAmx): the group's value rows joined into pairs in dt.vbuf (the
      // packed V panel's pair rows), then one AmxWeightedSums step: the packed
      // tile's sums of a whole group (a direct tile's rows read all its keys).
      for (int64_t k = g0; k < g1; k += 2) {
        dt.template FetchAs<T>(dt.t1 - dt.t0 + k - dt.t0 + DirectAhead<T>());
        dt.template FetchAs<T>(dt.t1 - dt.t0 + k + 1 - dt.t0 + DirectAhead<T>());
        const float *v0 = dt.V(k), *v1 = dt.V(k + 1);
        float* pr = dt.vbuf + (k - g0) / 2 * dvp;
        for (int64_t c = 0; c < dvp; c += L)
          S::Store(S::PairRows(ElemAt(v0, c, T), ElemAt(v1, c, T)), pr + c);
      }
      const float* pg[R];
      int64_t ga[R], gb[R];
      for (int r = 0; r < R; ++r) {
        pg[r] = pw[r] + (g0 - dt.t0) / 2;
        ga[r] = 0;
        gb[r] = 1;
      }
      AmxWeightedSums<R>(dt.amx, ga, gb, st, dvp, pg, [&](int64_t c0, int64_t* row) {
        *row = dvp;
        return static_cast<const float*>(dt.vbuf + c0);
      });
      return;
    }
  }
  // The group's value rows, found once for all its column blocks.
  const float* vr[kDirectKeys];
  if (dt.Run(g0, g1) >= g1) {
    const float* v = dt.V(g0);
    for (int64_t k = g0; k < g1; ++k) vr[k - g0] = ElemAt(v, (k - g0) * dt.VStride(), T);
  } else {
    for (int64_t k = g0; k < g1; ++k) vr[k - g0] = dt.V(k);
  }
  // Whole blocks of kAvVecs vectors (an even count) take their pairs by PairRows32, so
  // their accumulators hold its lane order (the same chains, column by column).
  auto columns = [&](auto vecs, int64_t c0) {
    constexpr int C = decltype(vecs)::value;
    constexpr bool unpacked = C % 2 == 0;
    typename S::V acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = S::Load(st[r] + 2 + c0 + c * L);
    if constexpr (unpacked)
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; c += 2)
          S::PairLanes(acc[r][c], acc[r][c + 1], &acc[r][c], &acc[r][c + 1]);
    const float* pg[R];
    for (int r = 0; r < R; ++r) pg[r] = pw[r] + (g0 - dt.t0) / 2;
    if (c0 == 0) {
      PairsRange<R, C>(vr, c0, g1 - g0, pg, acc, [&](int64_t k) {
        dt.template FetchAs<T>(dt.t1 - dt.t0 + g0 + k - dt.t0 + DirectAhead<T>());
        dt.template FetchAs<T>(dt.t1 - dt.t0 + g0 + k + 1 - dt.t0 + DirectAhead<T>());
      });
    } else {
      PairsRange<R, C>(vr, c0, g1 - g0, pg, acc, NoFetch());
    }
    if constexpr (unpacked)
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; c += 2)
          S::PairColumns(acc[r][c], acc[r][c + 1], &acc[r][c], &acc[r][c + 1]);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) S::Store(acc[r][c], st[r] + 2 + c0 + c * L);
  };
  int64_t c0 = 0;
  for (; c0 + W <= dvp; c0 += W) columns(std::integral_constant<int, kAvVecs>(), c0);
  for (; c0 < dvp; c0 += L) columns(std::integral_constant<int, 1>(), c0);
}

// DirectValues for one run of keys [a, b), value rows v_row apart (AvRange's chains);
// each key's step in the first columns fetches the value row DirectAhead keys on.
template <int R, Dtype T>
static OCTATTN_INLINE void DirectValuesRun(const DirectTile& dt, const float* const* p,
                                           float* const* st, int64_t dvp, int64_t a, int64_t b) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes), W = kAvVecs * L;
  const float* v = dt.V(a);
  const float* pa[R];
  for (int r = 0; r < R; ++r) pa[r] = p[r] + (a - dt.t0);
  int64_t c0 = 0, part = 0;
  const bool spread = RowsApart(dt.VStride(), dvp);
  const int64_t ahead = dt.t1 - 2 * dt.t0 + DirectAhead<T>();  // stream row of key j: j + ahead
  auto fetch = [&](int64_t j) {
    if (part == 0) dt.template FetchAs<T>(ahead + j);
  };
  if constexpr (T == kBf16 && S::kBf16Pairs && kAvVecs % 2 == 0) {
    // bf16 rows loaded as pairs and split by Bf16Even and Bf16Odd (no widening
    // shuffle): the accumulators hold the even and the odd columns of each pair of
    // vectors, the same chains over the keys.
    for (; c0 + W <= dvp; c0 += W, ++part) {
      typename S::V acc[R][kAvVecs];
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < kAvVecs; c += 2)
          S::Deinterleave(S::Load(st[r] + 2 + c0 + c * L), S::Load(st[r] + 2 + c0 + (c + 1) * L),
                          &acc[r][c], &acc[r][c + 1]);
      const float* vc = ElemAt(v, c0, T);
      auto keys = [&](auto fetching) OCTATTN_LAMBDA_INLINE {
        for (int64_t k = a; k < b; ++k) {
          if constexpr (decltype(fetching)::value) dt.template FetchAs<T>(ahead + k);
          const float* vk = ElemAt(vc, (k - a) * dt.VStride(), T);
          typename S::V x[kAvVecs];
          for (int c = 0; c < kAvVecs; c += 2) {
            const typename S::V pair = S::Load(ElemAt(vk, c * L, T));  // 2L bf16
            x[c] = S::Bf16Even(pair);
            x[c + 1] = S::Bf16Odd(pair);
          }
          for (int r = 0; r < R; ++r) {
            const typename S::V pb = S::Set(pa[r][k - a]);
            for (int c = 0; c < kAvVecs; ++c) acc[r][c] = S::MulAdd(pb, x[c], acc[r][c]);
          }
        }
      };
      // Spread rows are fetched in the first columns (a head's slices of them, which the
      // core's own prefetchers do not follow); contiguous ones are not, which those
      // prefetchers carry and the fetches only slow. Two loops: no test in the contiguous
      // rows' steps. On the 16-lane targets only: on AVX2 the loop then kept its pointers
      // on the stack; ARM64 is unmeasured. (docs/PERFORMANCE.md: bf16 rows that lie apart.)
      if (S::kLanes >= 16 && part == 0 && spread) {
        keys(std::true_type());
      } else {
        keys(std::false_type());
      }
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < kAvVecs; c += 2) {
          typename S::V lo, hi;
          S::Interleave(acc[r][c], acc[r][c + 1], &lo, &hi);
          S::Store(lo, st[r] + 2 + c0 + c * L);
          S::Store(hi, st[r] + 2 + c0 + (c + 1) * L);
        }
    }
  }
  for (; c0 + W <= dvp; c0 += W, ++part) {
    typename S::V acc[R][kAvVecs];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < kAvVecs; ++c) acc[r][c] = S::Load(st[r] + 2 + c0 + c * L);
    AvRange<R, kAvVecs, decltype(fetch), T>(KeyData{pa, 1, ElemAt(v, c0, T), dt.VStride(), a}, pa,
                                            a, b, 1, acc, fetch);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < kAvVecs; ++c) S::Store(acc[r][c], st[r] + 2 + c0 + c * L);
  }
  for (; c0 < dvp; c0 += L, ++part) {
    typename S::V acc[R][1];
    for (int r = 0; r < R; ++r) acc[r][0] = S::Load(st[r] + 2 + c0);
    AvRange<R, 1, decltype(fetch), T>(KeyData{pa, 1, ElemAt(v, c0, T), dt.VStride(), a}, pa, a, b,
                                      1, acc, fetch);
    for (int r = 0; r < R; ++r) S::Store(acc[r][0], st[r] + 2 + c0);
  }
}

// Adds the value rows of the tile weighted by p[r][0, t1 - t0) to the R states: groups
// of keys, each group's columns a register block at a time (elements of type T).
template <int R, Dtype T>
static inline void DirectValues(const FlashTask& t, const DirectTile& dt, const float* const* p,
                                float* const* st, int64_t g_begin, int64_t g_end) {
  const int64_t dvp = t.op.value_dim;  // whole vectors (ValuesDirect)
  for (int64_t g0 = g_begin; g0 < g_end; g0 += kDirectKeys) {
    const int64_t g1 = base::MinI(g0 + kDirectKeys, dt.t1);
    if constexpr (T == kBf16 && S::kDotBf16) {
      if (FlashPairsV(t.op)) {
        DirectValuesPairs<R, T>(t, dt, p, st, g0, g1);
        continue;
      }
    }
    for (int64_t a = g0; a < g1;) {
      const int64_t b = dt.Run(a, g1);
      DirectValuesRun<R, T>(dt, p, st, dvp, a, b);
      a = b;
    }
  }
}

// Quantized rows in registers (FlashDirectQuant). The loops are compiled per kind of
// value, their template's T (kI8: int8 and q8_0, signed bytes; kE4m3: both fp8 formats;
// kQ4_0), and read the operand's own type where the kinds' members differ (offsets, scales,
// fp8's constants): fewer instances for each target to compile.
//
// Element d of a row of type `type`: its byte offset and, for q4_0, the shift of its
// nibble (blocked types: d's block, after the block's f16 scale; an 8-dimension step or
// a vector of columns lies in one block and one half of it).
static OCTATTN_INLINE int64_t QuantOffset(Dtype type, int64_t d, int* shift) {
  if (type == kQ8_0) return d / kQuantBlock * 34 + 2 + d % kQuantBlock;
  if (type == kQ4_0) {
    const int64_t i = d % kQuantBlock;
    *shift = i >= 16 ? 4 : 0;
    return d / kQuantBlock * 18 + 2 + (i & 15);
  }
  return d;
}
static OCTATTN_INLINE int64_t BlockBytes(Dtype type) { return type == kQ8_0 ? 34 : 18; }

// A scale of a quantized row `row` whose scale row is srow, `at` elements into the scale
// row (elements of type st); blocked types: the f16 `at` bytes into the row.
static OCTATTN_INLINE float QuantScaleAt(bool blocked, const uint8_t* row, const void* srow,
                                         Dtype st, int64_t at) {
  if (blocked) {
    uint16_t h;
    memcpy(&h, row + at, 2);
    if constexpr (S::kQuantRows) return S::HalfToFloat(h);
    return F16ToF32(h);  // (not reached: FlashDirectQuant needs kQuantRows)
  }
  return LoadElem(srow, at, st);
}

// The scales at element offset `col` of kLanes scale rows (scales[e] is row e's, in
// elements of type st), keys in lanes; blocked types: the f16 at byte `col` of each row.
// (A template: its gathers are the 16-lane kQuantRows targets' only.)
template <int = 0>
static OCTATTN_INLINE typename S::V QuantScales(bool blocked, const void* const* scales, Dtype st,
                                                int64_t col) {
  constexpr size_t L = S::kLanes;
  if constexpr (S::kQuantRows && L == 16) {  // a blocked row's f16 has its values after it
    if (blocked) return S::GatherHalves(scales, col);
    if (st == kF32) return S::GatherBits(scales, col * 4);
  }
  if (blocked) {
    alignas(64) uint16_t h[L];
    for (size_t e = 0; e < L; ++e) memcpy(&h[e], static_cast<const char*>(scales[e]) + col, 2);
    return S::template LoadAs<kF16>(reinterpret_cast<const float*>(h));
  }
  alignas(64) float f[L];
  if (st == kF32) {  // (the common scales: no conversion to choose per element)
    for (size_t e = 0; e < L; ++e) f[e] = static_cast<const float*>(scales[e])[col];
  } else {
    for (size_t e = 0; e < L; ++e) f[e] = LoadElem(scales[e], col, st);
  }
  return S::Load(f);
}

// The rows, scale rows (blocked types: the rows) and fetches of one step of Vecs key
// vectors from key j of a quantized tile, found before the step's loops (which then keep
// their registers), and the keys' values eight dimensions at a time.
template <int Vecs>
struct QuantKeys {
  static constexpr int64_t L = static_cast<int64_t>(S::kLanes), KP = Vecs * L;
  const uint8_t* rows[Vecs][L];
  const void* scales[Vecs][L];
  DirectTile::QuantFetch ahead[KP];
  OCTATTN_INLINE QuantKeys(const DirectTile& dt, int64_t j) {
    for (int g = 0; g < Vecs; ++g) dt.QuantRows(false, j + g * L, L, rows[g], scales[g]);
    dt.QuantTargets(j - dt.t0 + kDirectAhead, KP, ahead);
  }
  // The fetches of rows [d / 8 * per, (d / 8 + 1) * per) of the step kDirectAhead keys
  // on: the rows of the next steps spread over this one's eight-dimension steps.
  OCTATTN_INLINE void Fetch(int64_t d, int64_t per) const {
    for (int64_t e = d / 8 * per; e < base::MinI((d / 8 + 1) * per, KP); ++e)
      DirectTile::Issue(ahead[e]);
  }
  // Whether no key row holds a NaN code among its n e4m3 codes (eight lanes).
  OCTATTN_INLINE bool E4m3Plain(int64_t n) const {
    for (int g = 0; g < Vecs; ++g)
      if (S::E4m3RowsNans(rows[g], n)) return false;
    return true;
  }
  // Dimensions d .. d + 7 of the keys' values, keys in lanes, after Fetch: times the
  // scales sv[g] of key vector g where sv is given (`whole` as S::Fp8Row8's; plain: e4m3
  // rows as E4m3Plain finds them).
  template <Dtype T>
  OCTATTN_INLINE void Values(Dtype type, int64_t d, int64_t per, const typename S::V* sv,
                             typename S::V (&kv)[Vecs][8], bool whole = true,
                             bool plain = false) const {
    Fetch(d, per);
    int shift = 0;
    const int64_t off = QuantOffset(type, d, &shift);
    for (int g = 0; g < Vecs; ++g) {
      if constexpr (T == kE4m3 && S::kFp8Rows) {  // (the same values, fewer operations)
        if (plain) {
          S::TransposeE4m3Plain(rows[g], off, kv[g], whole);
        } else {
          S::TransposeFp8(rows[g], off, type, kv[g], whole);
        }
      } else {
        S::template TransposeBytes<T>(rows[g], off, kv[g]);
        for (int i = 0; i < 8; ++i) kv[g][i] = S::template QuantValues<T>(kv[g][i], shift, type);
      }
      if (sv)
        for (int i = 0; i < 8; ++i) kv[g][i] = S::Mul(sv[g], kv[g][i]);
    }
  }
};

// Whether every key and column of `op`'s cache reads one scale (fp8's per-tensor and
// per-head scales), and that scale times 2^8 is exact and kept exact whatever MXCSR says
// (below 2^120, and normal or zero): then *folded is it, the scale that takes the 2^-8 of
// e4m3 codes widened by F16C (S::Fp8As): s * v and (2^8 s) * (2^-8 v) are one product.
static inline bool OneScale(const Operands& op, const Scales& sc, int64_t dim, float* folded) {
  if (!sc.data || sc.row != 0 || (op.paging && sc.block != 0) || (sc.col != 0 && sc.group < dim))
    return false;
  const float s = LoadElem(sc.data, 0, sc.type);
  const uint32_t a = base::AbsBits(s);
  if (a >= 0x7B800000u || (a < 0x00800000u && a != 0)) return false;
  *folded = s * 256.0f;
  return true;
}

// A raw step's four calls step(n, plain_c), n < 4, plain_c a constant of `plain` (the
// loops without S::RawE4m3 compiled alone where T has no such codes).
template <Dtype T, class F>
static OCTATTN_INLINE void Steps(bool plain, F&& step) {
  if constexpr (T == kE4m3 && S::kE4m3Plain) {
    if (plain) return Unrolled<4>([&](auto n) OCTATTN_LAMBDA_INLINE { step(n, std::true_type()); });
  }
  Unrolled<4>([&](auto n) OCTATTN_LAMBDA_INLINE { step(n, std::false_type()); });
}

// DirectScores on quantized rows: the key rows' bytes transposed 32 dimensions at a time
// as words on sixteen lanes (TransposeRawBytes, RawValues), else eight at a time widened
// (TransposeBytes, QuantValues), turned into their values and scaled in registers, then
// the same chains as the f32 rows of the same values, so the same bits. Each step's row
// and scale pointers and fetches are found before its loops. Fold (e4m3 keys with one
// scale, OneScale): that scale times 2^8, `folded`, takes F16C's 2^-8. e4m3 codes whose
// 32 dimensions of a step hold no NaN code take S::RawE4m3's shorter steps (the same
// values).
template <int R, Dtype T, int Vecs, bool Fold = false>
static __attribute__((noinline)) void DirectScoresQuant(const FlashTask& t, const DirectTile& dt,
                                                        const float* const* q, float* const* s,
                                                        int64_t j_begin, int64_t j_end,
                                                        float folded = 0.0f) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes), KP = Vecs * L;
  const Operands& op = *dt.op;
  const Dtype type = op.k_type;
  const bool blocked = Blocked(type);
  const int64_t hd = op.head_dim, q_dim = t.op.q_dim;
  const int64_t per = (KP + hd / 8 - 1) / (hd / 8);  // rows fetched per 8 dims
  const Scales& sc = op.k_scales;
  const bool scaled = blocked || sc.data;
  const int64_t group = blocked ? kQuantBlock : sc.data ? sc.group : hd;
  const typename S::V vs = S::Set(t.op.scale);
  // Bytes moved 32 dimensions at a time before they are widened (S::TransposeRawBytes).
  const bool raw = S::kRawBytes && hd % 32 == 0;
  for (int64_t j = j_begin; j < j_end; j += KP) {
    const QuantKeys<Vecs> keys(dt, j);
    bool plain_rows = false;  // e4m3 rows with no NaN code, for S::TransposeE4m3Plain
    if constexpr (T == kE4m3 && S::kFp8Rows) plain_rows = type == kE4m3 && keys.E4m3Plain(hd);
    float* out[R];
    for (int r = 0; r < R; ++r) out[r] = s[r] + (j - dt.t0);
    typename S::V sv[Vecs];
    int64_t next_group = 0, scale_col = 0;  // the next group's first dimension, its scale
    auto scales = [&](int64_t d) {
      if (scaled && d == next_group) {
        for (int g = 0; g < Vecs; ++g) {
          if constexpr (Fold) {
            sv[g] = S::Set(folded);
          } else {
            sv[g] = QuantScales(blocked, keys.scales[g], sc.type, scale_col);
          }
        }
        next_group += group;
        scale_col += blocked ? BlockBytes(type) : sc.col;
      }
    };
    for (int64_t d0 = 0; d0 < hd; d0 += kDotBlock) {
      const int64_t d1 = base::MinI(hd, d0 + kDotBlock);
      typename S::V acc[R][Vecs];
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < Vecs; ++g) acc[r][g] = S::Zero();
      if constexpr (S::kRawBytes) {
        if (raw) {
          for (int64_t d = d0; d < d1; d += 32) {
            int shift = 0;
            const int64_t off = QuantOffset(type, d, &shift);
            if constexpr ((R >= 4 && T == kQ4_0) || R == 1) {
              // One key vector's words at a time, for q4_0 and for single rows: both
              // vectors' words (16 registers) beside the chains and the values'
              // temporaries spilled to the stack. The same chains in the same order. (Four
              // rows of int8 or fp8, whose values take fewer operations, ran slower so:
              // each q broadcast is then loaded once a vector.)
              typename S::V svs[4][Vecs];
              for (int n = 0; n < 4; ++n) {
                scales(d + 8 * n);
                for (int g = 0; g < Vecs; ++g) svs[n][g] = sv[g];
              }
              for (int g = 0; g < Vecs; ++g) {
                typename S::V words[8];
                S::template TransposeRawBytes<T>(keys.rows[g], off, words);
                bool plain = false;  // e4m3 codes with no NaN code (S::RawE4m3)
                if constexpr (T == kE4m3 && S::kE4m3Plain)
                  plain = type == kE4m3 && !S::E4m3Nans(words, 8);
                // (plain: the step's loops compiled apart, its test out of them)
                auto step = [&](auto n, auto plain_c)
                                OCTATTN_LAMBDA_INLINE {  // dims d + 8n .. d + 8n + 7
                                  constexpr int kStep = decltype(n)::value;
                                  const int64_t ds = d + 8 * kStep;
                                  if (g == 0) keys.Fetch(ds, per);
                                  typename S::V kv[1][8];
                                  if constexpr (decltype(plain_c)::value) {
                                    S::template RawE4m3Values<kStep>(words, kv[0], !Fold);
                                  } else {
                                    S::template RawValues<T, kStep>(words, type, kv[0], !Fold);
                                  }
                                  if (scaled)
                                    for (int i = 0; i < 8; ++i)
                                      kv[0][i] = S::Mul(svs[kStep][g], kv[0][i]);
                                  DirectDotStepOf<R, Vecs>(q, q_dim, ds, kv[0], g, acc);
                                };
                Steps<T>(plain, step);
              }
              continue;
            }
            typename S::V words[Vecs][8];
            for (int g = 0; g < Vecs; ++g)
              S::template TransposeRawBytes<T>(keys.rows[g], off, words[g]);
            bool plain = false;  // e4m3 codes with no NaN code (S::RawE4m3)
            if constexpr (T == kE4m3 && S::kE4m3Plain)
              plain = type == kE4m3 && !S::E4m3Nans(&words[0][0], Vecs * 8);
            auto step = [&](auto n,
                            auto plain_c) OCTATTN_LAMBDA_INLINE {  // dims d + 8n .. d + 8n + 7
              constexpr int kStep = decltype(n)::value;
              const int64_t ds = d + 8 * kStep;
              scales(ds);
              keys.Fetch(ds, per);
              if constexpr (T != kI8 || Vecs == 1) {
                typename S::V kv[Vecs][8];
                for (int g = 0; g < Vecs; ++g) {
                  if constexpr (decltype(plain_c)::value) {
                    S::template RawE4m3Values<kStep>(words[g], kv[g], !Fold);
                  } else {
                    S::template RawValues<T, kStep>(words[g], type, kv[g], !Fold);
                  }
                  if (scaled)
                    for (int i = 0; i < 8; ++i) kv[g][i] = S::Mul(sv[g], kv[g][i]);
                }
                DirectDotStep<R, Vecs>(q, q_dim, ds, kv, acc);
                return;
              }
              // int8 bytes of two key vectors: each dimension's values made as its FMAs
              // take them (all eight dimensions' values, 16 registers beside the words and
              // the chains, spilled to the stack; fp8's, whose values take more
              // temporaries, did better so, as do one vector's eight: 0.90x this way).
              auto dim = [&](auto i) {
                constexpr int kI = decltype(i)::value;
                typename S::V x[Vecs];
                for (int g = 0; g < Vecs; ++g) {
                  x[g] = S::template RawValue<T, 8 * kStep + kI>(words[g], type, !Fold);
                  if (scaled) x[g] = S::Mul(sv[g], x[g]);
                }
                for (int r = 0; r < R; ++r) {
                  const typename S::V qb = S::Set(q[r][(ds + kI) * q_dim]);
                  for (int g = 0; g < Vecs; ++g) acc[r][g] = S::MulAdd(qb, x[g], acc[r][g]);
                }
              };
              Unrolled<8>(dim);
            };
            Steps<T>(plain, step);
          }
          StoreDotBlock<R, Vecs>(acc, out, d0 > 0, d1 == hd, vs);
          continue;
        }
      }
      for (int64_t d = d0; d < d1; d += 8) {
        scales(d);
        typename S::V kv[Vecs][8];
        keys.template Values<T>(type, d, per, scaled ? sv : nullptr, kv, !Fold, plain_rows);
        DirectDotStep<R, Vecs>(q, q_dim, d, kv, acc);
      }
      StoreDotBlock<R, Vecs>(acc, out, d0 > 0, d1 == hd, vs);
    }
  }
}

// DirectScoresQuant's integer scores (Operands::qk_block, a multiple of 8): the key rows'
// integers times the QRecords' integers, exact, each block's sums added by StoreIntBlock
// with the keys' scales for the block: the bits of QkStoreInt on the packed tile. The
// integers are the f32 chains' (QuantValues, unscaled), or with Dot (S::kDotI8; blocks of
// a multiple of 16 dimensions) vpdpbusd's: each 16-dimension piece of the key rows as
// four vectors of unsigned byte quads (QuadsU8), one vpdpbusd per quad, row and key
// vector with the row's int8 quad, each block's sums less the unsigned bytes' excess
// (int8 and q8_0: 128 times the q block's sum; q4_0: 8 times it).
template <int R, Dtype T, int Vecs, bool Dot>
static __attribute__((noinline)) void DirectScoresInt(const FlashTask& t, const DirectTile& dt,
                                                      const float* const* q, float* const* s,
                                                      int64_t j_begin, int64_t j_end) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes), KP = Vecs * L;
  const Operands& op = *dt.op;
  const Dtype type = op.k_type;
  const bool blocked = Blocked(type);
  const int64_t hd = op.head_dim, block = op.qk_block;
  const int64_t per = (KP + hd / 8 - 1) / (hd / 8);  // rows fetched per 8 dims
  const Scales& sc = op.k_scales;
  const typename S::V vs = S::Set(t.op.scale);
  const int group_shift = sc.data ? base::Log2IfPow2(sc.group) : -1;  // (no division a block)
  constexpr int32_t kExcess = T == kQ4_0 ? 8 : 128;
  const float* qs[R];
  const int32_t* sums[R];
  const int8_t* bytes[R];
  for (int r = 0; r < R; ++r) {
    qs[r] = QScales(q[r], hd);
    sums[r] = QSums(q[r], hd, block);
    bytes[r] = QBytes(q[r], hd, block);
  }
  for (int64_t j = j_begin; j < j_end; j += KP) {
    const QuantKeys<Vecs> keys(dt, j);
    float* out[R];
    for (int r = 0; r < R; ++r) out[r] = s[r] + (j - dt.t0);
    for (int64_t d0 = 0, b = 0; d0 < hd; d0 += block, ++b) {
      typename S::V acc[R][Vecs];
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < Vecs; ++g) acc[r][g] = S::Zero();
      if constexpr (Dot) {
        for (int64_t d = d0; d < d0 + block; d += 16) {
          keys.Fetch(d, per);
          keys.Fetch(d + 8, per);
          int shift = 0;
          const int64_t off = QuantOffset(type, d, &shift);
          typename S::V quads[Vecs][4];
          for (int g = 0; g < Vecs; ++g) S::template QuadsU8<T>(keys.rows[g], off, shift, quads[g]);
          for (int c = 0; c < 4; ++c)
            for (int r = 0; r < R; ++r) {
              int32_t qq;
              memcpy(&qq, bytes[r] + d + 4 * c, 4);
              for (int g = 0; g < Vecs; ++g) acc[r][g] = S::DotI8(acc[r][g], quads[g][c], qq);
            }
        }
        for (int r = 0; r < R; ++r)
          for (int g = 0; g < Vecs; ++g) acc[r][g] = S::IntToFloat(acc[r][g], kExcess * sums[r][b]);
      } else {
        for (int64_t d = d0; d < d0 + block; d += 8) {
          typename S::V kv[Vecs][8];
          keys.template Values<T>(type, d, per, nullptr, kv);
          DirectDotStep<R, Vecs>(q, 1, d, kv, acc);
        }
      }
      typename S::V sv[Vecs];
      const int64_t col = blocked            ? b * BlockBytes(type)
                          : group_shift >= 0 ? (d0 >> group_shift) * sc.col
                                             : d0 / sc.group * sc.col;
      for (int g = 0; g < Vecs; ++g) sv[g] = QuantScales(blocked, keys.scales[g], sc.type, col);
      StoreIntBlock<R, Vecs>(acc, qs, b, sv, out, d0 > 0, d0 + block == hd, vs);
    }
  }
}

// DirectValues on quantized rows, keys [g0, g1) (at most kDirectKeys): each key's value
// columns a register block at a time, loaded as bytes, turned into their values and
// scaled in registers, then AvRange's chains (the same bits as the f32 rows of the same
// values). The keys' rows, scales and fetches are found before the loops.
template <int R, Dtype T>
static __attribute__((noinline)) void DirectValuesQuant(const DirectTile& dt, const float* const* p,
                                                        float* const* st, int64_t g0, int64_t g1) {
  // Columns a block: kAvVecs vectors, half as many for eight rows (16 chains).
  constexpr int kC = R >= 8 ? kAvVecs / 2 : kAvVecs;
  constexpr int64_t L = static_cast<int64_t>(S::kLanes), W = kC * L;
  const Operands& op = *dt.op;
  const Dtype type = op.v_type;
  const bool e4 = type == kE4m3;
  const bool blocked = Blocked(type);
  const int64_t dvp = op.value_dim;  // whole vectors (FlashDirectQuant)
  const Scales& sc = op.v_scales;
  const bool scaled = blocked || sc.data;
  const uint8_t* rows[kDirectKeys];
  const void* srows[kDirectKeys];
  DirectTile::QuantFetch ahead[kDirectKeys];
  dt.QuantRows(true, g0, g1 - g0, rows, srows);
  dt.QuantTargets(dt.t1 - dt.t0 + g0 - dt.t0 + kDirectAhead, g1 - g0, ahead);
  // One scale for every key and column (fp8's per-tensor and per-head scales): read once,
  // not once a key and vector, and for e4m3 codes folded as OneScale says (each value's
  // multiply by 2^8 goes).
  bool one = scaled && !blocked && (sc.col == 0 || sc.group >= dvp);
  for (int64_t k = 1; one && k < g1 - g0; ++k) one = srows[k] == srows[0];
  float s1 = one ? LoadElem(srows[0], 0, sc.type) : 0.0f;
  bool fold = false;
  if constexpr (T == kE4m3 && S::kFp8Values)
    fold = one && type == kE4m3 && OneScale(op, sc, dvp, &s1);
  const typename S::V vs1 = S::Set(s1);
  // How the keys' values are scaled: not at all, each key's vectors by their own scales
  // (f32 scales read where the multiply takes them, as a broadcast operand; other types
  // widened into a table first), or all by one.
  enum { kNone, kEach, kEachF32, kOne };
  // A scale's group of columns found by a shift where it is a power of two (a division
  // for each vector of each block of columns otherwise).
  const int group_shift = sc.data ? base::Log2IfPow2(sc.group) : -1;
  // (Always inlined: GCC's choice moves with the function's size, and q4_0's loops ran
  // slower out of line.)
  auto columns = [&](auto vecs, int64_t c0, auto mode_c, auto fold_c) OCTATTN_LAMBDA_INLINE {
    constexpr int C = decltype(vecs)::value, Mode = decltype(mode_c)::value;
    constexpr bool Fold = decltype(fold_c)::value;
    // Vector c's bytes in a row, its nibbles' shift, and where its scale is (divisions
    // once a block of columns, not once a key).
    int64_t off[C], at[C];
    int shift[C] = {};
    for (int c = 0; c < C; ++c) {
      const int64_t col = c0 + c * L;
      off[c] = QuantOffset(type, col, &shift[c]);
      at[c] = blocked   ? col / kQuantBlock * BlockBytes(type)
              : sc.data ? (group_shift >= 0 ? col >> group_shift : col / sc.group) * sc.col
                        : 0;
    }
    float f[kDirectKeys][C];  // the scale of each key's vector c (kEach)
    if constexpr (Mode == kEach) {
      if (!blocked && sc.type == kF32) {  // (no conversion to choose per element)
        for (int64_t k = 0; k < g1 - g0; ++k)
          for (int c = 0; c < C; ++c) f[k][c] = static_cast<const float*>(srows[k])[at[c]];
      } else {
        for (int64_t k = 0; k < g1 - g0; ++k)
          for (int c = 0; c < C; ++c)
            f[k][c] = QuantScaleAt(blocked, rows[k], srows[k], sc.type, at[c]);
      }
    }
    typename S::V acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = S::Load(st[r] + 2 + c0 + c * L);
    const float* pk[R];  // the weights of key g0 on
    for (int r = 0; r < R; ++r) pk[r] = p[r] + (g0 - dt.t0);
    auto times_scale = [&](int64_t k, int c, typename S::V x) OCTATTN_LAMBDA_INLINE {
      if constexpr (Mode == kEach) return S::Mul(S::Set(f[k][c]), x);
      if constexpr (Mode == kEachF32)
        return S::Mul(S::Set(static_cast<const float*>(srows[k])[at[c]]), x);
      if constexpr (Mode == kOne) return S::Mul(vs1, x);
      return x;
    };
    // Key k's values (x: its C vectors), after its fetch.
    auto values = [&](int64_t k, typename S::V(&x)[C]) {
      if (c0 == 0) DirectTile::Issue(ahead[k]);
      if constexpr (T == kE4m3 && S::kE4m3Plain) {  // codes with no NaN code: S::E4m3PlainAs
        if (e4 && !S::E4m3NansAt(rows[k] + off[0], C * static_cast<int>(L))) {
          for (int c = 0; c < C; ++c)
            x[c] = times_scale(k, c, S::E4m3PlainAs(rows[k] + off[c], !Fold));
          return;
        }
      }
      for (int c = 0; c < C; ++c) {
        if constexpr (T == kE4m3 && S::kFp8Values) {
          x[c] = times_scale(k, c, S::Fp8As(rows[k] + off[c], type, !Fold));
        } else {
          x[c] = times_scale(
              k, c,
              S::template QuantValues<T>(S::template BytesAs<T>(rows[k] + off[c]), shift[c], type));
        }
      }
    };
    // Two keys a step on the 16-lane targets (each chain takes key k, then k + 1: the
    // same order), so that the loop's own work is paid once for both. (AVX2's sixteen
    // registers: fp8 and q4_0 ran 0.95-0.98x so; ARM64's units are unmeasured.)
    const int64_t n = g1 - g0;
    int64_t k = 0;
    for (; S::kLanes >= 16 && k + 2 <= n; k += 2) {
      typename S::V x0[C], x1[C];
      values(k, x0);
      values(k + 1, x1);
      for (int r = 0; r < R; ++r) {
        const typename S::V pb0 = S::Set(pk[r][k]), pb1 = S::Set(pk[r][k + 1]);
        for (int c = 0; c < C; ++c) acc[r][c] = S::MulAdd(pb0, x0[c], acc[r][c]);
        for (int c = 0; c < C; ++c) acc[r][c] = S::MulAdd(pb1, x1[c], acc[r][c]);
      }
    }
    for (; k < n; ++k) {
      typename S::V x[C];
      values(k, x);
      for (int r = 0; r < R; ++r) {
        const typename S::V pb = S::Set(pk[r][k]);
        for (int c = 0; c < C; ++c) acc[r][c] = S::MulAdd(pb, x[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) S::Store(acc[r][c], st[r] + 2 + c0 + c * L);
  };
  // (each case's loops compiled apart, their tests out of the key loop)
  auto blocks = [&](auto mode_c, auto fold_c) {
    int64_t c0 = 0;
    for (; c0 + W <= dvp; c0 += W) columns(std::integral_constant<int, kC>(), c0, mode_c, fold_c);
    for (; c0 < dvp; c0 += L) columns(std::integral_constant<int, 1>(), c0, mode_c, fold_c);
  };
  using No = std::false_type;
  if (!scaled) return blocks(std::integral_constant<int, kNone>(), No());
  if constexpr (T == kI8) {  // (int8's f32 group scales; fp8's loops keep the table)
    if (!one && !blocked && sc.type == kF32)
      return blocks(std::integral_constant<int, kEachF32>(), No());
  }
  if (!one) return blocks(std::integral_constant<int, kEach>(), No());
  if constexpr (T == kE4m3 && S::kFp8Values) {
    if (fold) return blocks(std::integral_constant<int, kOne>(), std::true_type());
  }
  blocks(std::integral_constant<int, kOne>(), No());
}

// The quantized loops for the operands' kind: one instance of the tile's other code
// serves every quantized type (FlashDirectTileHeads<kI8>), and rows run eight (the
// 32-register targets; on AVX2 the scores only), four or one at a time (a block of two
// or three rows as four, of five to seven as eight: FlashDirectTileHeads pads it with
// copies of its last row). (Out of line: a call per 32 keys.)
template <int R>
static void DirectScoresQuantOf(const FlashTask& t, const DirectTile& dt, const float* const* q,
                                float* const* s, int64_t j_begin, int64_t j_end) {
  // Key vectors a step: one for eight rows (their chains and the step's words take 16
  // registers a vector).
  constexpr int Vecs = R >= 8 ? 1 : kDirectVecs;
  const Dtype type = t.op.k_type;
  if (t.op.qk_block) {  // integer scores (OCTATTN_QK_INT8: kI8, kQ8_0, kQ4_0 keys)
    if constexpr (S::kDotI8) {
      if (t.op.qk_block % 16 == 0) {
        if (type == kQ4_0)
          return DirectScoresInt<R, kQ4_0, Vecs, true>(t, dt, q, s, j_begin, j_end);
        return DirectScoresInt<R, kI8, Vecs, true>(t, dt, q, s, j_begin, j_end);
      }
    }
    if (type == kQ4_0) return DirectScoresInt<R, kQ4_0, Vecs, false>(t, dt, q, s, j_begin, j_end);
    return DirectScoresInt<R, kI8, Vecs, false>(t, dt, q, s, j_begin, j_end);
  }
  if (type == kI8 || type == kQ8_0)
    return DirectScoresQuant<R, kI8, Vecs>(t, dt, q, s, j_begin, j_end);
  if (type == kQ4_0) return DirectScoresQuant<R, kQ4_0, Vecs>(t, dt, q, s, j_begin, j_end);
  if constexpr (S::kFp8Values) {
    float folded;
    if (type == kE4m3 && OneScale(t.op, t.op.k_scales, t.op.head_dim, &folded))
      return DirectScoresQuant<R, kE4m3, Vecs, true>(t, dt, q, s, j_begin, j_end, folded);
  }
  DirectScoresQuant<R, kE4m3, Vecs>(t, dt, q, s, j_begin, j_end);
}
template <int R>
static void DirectValuesQuantOf(const DirectTile& dt, const float* const* p, float* const* st,
                                int64_t g0, int64_t g1) {
  const Dtype type = dt.op->v_type;
  if (type == kI8 || type == kQ8_0) return DirectValuesQuant<R, kI8>(dt, p, st, g0, g1);
  if (type == kQ4_0) return DirectValuesQuant<R, kQ4_0>(dt, p, st, g0, g1);
  DirectValuesQuant<R, kE4m3>(dt, p, st, g0, g1);
}
