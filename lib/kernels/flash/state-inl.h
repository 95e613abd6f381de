// The fused path, row state: the constants of its blocks, what a task runs on (bf16
// pairs, AMX), a row's online-softmax state and its update by a tile of scores, and
// the descriptions of the keys, tiles and rows the blocks work on.

// Row state: [m, l, o[0 .. dvp)] = running max, running sum of exp(s - m), and the
// unnormalized output. Every update is the same sequence of operations for a row
// whatever rows share its task (see kSpanKeys in kernels.h).

// Rows per micro-kernel block: with kFlashQkVecs key vectors (and as many value vectors
// in the weighted sum) its accumulators take 12 of 16 or 24 of 32 registers, which keeps
// enough independent FMA chains in flight to cover the FMA latency on two ports, and
// loads per FMA low enough for one core's load ports.
constexpr int kFlashRows = static_cast<int>(kBlockRows);
constexpr int kFlashQkVecs = S::kRegs >= 32 ? 4 : 2;
// Keys per K panel: the packed K tile is [panel][head_dim][kQkPanel], so the micro-kernel
// reads one contiguous stream. kTileKeys is a multiple of it on every target.
constexpr int64_t kQkPanel = kFlashQkVecs * static_cast<int64_t>(S::kLanes);
static_assert(kTileKeys % kQkPanel == 0, "tiles hold whole K panels");
// Value columns per V panel, when the task packs V ([panel][key][kAvPanel]).
constexpr int64_t kAvPanel = kAvVecs * static_cast<int64_t>(S::kLanes);
// Tasks with more rows than this pack their V tiles into panels (each V tile is read by
// every row block); fewer rows (decode) read the caller's value rows where they are full
// vectors. Both give the same bits: the same products summed in the same order.
constexpr int64_t kPackValueRows = 16;
// Rows ahead whose mask ends are prefetched while a row's mask envelope is found.
constexpr int64_t kEnvelopeAhead = 4;

static inline int64_t FlashRows(const FlashTask& t) { return t.heads * (t.row_end - t.row_begin); }
// Rows of a block on AMX tiles (FlashHeadTile): a tile's 16 rows.
constexpr int kAmxRows = S::kAmx ? 16 : 1;
// Rows of the scores buffer: a micro-kernel block (an AMX block), or a decode task's rows
// (the heads of a shared-rows task hold the scores of all their rows at once).
static inline int64_t SBufRows(const FlashTask& t) {
  return base::MaxI(base::MaxI(kFlashRows, kAmxRows),
                    FlashRows(t) <= kPackValueRows ? FlashRows(t) : 0);
}
// With bf16 value pairs (FlashPairsV) the buffer holds as many rows more, of the
// weights as bf16 pairs (row r at row SBufRows + r).
static inline float* PairWeights(const FlashTask& t, float* s_buf, int64_t r) {
  return s_buf + (SBufRows(t) + r) * kTileKeys;
}

// Whether a task's Q K^T runs on bf16 pairs (S::DotBf16): bf16 q and k, an even
// head_dim, on a target with the instruction. Its rows' q (PrepareRows) and its tiles'
// keys (WidenTile) stay bf16, read a pair at a time; scores sum the pairs in blocks of
// 32 (kDotBlock dimensions) on packed and direct tiles alike.
static inline bool FlashPairs(const Operands& op) {
  return S::kDotBf16 && op.q_type == kBf16 && op.k_type == kBf16 && op.head_dim % 2 == 0;
}

// Whether its weighted sums run on bf16 pairs too (S::DotBf16 on weights rounded to
// bf16 and pairs of bf16 value rows): FlashPairs, bf16 v, and dense runs of keys (no
// score modifier, no strided columns), so that every row's keys are a run of pairs. Key
// lists qualify: a row's listed keys are a dense space of their own (FlashListedUnit).
static inline bool FlashPairsV(const Operands& op) {
  return FlashPairs(op) && op.v_type == kBf16 && !op.mods.Modifies() &&
         !(op.mask.causal && op.mask.window > 0 && op.mask.stride > 0);
}

// Whether its Q K^T runs on AMX tiles (S::kAmx, the amx_bf16 target): FlashPairs with a
// head_dim of whole 16-pair tile steps. Its scores are AMX's sums (AmxQkStore) on packed
// tiles and direct ones alike (DirectScores transposes a group's key pairs into scratch
// as the packed panels hold them), and so are its weighted sums' whole groups of keys
// where FlashPairsV (AmxWeightedSums; DirectValues joins each group's value rows into
// pairs as the packed panels hold them): decode equals prefill.
static inline bool FlashAmx(const Operands& op) {
  return S::kAmx && FlashPairs(op) && op.head_dim % 32 == 0;
}

// n 16-bit elements of a row (dim apart) into dst, contiguous, unchanged.
static inline void CopyElems(const float* src, int64_t dim, int64_t n, float* dst) {
  if (dim == 1) {
    memcpy(dst, src, static_cast<size_t>(n) * 2);
    return;
  }
  for (int64_t d = 0; d < n; ++d) memcpy(ElemAt(dst, d, kBf16), ElemAt(src, d * dim, kBf16), 2);
}

static size_t FlashStateFloats(int64_t value_dim) {
  return Piece(base::Count(2 + PadKeys(value_dim)));
}

// One past the last key any row of the task may read.
static inline int64_t FlashKeyLimit(const FlashTask& t) {
  return base::KeyEnd(t.op.mask, t.op.mask.q_start + t.row_end, t.op.kv_len);
}

static inline void ResetState(float* st, int64_t rows, size_t stride, int64_t dvp) {
  for (int64_t r = 0; r < rows; ++r) {
    float* s = st + r * stride;
    s[0] = -__builtin_inff();
    s[1] = 0.0f;
    for (int64_t d = 0; d < dvp; ++d) s[2 + d] = 0.0f;
  }
}

// run <- run merged with cur (both unnormalized states of one row).
static inline void MergeState(float* run, const float* cur, int64_t dvp) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  if (cur[0] == -__builtin_inff()) return;
  if (run[0] == -__builtin_inff()) {
    for (int64_t d = 0; d < 2 + dvp; ++d) run[d] = cur[d];
    return;
  }
  const float m = run[0] > cur[0] ? run[0] : cur[0];
  const float a = ExpScalar(run[0] - m), b = ExpScalar(cur[0] - m);
  run[0] = m;
  run[1] = run[1] * a + cur[1] * b;
  const typename S::V va = S::Set(a), vb = S::Set(b);
  for (int64_t d = 0; d < dvp; d += L)
    S::Store(S::MulAdd(S::Load(cur + 2 + d), vb, S::Mul(S::Load(run + 2 + d), va)), run + 2 + d);
}

// The lse of a final state and the factor its output is scaled by (0 for an empty row);
// `sink` (-inf: none) joins the denominator last.
static inline float RowLse(const float* st, float sink, float* factor) {
  const bool empty = st[0] == -__builtin_inff();
  *factor = empty ? 0.0f : 1.0f / st[1];
  float row_lse = empty ? -__builtin_inff() : st[0] + __builtin_logf(st[1]);
  if (sink != -__builtin_inff()) {
    if (empty) {
      row_lse = sink;
    } else {
      const float m = sink > st[0] ? sink : st[0];
      const float a = ExpScalar(st[0] - m);
      const float l = st[1] * a + ExpScalar(sink - m);
      *factor = a / l;
      row_lse = m + __builtin_logf(l);
    }
  }
  return row_lse;
}

// o row and lse from a final state; `sink` (-inf: none) joins the denominator last, in
// prefill and decode alike. A 16-bit o gets the f32 row rounded to nearest even.
static inline void FinishRow(const float* st, int64_t dvp, int64_t value_dim, float* o,
                             int64_t o_dim, Dtype o_type, float* lse, float* tmp, float sink) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const bool empty = st[0] == -__builtin_inff();
  const bool direct = o_type == kF32 && o_dim == 1 && value_dim % L == 0;
  float* dst = direct ? o : tmp;
  float factor;
  const float row_lse = RowLse(st, sink, &factor);
  const typename S::V inv = S::Set(factor);
  for (int64_t d = 0; d < dvp; d += L) S::Store(S::Mul(S::Load(st + 2 + d), inv), dst + d);
  if (empty)
    for (int64_t d = 0; d < dvp; ++d) dst[d] = 0.0f;  // also when the state holds NaN
  if (!direct) NarrowRowV(dst, value_dim, o, o_dim, o_type);
  if (lse) *lse = row_lse;
}

// Keys of a row inside the tile [t0, t1).
static inline base::RowKeys ClipKeys(base::RowKeys k, int64_t t0, int64_t t1) {
  base::RowKeys c;
  c.lo = base::MinI(base::MaxI(k.lo, t0), t1);
  c.hi = base::MaxI(base::MinI(base::MaxI(k.hi, t0), t1), c.lo);
  c.stride = k.stride;
  c.phase = k.phase;
  c.strided_end = base::MaxI(base::MinI(k.strided_end, t1), t0);
  c.strided_begin = base::MinI(base::MaxI(k.strided_begin, t0), t1);
  return c;
}

// The keys a unit works on: the real keys, the gathered strided columns (column g is
// key g * stride; a row may read g < its count, which is plain causal with position
// count - 1), or a row's listed keys (every one of them read).
struct FlashSpace {
  base::Mask mask;
  int64_t kv_len;                 // keys of the space
  bool floors;                    // the rows' floors apply (real keys)
  int64_t first, step;            // space key g is real key first + g * step
  AmxTiles* amx;                  // the task's tiles (FlashAmx)
  const int32_t* keys = nullptr;  // else: space key g is real key keys[g] (a key list)
  // Real key g of the space.
  int64_t Real(int64_t g) const { return keys ? keys[g] : first + g * step; }
};

// The packed tile a block of rows works on.
struct FlashTile {
  const float* kt;  // K panels [tpad / kQkPanel][head_dim][kQkPanel], space keys t0 .. t1
                    // (zero padded to tpad)
  const float* v;   // value row of space key t0 (direct or packed rows), or V panels
  int64_t v_row;    // 0 for V panels [.][tpad][kAvPanel] (the last one narrower)
  int64_t t0, t1, tpad;
  bool pairs = false;  // V panels of bf16 key pairs [.][tpad / 2][kAvPanel] (FlashPairsV)
  // Operands::qk_block: the block scales of the keys (kt holds their integers), block b
  // of space key t0 + jj at ksc[b * kTileKeys + jj].
  const float* ksc = nullptr;

  // Value columns [c0, c0 + vectors) of the tile's keys: KeyData's v and v_row.
  const float* Values(int64_t c0, int64_t dvp, int64_t* row) const {
    if (v_row) {
      *row = v_row;
      return v + c0;
    }
    const int64_t p0 = c0 / kAvPanel * kAvPanel;
    *row = base::MinI(kAvPanel, dvp - p0);
    return v + p0 * (pairs ? tpad / 2 : tpad) + (c0 - p0);
  }
};

// Per-row facts of a task's rows, kept in scratch.
// A q row rounded to int8 (Operands::qk_block, PrepareRows): head_dim integers as floats,
// then per block of qk_block dimensions its scale, then (as int32) the sum of its
// integers, then the head_dim integers as int8; whole cache lines.
static inline int64_t QRecordFloats(int64_t head_dim, int64_t block) {
  const int64_t nb = head_dim / block;
  return static_cast<int64_t>(Piece(base::Count(head_dim + 2 * nb + (head_dim + 3) / 4)));
}
static OCTATTN_INLINE const float* QScales(const float* rec, int64_t head_dim) {
  return rec + head_dim;
}
static OCTATTN_INLINE const int32_t* QSums(const float* rec, int64_t head_dim, int64_t block) {
  return reinterpret_cast<const int32_t*>(rec + head_dim + head_dim / block);
}
static OCTATTN_INLINE const int8_t* QBytes(const float* rec, int64_t head_dim, int64_t block) {
  return reinterpret_cast<const int8_t*>(rec + head_dim + 2 * (head_dim / block));
}
struct FlashRow {
  const float* q;
  int64_t qpos;     // position of the row in the current space
  int64_t floor;    // real keys below this (a multiple of kTileKeys) are not the row's
  int64_t strided;  // strided columns below the floor: the gathered unit's keys
  RowMods mod;      // the row's score modifiers (qpos: its real position)
  // With a mask tensor: the real keys of the row's dense run from its first to its last
  // allowed entry (the others are masked by the tensor).
  int64_t env_lo, env_hi;
  // Key scores: the row's records of real key tiles and of gathered tiles (RecordShape);
  // null: none kept.
  float *rec, *grec;
};

// Keeps a row's weights s[a, b) of the tile from space key t0 (b - a whole vectors; the
// others are not the row's; `real`: real keys, else gathered columns) and the max m they are
// relative to, in its record.
static inline void RecordTile(const FlashRow& row, bool real, int64_t t0, const float* s, int64_t a,
                              int64_t b, float m) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  float* dst = (real ? row.rec : row.grec) + t0 / kTileKeys * kRecordFloats;
  int64_t j = 0;
  for (; j < a; j += L) S::Store(S::Zero(), dst + j);
  for (; j < b; j += L) S::Store(S::Load(s + j), dst + j);
  for (; j < kTileKeys; j += L) S::Store(S::Zero(), dst + j);
  dst[kTileKeys] = m;
}

// Brings the caller's K and V rows of the next tile toward the core while the current
// one is computed, a slice of rows per row block: packing then reads from the cache, not
// from memory. Prefetches never fault and change no result.
struct FlashPrefetch {
  const char* k = nullptr;
  const char* v = nullptr;
  int64_t k_step = 0, v_step = 0;    // bytes from one key row to the next
  int64_t k_bytes = 0, v_bytes = 0;  // bytes of one row (0: rows are not contiguous)
  int64_t next = 0, end = 0;         // rows still to fetch
  int64_t per_step = 0;              // rows per step: a row block takes one step per K panel
  // Paged keys (else null): row g is key first + g * k_step of *paged, through its table.
  const Operands* paged = nullptr;
  int64_t first = 0;

  void Step() {
    for (int64_t n = per_step; n > 0 && next < end; --n, ++next) {
      const char* kr = paged ? reinterpret_cast<const char*>(KeyRow(*paged, first + next * k_step))
                             : k + next * k_step;
      for (int64_t b = 0; b < k_bytes; b += 64) __builtin_prefetch(kr + b, 0, 2);
      const char* vr = paged
                           ? reinterpret_cast<const char*>(ValueRow(*paged, first + next * v_step))
                           : v + next * v_step;
      for (int64_t b = 0; b < v_bytes; b += 64) __builtin_prefetch(vr + b, 0, 2);
    }
  }
};

// The weighted sums of the rows with holes, each alone.
template <int R, int C>
static inline void FlashHoleRows(const KeyData& kd, const base::RowKeys* keys, const bool* holey,
                                 const uint64_t (*holes)[kTileKeys / kHoleBits],
                                 typename S::V (&acc)[R][C]) {
  for (int r = 0; r < R; ++r) {
    if (!holey[r]) continue;
    typename S::V a[1][C];
    for (int c = 0; c < C; ++c) a[0][c] = acc[r][c];
    AvRowHoles<C>(kd, kd.p[r], keys[r], holes[r], a);
    for (int c = 0; c < C; ++c) acc[r][c] = a[0][c];
  }
}

// The online-softmax update of a row's state st by its scores s[a, b) (whole vectors;
// masked scores -inf): the running max and sum, the output rescaled where the max grew,
// and s[j] = exp(s[j] - max). False: no score is readable yet (all -inf), and neither
// the state nor the scores changed.
static inline bool SoftmaxTile(float* s, int64_t a, int64_t b, float* st, int64_t dvp) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  typename S::V vmax = S::Set(-__builtin_inff());
  for (int64_t j = a; j < b; j += L) vmax = S::Max(vmax, S::Load(s + j));
  const float mt = S::ReduceMax(vmax);
  const float m_old = st[0];
  float m_new = mt > m_old ? mt : m_old;
  if (m_new == -__builtin_inff()) {
    // Vector max may drop a NaN; look for one before calling the tile empty.
    for (int64_t j = a; j < b; ++j)
      if (s[j] != s[j]) m_new = s[j];
    if (m_new == -__builtin_inff()) return false;  // nothing readable yet: no change
    st[0] = m_new;
  }
  if (m_new > m_old) {
    const typename S::V alpha = S::Exp(S::Set(m_old - m_new));
    st[1] *= S::ReduceMax(alpha);
    for (int64_t d = 0; d < dvp; d += L) S::Store(S::Mul(S::Load(st + 2 + d), alpha), st + 2 + d);
    st[0] = m_new;
  }
  const typename S::V vm = S::Set(m_new);
  typename S::V vsum = S::Zero();
  for (int64_t j = a; j < b; j += L) {
    const typename S::V e = S::Exp(S::Sub(S::Load(s + j), vm));
    S::Store(e, s + j);
    vsum = S::Add(vsum, e);
  }
  st[1] += S::ReduceSum(vsum);
  return true;
}
