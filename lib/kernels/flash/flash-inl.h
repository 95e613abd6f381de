// The fused path: online-softmax attention over K/V tiles, never holding more than a
// tile of scores. Tiles are packed (transposed K, V panels), except that decode-sized
// row lists read the tiles every row reads whole in place (the direct tiles below).
// Included inside a per-target namespace that defines the SIMD vocabulary S, after the
// common, qk and av families.
//
// Row state: [m, l, o[0 .. dvp)] = running max, running sum of exp(s - m), and the
// unnormalized output. Every update is the same sequence of operations for a row
// whatever rows share its task (see kChunkKeys in kernels.h).

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
// score modifier, no strided columns), so that every row's keys are a run of pairs.
static inline bool FlashPairsV(const Operands& op) {
  return FlashPairs(op) && op.v_type == kBf16 && !op.mods.Scores() &&
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

// o row and lse from a final state; `sink` (-inf: none) joins the denominator last, in
// prefill and decode alike. A 16-bit o gets the f32 row rounded to nearest even.
static inline void FinishRow(const float* st, int64_t dvp, int64_t value_dim, float* o,
                             int64_t o_dim, Dtype o_type, float* lse, float* tmp, float sink) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const bool empty = st[0] == -__builtin_inff();
  const bool direct = o_type == kF32 && o_dim == 1 && value_dim % L == 0;
  float* dst = direct ? o : tmp;
  float factor = empty ? 0.0f : 1.0f / st[1];
  float row_lse = empty ? -__builtin_inff() : st[0] + __builtin_logf(st[1]);
  if (sink != -__builtin_inff()) {
    if (empty) {
      row_lse = sink;
    } else {
      const float m = sink > st[0] ? sink : st[0];
      const float a = ExpScalar(st[0] - m);
      const float l = st[1] * a + ExpScalar(sink - m);
      factor = a / l;
      row_lse = m + __builtin_logf(l);
    }
  }
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

// The keys a unit works on: the real keys, or the gathered strided columns (column g is
// key g * stride; a row may read g < its count, which is plain causal with position
// count - 1).
struct FlashSpace {
  base::Mask mask;
  int64_t kv_len;       // keys of the space
  bool floors;          // the rows' floors apply (real keys)
  int64_t first, step;  // space key g is real key first + g * step
  AmxTiles* amx;        // the task's tiles (FlashAmx)
};

// The packed tile a block of rows works on.
struct FlashTile {
  const float* kt;  // K panels [tpad / kQkPanel][head_dim][kQkPanel], space keys t0 .. t1
                    // (zero padded to tpad)
  const float* v;   // value row of space key t0 (direct or packed rows), or V panels
  int64_t v_row;    // 0 for V panels [.][tpad][kAvPanel] (the last one narrower)
  int64_t t0, t1, tpad;
  bool pairs = false;  // V panels of bf16 key pairs [.][tpad / 2][kAvPanel] (FlashPairsV)

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
struct FlashRow {
  const float* q;
  int64_t qpos;     // position of the row in the current space
  int64_t floor;    // real keys below this (a multiple of kTileKeys) are not the row's
  int64_t strided;  // strided columns below the floor: the gathered unit's keys
  RowMods mod;      // the row's score modifiers (qpos: its real position)
  // With a mask tensor: the real keys of the row's dense run from its first to its last
  // allowed entry (the others are masked by the tensor).
  int64_t env_lo, env_hi;
};

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

// Vectors per row of a register block acc[R][C].
template <class A>
constexpr int AccVecs() {
  return static_cast<int>(std::extent<std::remove_reference_t<A>, 1>::value);
}

// The weighted sums of R states over a tile's value columns, a register block at a time
// (kAvVecs vectors, then single ones): av(kd, acc) adds the tile's keys (weights p) to
// the block's accumulators.
template <int R, class Av>
OCTATTN_INLINE void Columns(const FlashTile& tile, float* const* st, int64_t dvp,
                            const float* const* p, Av&& av) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  int64_t c0 = 0, v_row = 0;
  auto block = [&](auto vecs) OCTATTN_LAMBDA_INLINE {
    constexpr int C = decltype(vecs)::value;
    typename S::V acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = S::Load(st[r] + 2 + c0 + c * L);
    const float* v = tile.Values(c0, dvp, &v_row);
    av(KeyData{p, 1, v, v_row, tile.t0}, acc);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) S::Store(acc[r][c], st[r] + 2 + c0 + c * L);
    c0 += C * L;
  };
  while (c0 + kAvVecs * L <= dvp) block(std::integral_constant<int, kAvVecs>());
  while (c0 < dvp) block(std::integral_constant<int, 1>());
}

// Keys per AMX step of the weighted sums: 16 pairs.
constexpr int64_t kAmxKeys = 32;

// S::kAmx, bf16 value pairs (FlashPairsV with FlashAmx): the whole groups of kAmxKeys
// keys from the tile's first key that row r reads, [g0[r], g1[r]) (group numbers), added
// to the R states on AMX tiles, a group a tdpbf16ps step of each 16-column block: the
// weights' pairs (pw, rows kTileKeys floats apart, PairWeights) by the V panel's pair
// rows (the packed tile's panels of kAvPanel columns). A row's sums depend on its own
// groups alone: a group other rows of the block read and it does not leaves its state
// as it was (its value rows may hold anything). The keys of a row outside its groups are
// the vector pairs' (FlashBlock: those before, then the groups, then those after).
// values(c0, &row): the pair rows of value columns [c0, c0 + 64) of group 0 (row floats
// apart; group g's at + g * 16 rows).
template <int R, class Values>
static inline void AmxWeightedSums(AmxTiles* amx, const int64_t* g0, const int64_t* g1,
                                   float* const* st, int64_t dvp, const float* const* pw,
                                   Values&& values) {
  int64_t ga = INT64_MAX, gb = 0;
  for (int r = 0; r < R; ++r)
    if (g0[r] < g1[r]) {
      ga = base::MinI(ga, g0[r]);
      gb = base::MaxI(gb, g1[r]);
    }
  if (ga >= gb) return;
  amx->Use<R>();
  constexpr int64_t kPairs = kAmxKeys / 2;
  const int64_t a_stride = kTileKeys * 4;
  alignas(64) float c[R][64], keep[R][64];
  for (int64_t c0 = 0; c0 < dvp; c0 += 64) {
    const int nc = static_cast<int>(base::MinI(4, (dvp - c0) / 16));
    const size_t bytes = static_cast<size_t>(nc) * 64;
    int64_t v_row = 0;
    const float* v = values(c0, &v_row);
    for (int r = 0; r < R; ++r) memcpy(c[r], st[r] + 2 + c0, bytes);
    S::AmxLoadSums(c[0], nc);
    for (int64_t g = ga; g < gb; ++g) {
      bool all = true, none = true;
      for (int r = 0; r < R; ++r) {
        const bool in = g >= g0[r] && g < g1[r];
        all &= in;
        none &= !in;
      }
      if (none) continue;
      if (!all) S::AmxStoreSums(keep[0], nc);
      S::AmxStep(pw[0] + g * kPairs, a_stride, v + g * kPairs * v_row, v_row * 4, nc);
      if (!all) {  // the rows that do not read the group keep their sums
        S::AmxStoreSums(c[0], nc);
        for (int r = 0; r < R; ++r)
          if (g < g0[r] || g >= g1[r]) memcpy(c[r], keep[r], bytes);
        S::AmxLoadSums(c[0], nc);
      }
    }
    S::AmxStoreSums(c[0], nc);
    for (int r = 0; r < R; ++r) memcpy(st[r] + 2 + c0, c[r], bytes);
  }
}

// R rows against one tile: scores, online softmax update, weighted sum into the states.
template <int R>
static inline void FlashBlock(const FlashTask& t, const FlashSpace& sp, const FlashTile& tile,
                              const FlashRow* rows, float* const* st, float* s_buf,
                              FlashPrefetch* pf) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const float* q[R];
  int64_t qpos[R];
  bool active[R];
  bool any = false;
  int64_t qmin = rows[0].qpos, qmax = rows[0].qpos;
  for (int r = 0; r < R; ++r) {
    q[r] = rows[r].q;
    qpos[r] = rows[r].qpos;
    active[r] = !sp.floors || tile.t1 > rows[r].floor;
    any |= active[r];
    qmin = base::MinI(qmin, qpos[r]);
    qmax = base::MaxI(qmax, qpos[r]);
  }
  const base::TileKind kind =
      any ? base::Classify(sp.mask, qmin, qmax + 1, tile.t0, tile.t1, sp.kv_len) : base::kTileEmpty;
  if (kind == base::kTileEmpty) return;
  // Every active row reads every key of a full tile: no panel needs its own mask.
  const bool full = kind == base::kTileFull && tile.t1 - tile.t0 == tile.tpad;
  // Each row's keys in the tile, and the packed columns [a, b) (whole vectors) that
  // hold them: the scores outside are never read, so neither computed nor scanned.
  // Dropping masked scores (-inf, exp 0) changes no max and no sum.
  // With modifiers, keys masked by the tensors are the rows' holes (bits from t0); the
  // mask tensor is read here, once, and a row none of whose keys it allows here is
  // skipped like a masked tile.
  const bool modded = t.op.mods.Scores();
  constexpr int64_t kWords = kTileKeys / kHoleBits;
  uint64_t holes[R][kWords];
  bool holey[R];
  base::RowKeys keys[R];
  int64_t a[R], b[R], block_a = tile.tpad, block_b = 0;
  for (int r = 0; r < R; ++r) {
    keys[r] = base::RowKeys{tile.t0, tile.t0, 0, tile.t0, 0};
    a[r] = b[r] = 0;
    holey[r] = false;
    if (!active[r]) continue;  // below the row's floor: another unit holds these keys
    base::RowKeys k = ClipKeys(base::KeysOf(sp.mask, qpos[r], sp.kv_len), tile.t0, tile.t1);
    const RowMods& mod = rows[r].mod;
    if (sp.floors && mod.mask) {  // the dense run within the row's mask envelope
      k.lo = base::MinI(base::MaxI(k.lo, rows[r].env_lo), k.hi);
      k.hi = base::MaxI(base::MinI(k.hi, rows[r].env_hi), k.lo);
    }
    const bool strided = k.stride > 0 && k.strided_end > k.strided_begin;
    int64_t jb = strided ? k.strided_begin : k.lo;
    int64_t je = k.hi > k.lo ? k.hi : (strided ? k.strided_end : jb);
    if (je <= jb) continue;
    if (modded) {
      for (int64_t w = 0; w < kWords; ++w) holes[r][w] = 0;
      if (mod.mask) {
        const KeySpan span =
            ScanMaskRow(mod.mask, mod.mask_col, sp.first, sp.step, tile.t0, jb, je, holes[r]);
        if (span.begin >= span.end) continue;  // the tensor masks every key of the row here
        // The keys outside the span are holes: dropped from the row's keys here.
        jb = span.begin;
        je = span.end;
        k.lo = base::MinI(base::MaxI(k.lo, jb), je);
        k.hi = base::MaxI(base::MinI(k.hi, je), k.lo);
        k.strided_begin = base::MaxI(k.strided_begin, jb);
        k.strided_end = base::MaxI(base::MinI(k.strided_end, je), k.strided_begin);
      }
    }
    keys[r] = k;
    a[r] = (jb - tile.t0) / L * L;
    b[r] = base::MinI(tile.tpad, (je - tile.t0 + L - 1) / L * L);
    block_a = base::MinI(block_a, a[r]);
    block_b = base::MaxI(block_b, b[r]);
  }
  float* s[R];
  for (int r = 0; r < R; ++r) s[r] = s_buf + r * kTileKeys;
  for (int64_t j0 = block_a / kQkPanel * kQkPanel; j0 < block_b; j0 += kQkPanel) {
    pf->Step();
    if constexpr (S::kDotBf16) {
      if (t.op.q_type == kBf16) {                  // bf16 pairs (FlashPairs): head_dim counts pairs
        if constexpr (S::kAmx) {
          if (t.op.head_dim % 16 == 0) {  // FlashAmx
            QkTile<R, kFlashQkVecs, true, true>(q, 1, tile.kt + j0 * t.op.head_dim, kQkPanel,
                                                t.op.head_dim, j0, tile.t0, tile.t1, sp.kv_len,
                                                sp.mask, qpos, t.op.scale, s, full || modded,
                                                sp.amx);
            continue;
          }
        }
        QkTile<R, kFlashQkVecs, true>(q, 1, tile.kt + j0 * t.op.head_dim, kQkPanel, t.op.head_dim,
                                      j0, tile.t0, tile.t1, sp.kv_len, sp.mask, qpos, t.op.scale, s,
                                      full || modded);
        continue;
      }
    }
    QkTile<R, kFlashQkVecs>(q, t.op.q_dim, tile.kt + j0 * t.op.head_dim, kQkPanel, t.op.head_dim,
                            j0, tile.t0, tile.t1, sp.kv_len, sp.mask, qpos, t.op.scale, s,
                            full || modded);
  }
  if (modded)  // the raw scores get the modifiers, then the mask and the holes
    for (int r = 0; r < R; ++r) {
      if (a[r] == b[r]) continue;
      holey[r] = ModifyAndMask(s[r], a[r], b[r], tile.t0, tile.t1, sp.first, sp.step, rows[r].mod,
                               keys[r], holes[r]);
    }

  const int64_t dvp = PadKeys(t.op.value_dim);
  for (int r = 0; r < R; ++r) {
    if (a[r] == b[r]) continue;  // no key of the row here: no change
    if (!SoftmaxTile(s[r], a[r], b[r], st[r], dvp)) {
      keys[r] = base::RowKeys{tile.t0, tile.t0, 0, tile.t0, 0};
      holey[r] = false;
    }
  }

  if constexpr (S::kDotBf16) {
    if (tile.pairs) {  // bf16 weight and value pairs (FlashPairsV): no holes, no strides
      const float* pw[R];
      for (int r = 0; r < R; ++r) {
        float* w = PairWeights(t, s_buf, r);
        pw[r] = w;
        for (int64_t x = a[r]; x < b[r]; x += 2 * L)
          S::Store(
              S::NarrowPairs(S::Load(s[r] + x), x + L < b[r] ? S::Load(s[r] + x + L) : S::Zero()),
              w + x / 2);
      }
      if constexpr (S::kAmx) {
        if (t.op.head_dim % 16 == 0) {  // FlashAmx: whole groups of keys on AMX tiles
          // Row r's keys: [lo, g0) on vector pairs, the groups [g0, g1) on AMX, [g1, hi)
          // on vector pairs, in this order.
          int64_t g0[R], g1[R];
          base::RowKeys before[R], after[R];
          bool any_before = false, any_after = false;
          for (int r = 0; r < R; ++r) {
            const int64_t lo = keys[r].lo - tile.t0, hi = keys[r].hi - tile.t0;
            g0[r] = (lo + kAmxKeys - 1) / kAmxKeys;
            g1[r] = base::MaxI(g0[r], hi / kAmxKeys);
            before[r] = after[r] = keys[r];
            if (g0[r] == g1[r]) {  // no whole group: every key on vector pairs
              after[r].hi = after[r].lo;
            } else {
              before[r].hi = tile.t0 + g0[r] * kAmxKeys;
              after[r].lo = tile.t0 + g1[r] * kAmxKeys;
            }
            any_before |= before[r].hi > before[r].lo;
            any_after |= after[r].hi > after[r].lo;
          }
          auto pairs = [&](const base::RowKeys* ks) {
            Columns<R>(tile, st, dvp, pw, [&](const KeyData& kd, auto& acc) OCTATTN_LAMBDA_INLINE {
              AvRowsPairs<R, AccVecs<decltype(acc)>()>(kd, ks, acc);
            });
          };
          if (any_before) pairs(before);
          AmxWeightedSums<R>(sp.amx, g0, g1, st, dvp, pw, [&](int64_t c0, int64_t* row) {
            return tile.Values(c0, dvp, row);  // the V panel of the columns
          });
          if (any_after) pairs(after);
          return;
        }
      }
      Columns<R>(tile, st, dvp, pw, [&](const KeyData& kd, auto& acc) OCTATTN_LAMBDA_INLINE {
        AvRowsPairs<R, AccVecs<decltype(acc)>()>(kd, keys, acc);
      });
      return;
    }
  }
  const float* p[R];
  for (int r = 0; r < R; ++r) p[r] = s[r];
  // Rows with holes sum their keys alone, skipping the holes (same chains otherwise).
  bool any_holey = false;
  base::RowKeys block_keys[R];
  for (int r = 0; r < R; ++r) {
    any_holey |= holey[r];
    block_keys[r] = holey[r] ? base::RowKeys{tile.t0, tile.t0, 0, tile.t0, 0} : keys[r];
  }
  Columns<R>(tile, st, dvp, p, [&](const KeyData& kd, auto& acc) OCTATTN_LAMBDA_INLINE {
    constexpr int C = AccVecs<decltype(acc)>();
    AvRows<R, C>(kd, block_keys, acc);
    if (any_holey) FlashHoleRows<R, C>(kd, keys, holey, holes, acc);
  });
}

// The last n < kFlashRows rows of a tile's row list, in blocks of 4, 2 and 1 rows (the
// row lists of decode: 1, 2 and 4 rows, 8 = 6 + 2, 16 = 6 + 6 + 4). Fewer block heights
// keep the build small; a row's bytes do not depend on its block.
static inline void FlashRest(const FlashTask& t, const FlashSpace& sp, const FlashTile& tile,
                             const FlashRow* rows, int64_t n, float* states, size_t stride,
                             float* s_buf, FlashPrefetch* pf) {
  for (int64_t i = 0; i < n;) {
    float* st[4];
    const int64_t h = n - i >= 4 ? 4 : n - i >= 2 ? 2 : 1;
    for (int64_t r = 0; r < h; ++r) st[r] = states + static_cast<size_t>(i + r) * stride;
    if (h == 4) FlashBlock<4>(t, sp, tile, rows + i, st, s_buf, pf);
    if (h == 2) FlashBlock<2>(t, sp, tile, rows + i, st, s_buf, pf);
    if (h == 1) FlashBlock<1>(t, sp, tile, rows + i, st, s_buf, pf);
    i += h;
  }
}

// Rows against one tile, in blocks of kFlashRows consecutive rows (kAmxRows where both
// Q K^T and the weighted sums run on AMX tiles, whose steps cost about the same for 6
// rows as for 16).
static inline void FlashHeadTile(const FlashTask& t, const FlashSpace& sp, const FlashTile& tile,
                                 const FlashRow* rows, int64_t nq, float* states, size_t stride,
                                 float* s_buf, FlashPrefetch* pf) {
  float* st[kAmxRows > kFlashRows ? kAmxRows : kFlashRows];
  int64_t i = 0;
  const bool amx = S::kAmx && tile.pairs && t.op.head_dim % 16 == 0;  // FlashAmx, FlashPairsV
  const int64_t block = amx ? kAmxRows : kFlashRows;
  const int64_t steps = (nq + block - 1) / block * (tile.tpad / kQkPanel);
  pf->per_step = (pf->end - pf->next + steps - 1) / steps;
  if constexpr (S::kAmx) {
    for (; amx && i + kAmxRows <= nq; i += kAmxRows) {
      for (int r = 0; r < kAmxRows; ++r) st[r] = states + static_cast<size_t>(i + r) * stride;
      FlashBlock<kAmxRows>(t, sp, tile, rows + i, st, s_buf, pf);
    }
  }
  for (; i + kFlashRows <= nq; i += kFlashRows) {
    for (int r = 0; r < kFlashRows; ++r) st[r] = states + static_cast<size_t>(i + r) * stride;
    FlashBlock<kFlashRows>(t, sp, tile, rows + i, st, s_buf, pf);
  }
  FlashRest(t, sp, tile, rows + i, nq - i, states + i * stride, stride, s_buf, pf);
}

// Decode: tiles that every row reads whole, read in place. Q K^T transposes eight
// dimensions of kLanes keys at a time in registers from the keys' rows (TransposeRows)
// and runs QkStore's chains on them; the softmax update is SoftmaxTile; the weighted
// sums read the value rows in place, a group of keys at a time, with AvRange's chains.
// So a row's bits are those of FlashBlock on the packed tile, with no copy of K or V,
// and K and V each stream through the core once, in order, each step prefetching the
// rows of the next.
// Key vectors per Q K^T step (but see OneKeyVec): two, so that 2R chains hide the FMA
// latency (docs/PERFORMANCE.md, decode's choices).
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

// Whether a task reads its whole tiles in place: decode-sized row lists, keys in rows of
// whole 8-dimension blocks, values in rows of whole vectors, real keys one apart, keys
// and values of one element type (16-bit ones widened in registers), no score
// modifiers, on a target with a fast block transpose.
// bf16 pairs (FlashPairs) take sixteen dimensions a step.
static inline bool FlashDirect(const FlashTask& t, int64_t step) {
  return S::kBlockTranspose && step == 1 && FlashRows(t) <= kPackValueRows &&
         t.op.k_type == t.op.v_type && t.op.k_dim == 1 && t.op.head_dim % 8 == 0 &&
         (t.op.q_type != kBf16 || t.op.head_dim % 16 == 0) &&
         ValuesDirect(t.op.v_dim, t.op.value_dim) && !t.op.mods.Scores();
}

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
  return !InPlaceRows(paging, tn) && row >= 2 * dim && RowsShareSets(row, bytes);
}
// Whether Q K^T steps take one key vector (sixteen keys) at a time, not kDirectVecs:
// where key rows read in place lie a multiple of 4 KiB apart (vLLM's pools of f32 rows of
// 8 kv heads of 128), so that each step's rows share a few L1 sets. With sixteen rows a
// step rather than 32, fewer of a line's first-half readers evict it before its second
// half is read. Same chains, same bytes. Eight-lane targets already take sixteen rows a
// step.
static inline bool OneKeyVec(int64_t row, int64_t bytes, const Paging* paging, const Tuning& tn) {
  return S::kLanes >= 16 && InPlaceRows(paging, tn) && RowsShareSets(row, bytes);
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
  if (op.k_row < 2 * op.head_dim || !tn.vendor_fetch) return kFetchL1;
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
  float* scratch;        // kDirectKeys * head_dim floats
  // With FlashAmx and FlashPairsV: a group's value rows joined into pairs (kDirectKeys /
  // 2 rows of value_dim pairs).
  float* vbuf = nullptr;
  // Staged keys: with ks set, the key rows of keys [s0, s0 + kDirectKeys) are read from
  // there, head_dim elements apart (StageRows). Value rows are always read in place.
  const float* ks = nullptr;
  int64_t s0 = 0;
  AmxTiles* amx = nullptr;  // the task's tiles (FlashAmx)

  const float* SrcK(int64_t g) const { return KeyRow(*op, first + g); }
  OCTATTN_INLINE const float* K(int64_t g) const {
    return ks ? ElemAt(ks, (g - s0) * op->head_dim, op->k_type) : SrcK(g);
  }
  const float* V(int64_t g) const { return ValueRow(*op, first + g); }
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
    if (!op->paging) return end;  // (staged keys are never paged: StageRows)
    const int64_t size = op->paging->size, r = op->paging->first + first + g;
    return base::MinI(end, g + size - r % size);
  }
  // Row i of the stream and its bytes (none past the stream: null).
  OCTATTN_INLINE const char* Row(int64_t i, int64_t* bytes) const {
    const int64_t n = t1 - t0;
    const float* row;
    if (i < n) {
      *bytes = op->head_dim * DtypeBytes(op->k_type);
      row = SrcK(t0 + i);
    } else if (i < 2 * n) {
      *bytes = op->value_dim * DtypeBytes(op->v_type);
      row = V(t0 + i - n);
    } else if (i - 2 * n < next1 - next0) {
      *bytes = op->head_dim * DtypeBytes(op->k_type);
      row = SrcK(next0 + i - 2 * n);
    } else {
      return nullptr;
    }
    return reinterpret_cast<const char*>(row);
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
  // The cache lines of stream row i, into L1; not at all where DirectFetch says so.
  // (Always inlined: a call whose only effect is a prefetch may be dropped.)
  OCTATTN_INLINE void Fetch(int64_t i) const {
    if (!fetch) return;
    int64_t bytes = 0;
    const char* row = Row(i, &bytes);
    if (row) FetchLines<3>(row, bytes);
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
    if (FlashAmx(t.op)) {
      // AMX (FlashAmx): each step's key pairs transposed into scratch as a packed panel
      // holds them (pair rows of KP keys, after the first half of scratch, which holds
      // staged or copied rows), then AmxQkStore on them: the packed tile's scores.
      float* kp_buf = dt.scratch + kDirectKeys * hd / 2;
      for (int64_t j = j_begin; j < j_end; j += KP) {
        for (int64_t e = 0; e < KP; ++e) dt.template FetchAs<T>(j - dt.t0 + DirectAhead<T>() + e);
        for (int g = 0; g < Vecs; ++g) {
          const int64_t j0 = j + g * L;
          const float* rows = dt.K(j0);
          int64_t row = dt.KStride();
          if (dt.Run(j0, j0 + L) < j0 + L) {
            float* copy = ElemAt(dt.scratch, g * L * hd, T);
            for (int64_t e = 0; e < L; ++e)
              memcpy(ElemAt(copy, e * hd, T), dt.K(j0 + e),
                     static_cast<size_t>(hd * DtypeBytes(T)));
            rows = copy;
            row = hd;
          }
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
      return;
    }
  }
  for (int64_t j = j_begin; j < j_end; j += KP) {
    // Each key vector's rows, a row stride apart: in place, or (paged keys across a block
    // boundary) copied into scratch.
    const float* rows[Vecs];
    int64_t row[Vecs];
    for (int g = 0; g < Vecs; ++g) {
      const int64_t j0 = j + g * L;
      rows[g] = dt.K(j0);
      row[g] = dt.KStride();
      if (dt.Run(j0, j0 + L) < j0 + L) {
        float* copy = ElemAt(dt.scratch, g * L * hd, T);
        for (int64_t e = 0; e < L; ++e)
          memcpy(ElemAt(copy, e * hd, T), dt.K(j0 + e), static_cast<size_t>(hd * DtypeBytes(T)));
        rows[g] = copy;
        row[g] = hd;
      }
    }
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
        // chains in the same order as f32, a third of the shuffles.
        auto steps = [&](auto pairs) {
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
        typename S::V kv[Vecs][8];
        for (int g = 0; g < Vecs; ++g)
          S::template TransposeRows<T>(ElemAt(rows[g], d, T), row[g], kv[g]);
        for (int i = 0; i < 8; ++i)
          for (int r = 0; r < R; ++r) {
            const typename S::V qb = S::Set(q[r][(d + i) * q_dim]);
            for (int g = 0; g < Vecs; ++g) acc[r][g] = S::MulAdd(qb, kv[g][i], acc[r][g]);
          }
      }
      StoreDotBlock<R, Vecs>(acc, out, d0 > 0, d1 == hd, vs);
    }
  }
}

// Adds the value rows of the tile weighted by p[r][0, t1 - t0) to the R states: groups
// of keys, each group's columns a register block at a time (elements of type T).
template <int R, Dtype T>
static inline void DirectValues(const FlashTask& t, const DirectTile& dt, const float* const* p,
                                float* const* st, int64_t g_begin, int64_t g_end) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes), W = kAvVecs * L;
  const int64_t dvp = t.op.value_dim;  // whole vectors (ValuesDirect)
  for (int64_t g0 = g_begin; g0 < g_end; g0 += kDirectKeys) {
    const int64_t g1 = base::MinI(g0 + kDirectKeys, dt.t1);
    if constexpr (T == kBf16 && S::kDotBf16) {
      if (FlashPairsV(t.op)) {
        // bf16 pairs (FlashPairsV): the group's keys two at a time (g0 - t0 and g1 - t0
        // even), each pair's value rows joined by PairRows, one S::DotBf16 per pair with
        // the weight pair (PairWeights: SBufRows rows on from p): FlashBlock's chains on
        // the packed pairs.
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
            continue;
          }
        }
        auto columns = [&](auto vecs, int64_t c0) {
          constexpr int C = decltype(vecs)::value;
          typename S::V acc[R][C];
          for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = S::Load(st[r] + 2 + c0 + c * L);
          for (int64_t k = g0; k < g1; k += 2) {
            if (c0 == 0) {
              dt.template FetchAs<T>(dt.t1 - dt.t0 + k - dt.t0 + DirectAhead<T>());
              dt.template FetchAs<T>(dt.t1 - dt.t0 + k + 1 - dt.t0 + DirectAhead<T>());
            }
            const float *v0 = ElemAt(dt.V(k), c0, T), *v1 = ElemAt(dt.V(k + 1), c0, T);
            typename S::V x[C];
            for (int c = 0; c < C; ++c)
              x[c] = S::PairRows(ElemAt(v0, c * L, T), ElemAt(v1, c * L, T));
            for (int r = 0; r < R; ++r) {
              const typename S::V pb = S::Set(pw[r][(k - dt.t0) / 2]);
              for (int c = 0; c < C; ++c) acc[r][c] = S::DotBf16(pb, x[c], acc[r][c]);
            }
          }
          for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) S::Store(acc[r][c], st[r] + 2 + c0 + c * L);
        };
        int64_t c0 = 0;
        for (; c0 + W <= dvp; c0 += W) columns(std::integral_constant<int, kAvVecs>(), c0);
        for (; c0 < dvp; c0 += L) columns(std::integral_constant<int, 1>(), c0);
        continue;
      }
    }
    for (int64_t a = g0; a < g1;) {
      // Keys [a, b): value rows v_row apart (AvRange's chains); each key's step in the
      // first columns fetches the value row DirectAhead keys on.
      const int64_t b = dt.Run(a, g1);
      const float* v = dt.V(a);
      const float* pa[R];
      for (int r = 0; r < R; ++r) pa[r] = p[r] + (a - dt.t0);
      int64_t c0 = 0, part = 0;
      auto fetch = [&](int64_t j) {
        if (part == 0) dt.template FetchAs<T>(dt.t1 - dt.t0 + j - dt.t0 + DirectAhead<T>());
      };
      if constexpr (T == kBf16 && S::kBf16Pairs && kAvVecs % 2 == 0) {
        // bf16 rows loaded as pairs and split by Bf16Even and Bf16Odd (no widening
        // shuffle): the accumulators hold the even and the odd columns of each pair of
        // vectors, the same chains over the keys.
        for (; c0 + W <= dvp; c0 += W, ++part) {
          typename S::V acc[R][kAvVecs];
          for (int r = 0; r < R; ++r)
            for (int c = 0; c < kAvVecs; c += 2)
              S::Deinterleave(S::Load(st[r] + 2 + c0 + c * L),
                              S::Load(st[r] + 2 + c0 + (c + 1) * L), &acc[r][c], &acc[r][c + 1]);
          const float* vc = ElemAt(v, c0, T);
          for (int64_t k = a; k < b; ++k) {
            fetch(k);
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
        AvRange<R, kAvVecs, decltype(fetch), T>(KeyData{pa, 1, ElemAt(v, c0, T), dt.VStride(), a},
                                                pa, a, b, 1, acc, fetch);
        for (int r = 0; r < R; ++r)
          for (int c = 0; c < kAvVecs; ++c) S::Store(acc[r][c], st[r] + 2 + c0 + c * L);
      }
      for (; c0 < dvp; c0 += L, ++part) {
        typename S::V acc[R][1];
        for (int r = 0; r < R; ++r) acc[r][0] = S::Load(st[r] + 2 + c0);
        AvRange<R, 1, decltype(fetch), T>(KeyData{pa, 1, ElemAt(v, c0, T), dt.VStride(), a}, pa, a,
                                          b, 1, acc, fetch);
        for (int r = 0; r < R; ++r) S::Store(acc[r][0], st[r] + 2 + c0);
      }
      a = b;
    }
  }
}

// Scratch pieces of a task. 16-bit operands: qw holds the task's q rows widened (rows of
// head_dim floats); kw and vw a tile's key and value rows widened (WidenTile).
struct FlashScratch {
  float *run, *cur, *kt, *s_buf, *vpack;
  FlashRow* rows;
  float *qw, *kw, *vw;
};

static inline bool FlashWidens(const FlashTask& t) {
  return t.op.k_type != kF32 || t.op.v_type != kF32;
}

static inline size_t FlashRowsFloats(const FlashTask& t) {
  return Piece2(static_cast<int64_t>(sizeof(FlashRow) / sizeof(float)), FlashRows(t));
}

static size_t FlashTaskScratchFloats(const FlashTask& t) {
  const size_t state = base::SatMul(FlashStateFloats(t.op.value_dim), base::Count(FlashRows(t)));
  size_t n = base::SatMul(2, state);
  n = base::SatAdd(n, Piece2(t.op.head_dim, kTileKeys));
  n = base::SatAdd(n, Piece2(SBufRows(t) * (FlashPairsV(t.op) ? 2 : 1), kTileKeys));
  n = base::SatAdd(n, Piece2(kTileKeys, PadKeys(t.op.value_dim)));
  n = base::SatAdd(n, FlashRowsFloats(t));
  if (t.op.q_type != kF32) n = base::SatAdd(n, Piece2(FlashRows(t), t.op.head_dim));
  if (FlashWidens(t)) {
    n = base::SatAdd(n, Piece2(kTileKeys, t.op.head_dim));
    n = base::SatAdd(n, Piece2(kTileKeys, PadKeys(t.op.value_dim)));
  }
  return n;
}

// A task's scratch: one kv head's, or each of its kv heads' in turn.
static size_t FlashScratchFloats(const FlashTask& t) {
  FlashTask one = t;
  one.kv_heads = 1;
  return base::SatMul(FlashTaskScratchFloats(one), base::Count(t.kv_heads));
}

static inline FlashScratch Carve(const FlashTask& t, float* scratch) {
  const size_t state = FlashStateFloats(t.op.value_dim) * static_cast<size_t>(FlashRows(t));
  FlashScratch f;
  f.run = scratch;
  f.cur = f.run + state;
  f.kt = f.cur + state;
  f.s_buf = f.kt + Piece2(t.op.head_dim, kTileKeys);
  f.vpack = f.s_buf + Piece2(SBufRows(t) * (FlashPairsV(t.op) ? 2 : 1), kTileKeys);
  f.rows = reinterpret_cast<FlashRow*>(f.vpack + Piece2(kTileKeys, PadKeys(t.op.value_dim)));
  f.qw = reinterpret_cast<float*>(f.rows) + FlashRowsFloats(t);
  f.kw = f.qw + (t.op.q_type != kF32 ? Piece2(FlashRows(t), t.op.head_dim) : 0);
  f.vw = f.kw + (FlashWidens(t) ? Piece2(kTileKeys, t.op.head_dim) : 0);
  return f;
}

// V panels of keys [t0, t1) (rows past t1 up to tpad are never read): panel p holds value
// columns [p * kAvPanel, ...) of every key, kAvPanel wide (the last one what is left of
// the padded row), zero past value_dim. Keys below `load` other than the strided columns
// `below` are no row's: not loaded.
static inline void PackValuePanels(const float* v, int64_t v_row, int64_t v_dim, int64_t value_dim,
                                   int64_t t0, int64_t load, int64_t t1, base::StridedColumns below,
                                   int64_t tpad, float* dst) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const int64_t dvp = PadKeys(value_dim);
  // Blocks of 8 source rows, each block's rows read once into every panel: the reads
  // stay in a few lines, the writes in 8 consecutive rows of each panel.
  for (int64_t b0 = t0; b0 < t1; b0 += 8) {
    const int64_t b1 = base::MinI(b0 + 8, t1);
    for (int64_t p0 = 0; p0 < dvp; p0 += kAvPanel) {
      const int64_t w = base::MinI(kAvPanel, dvp - p0), real = base::MinI(w, value_dim - p0);
      for (int64_t j = b0; j < b1; ++j) {
        float* row = dst + p0 * tpad + (j - t0) * w;
        const float* src = v + j * v_row + p0 * v_dim;
        int64_t d = 0;
        if (j >= load || below.Has(j)) {
          if (v_dim == 1)
            for (; d + L <= real; d += L) S::Store(S::Load(src + d), row + d);
          for (; d < real; ++d) row[d] = src[d * v_dim];
        }
        for (; d < w; ++d) row[d] = 0.0f;
      }
    }
  }
}

// V panels of bf16 key pairs (FlashPairsV) from staged bf16 rows (WidenTile: key g at
// row first + g of `v`, rows v_row elements apart, zero padded to whole vectors): panel
// p, pair m holds columns [p * kAvPanel, ...) of keys t0 + 2m and t0 + 2m + 1 (PairRows),
// zero for keys that are not loaded (below `load` and not in `below`) or past t1.
static inline void PackValuePairs(const float* v, int64_t v_row, int64_t value_dim, int64_t first,
                                  int64_t t0, int64_t load, int64_t t1, base::StridedColumns below,
                                  int64_t tpad, float* dst) {
  if constexpr (S::kDotBf16) {  // FlashPairsV: the avx512_bf16 targets only
    constexpr int64_t L = static_cast<int64_t>(S::kLanes);
    const int64_t dvp = PadKeys(value_dim);
    alignas(64) uint16_t zero[S::kLanes] = {};
    auto row = [&](int64_t g) -> const float* {
      if (g >= t1 || (g < load && !below.Has(g))) return reinterpret_cast<const float*>(zero);
      return ElemAt(v, (first + g) * v_row, kBf16);
    };
    for (int64_t m = 0; m < tpad / 2; ++m) {
      const int64_t g = t0 + 2 * m;
      const float *a = row(g), *b = row(g + 1);
      const bool za = a == reinterpret_cast<const float*>(zero),
                 zb = b == reinterpret_cast<const float*>(zero);
      for (int64_t p0 = 0; p0 < dvp; p0 += kAvPanel) {
        const int64_t w = base::MinI(kAvPanel, dvp - p0);
        float* out = dst + p0 * (tpad / 2) + m * w;
        for (int64_t c = 0; c < w; c += L)
          S::Store(S::PairRows(za ? a : ElemAt(a, p0 + c, kBf16), zb ? b : ElemAt(b, p0 + c, kBf16)),
                   out + c);
      }
    }
  }
}

// PackTile for paged keys and values: each row found through the block table, copied
// (the same numbers a contiguous call packs, so the same scores and sums); values in
// rows of the padded width. Eight keys in a row of one block are transposed as a block
// where the target has a fast one, as contiguous keys are.
static inline void PackPagedTile(const FlashTask& t, const FlashScratch& f, FlashTile* tile,
                                 int64_t load, int64_t first, int64_t step, base::StridedColumns below) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const Operands& op = t.op;
  const KeyLayout lay{kQkPanel, kQkPanel * op.head_dim, kQkPanel};
  const int64_t dvp = PadKeys(op.value_dim), hd = op.head_dim;
  const int64_t size = op.paging->size, d8 = hd / 8 * 8;
  auto real = [&](int64_t g) { return g < tile->t1 && (g >= load || below.Has(g)); };
  for (int64_t jj = 0; jj < tile->tpad;) {
    const int64_t g = tile->t0 + jj;
    float* kt = lay.Base(f.kt, jj) + jj;
    if constexpr (S::kBlockTranspose) {
      // Eight real keys, consecutive rows of one block, inside one panel: one transpose.
      const int64_t r = op.paging->first + first + g * step;
      if (op.k_dim == 1 && step == 1 && jj % 8 == 0 && (jj + 7) / kQkPanel == jj / kQkPanel &&
          r % size + 8 <= size && g >= load && g + 8 <= tile->t1) {
        const float* k = KeyRow(op, first + g);
        for (int64_t d = 0; d < d8; d += 8)
          S::Transpose8x8(k + d, op.k_row, kt + d * lay.row, lay.row);
        for (int64_t e = 0; e < 8; ++e)
          for (int64_t d = d8; d < hd; ++d) kt[d * lay.row + e] = k[e * op.k_row + d];
        for (int64_t e = 0; e < 8; ++e) {
          const float* v = ValueRow(op, first + g + e);
          float* vr = f.vpack + (jj + e) * dvp;
          int64_t d = 0;
          if (op.v_dim == 1)
            for (; d + L <= op.value_dim; d += L) S::Store(S::Load(v + d), vr + d);
          for (; d < op.value_dim; ++d) vr[d] = v[d * op.v_dim];
          for (; d < dvp; ++d) vr[d] = 0.0f;
        }
        jj += 8;
        continue;
      }
    }
    float* vr = f.vpack + jj * dvp;
    int64_t d = 0, e = 0;
    if (real(g)) {
      const float* k = KeyRow(op, first + g * step);
      const float* v = ValueRow(op, first + g * step);
      for (; d < hd; ++d) kt[d * lay.row] = k[d * op.k_dim];
      if (op.v_dim == 1)
        for (; e + L <= op.value_dim; e += L) S::Store(S::Load(v + e), vr + e);
      for (; e < op.value_dim; ++e) vr[e] = v[e * op.v_dim];
    }
    for (; d < hd; ++d) kt[d * lay.row] = 0.0f;
    for (; e < dvp; ++e) vr[e] = 0.0f;
    ++jj;
  }
  tile->kt = f.kt;
  tile->v = f.vpack;
  tile->v_row = dvp;
}

// 16-bit keys or values: the rows of keys [t0, t1) of a space whose key g is row first +
// g * step of k and v, those a row may read (as PackTile says), widened into f32 rows of
// scratch, values zero padded to whole vectors: key g at row g - t0. Returns the
// operands of these rows (key g is their row g - t0: first -t0, step 1), whose f32
// tile is the same numbers, so the same bits.
// bf16 pairs (FlashPairs): the key rows are copied as they are, and the operands' keys
// are rows of head_dim / 2 pairs, each read as one f32 (PackTile moves them as such).
static inline Operands WidenTile(const FlashTask& t, const FlashScratch& f, int64_t t0,
                                 int64_t load, int64_t t1, int64_t first, int64_t step,
                                 base::StridedColumns below) {
  const Operands& op = t.op;
  const int64_t hd = op.head_dim, dv = op.value_dim, dvp = PadKeys(dv);
  const bool pairs = S::kDotBf16 && op.q_type == kBf16, pairs_v = pairs && FlashPairsV(op);
  for (int64_t g = t0; g < t1; ++g) {
    float* vr = f.vw + (g - t0) * dvp;
    if (g >= load || below.Has(g)) {
      const float* k = KeyRow(op, first + g * step);
      if (pairs) {
        CopyElems(k, op.k_dim, hd, ElemAt(f.kw, (g - t0) * hd, kBf16));
      } else {
        WidenRowV(k, op.k_dim, op.k_type, hd, f.kw + (g - t0) * hd);
      }
      if (pairs_v) {  // bf16 rows of dvp elements (PackValuePairs)
        vr = ElemAt(f.vw, (g - t0) * dvp, kBf16);
        CopyElems(ValueRow(op, first + g * step), op.v_dim, dv, vr);
        for (int64_t d = dv; d < dvp; ++d) memset(ElemAt(vr, d, kBf16), 0, 2);
        continue;
      }
      WidenRowV(ValueRow(op, first + g * step), op.v_dim, op.v_type, dv, vr);
    }
    for (int64_t d = dv; d < dvp && !pairs_v; ++d) vr[d] = 0.0f;
  }
  Operands w = op;
  w.k = f.kw, w.k_row = hd, w.k_dim = 1, w.k_type = kF32;
  if (pairs) w.k_row = w.head_dim = hd / 2;
  w.v = f.vw, w.v_row = dvp, w.v_dim = 1, w.v_type = pairs_v ? kBf16 : kF32;
  w.paging = nullptr;
  return w;
}

// Packs keys [t0, t1) of a space whose key g is row first + g * step of k and v. Keys
// below `load` other than the strided columns `below` (real keys only) are no row's:
// zeros in the packed K tile, value rows not loaded.
static inline FlashTile PackTile(const FlashTask& t, const FlashScratch& f, int64_t t0,
                                 int64_t load, int64_t t1, int64_t first, int64_t step,
                                 base::StridedColumns below) {
  FlashTile tile;
  tile.t0 = t0;
  tile.t1 = t1;
  tile.tpad = static_cast<int64_t>(base::RoundUp(base::Count(t1 - t0), kQkPanel));
  load = base::MinI(base::MaxI(load, t0), t1);
  if (t.op.paging) {
    PackPagedTile(t, f, &tile, load, first, step, below);
    return tile;
  }
  PackKeysT(t.op.k + first * t.op.k_row, t.op.k_row * step, t.op.k_dim, t0, load, t1, below,
            tile.tpad, t.op.head_dim, f.kt,
            KeyLayout{kQkPanel, kQkPanel * t.op.head_dim, kQkPanel});
  tile.kt = f.kt;
  if (S::kDotBf16 && t.op.v_type == kBf16) {  // bf16 value pairs (WidenTile, FlashPairsV)
    PackValuePairs(t.op.v, t.op.v_row, t.op.value_dim, first, t0, load, t1, below, tile.tpad,
                   f.vpack);
    tile.v = f.vpack;
    tile.v_row = 0;
    tile.pairs = true;
  } else if (FlashRows(t) > kPackValueRows) {
    PackValuePanels(t.op.v + first * t.op.v_row, t.op.v_row * step, t.op.v_dim, t.op.value_dim, t0,
                    load, t1, below, tile.tpad, f.vpack);
    tile.v = f.vpack;
    tile.v_row = 0;
  } else {
    tile.v = PrepareValues(t.op.v + first * t.op.v_row, t.op.v_row * step, t.op.v_dim,
                           t.op.value_dim, t0, load, t1, below, f.vpack, &tile.v_row);
  }
  return tile;
}

// The rows of nh tasks (one, or kv heads sharing key rows) against a direct tile, in
// blocks of 4, 2 and 1 rows: the scores of kDirectKeys keys of every block of every
// head, then the next keys' (the heads' slices of the same key rows are read together,
// and each group of rows by every block while it is in L1); the softmax updates (a row
// with no readable score yet skips the sums, as in FlashBlock); the weighted sums the
// same way. A row's operations do not depend on nh or on its block.
template <Dtype T>
static void FlashDirectTileHeads(const FlashTask* ts, const DirectTile* dts, const FlashScratch* fs,
                                 int64_t nh, int64_t n, float* const* sts, size_t stride) {
  const int64_t t0 = dts[0].t0, t1 = dts[0].t1, dvp = PadKeys(ts[0].op.value_dim);
  auto blocks = [&](auto&& fn) {
    for (int64_t i = 0; i < n;) {
      const int64_t h = n - i >= 4 ? 4 : n - i >= 2 ? 2 : 1;
      fn(i, h);
      i += h;
    }
  };
  const Operands& op0 = ts[0].op;
  const Tuning& tn = ts[0].tuning;
  const bool stage_k = StageRows(op0.k_row, op0.head_dim, DtypeBytes(T), op0.paging, tn);
  const bool one_vec = OneKeyVec(op0.k_row, DtypeBytes(T), op0.paging, tn);
  for (int64_t j = t0; j < t1; j += kDirectKeys)
    for (int64_t x = 0; x < nh; ++x) {
      const int64_t j1 = base::MinI(j + kDirectKeys, t1);
      DirectTile dt = dts[x];
      if (stage_k) dt.Stage(j, j1, fs[0].kt);
      blocks([&](int64_t i, int64_t h) {
        const float* q[4];
        float* s[4];
        for (int64_t r = 0; r < h; ++r) {
          q[r] = fs[x].rows[i + r].q;
          s[r] = fs[x].s_buf + (i + r) * kTileKeys;
        }
        auto scores = [&](auto vecs) {
          constexpr int V = decltype(vecs)::value;
          if (h == 4) DirectScores<4, T, V>(ts[x], dt, q, s, j, j1);
          if (h == 2) DirectScores<2, T, V>(ts[x], dt, q, s, j, j1);
          if (h == 1) DirectScores<1, T, V>(ts[x], dt, q, s, j, j1);
        };
        if (one_vec) {
          scores(std::integral_constant<int, 1>());
        } else {
          scores(std::integral_constant<int, kDirectVecs>());
        }
      });
    }
  bool read[kMaxTaskKvHeads][kPackValueRows];
  for (int64_t x = 0; x < nh; ++x)
    for (int64_t r = 0; r < n; ++r)
      read[x][r] = SoftmaxTile(fs[x].s_buf + r * kTileKeys, 0, t1 - t0,
                               sts[x] + static_cast<size_t>(r) * stride, dvp);
  if constexpr (T == kBf16 && S::kDotBf16) {
    if (FlashPairsV(ts[0].op))  // the weights as bf16 pairs (FlashBlock's rounding)
      for (int64_t x = 0; x < nh; ++x)
        for (int64_t r = 0; r < n; ++r) {
          const float* sr = fs[x].s_buf + r * kTileKeys;
          float* w = PairWeights(ts[x], fs[x].s_buf, r);
          for (int64_t k = 0; k < t1 - t0; k += 2 * static_cast<int64_t>(S::kLanes))
            S::Store(S::NarrowPairs(S::Load(sr + k), S::Load(sr + k + S::kLanes)), w + k / 2);
        }
  }
  for (int64_t g = t0; g < t1; g += kDirectKeys)
    for (int64_t x = 0; x < nh; ++x) {
      const int64_t g1 = base::MinI(g + kDirectKeys, t1);
      const DirectTile& dt = dts[x];
      blocks([&](int64_t i, int64_t h) {
        const float* p[4];
        float* st[4];
        bool all = true;
        for (int64_t r = 0; r < h; ++r) {
          p[r] = fs[x].s_buf + (i + r) * kTileKeys;
          st[r] = sts[x] + static_cast<size_t>(i + r) * stride;
          all &= read[x][i + r];
        }
        if (all && h == 4) return DirectValues<4, T>(ts[x], dt, p, st, g, g1);
        if (all && h == 2) return DirectValues<2, T>(ts[x], dt, p, st, g, g1);
        for (int64_t r = 0; r < h; ++r)
          if (read[x][i + r]) DirectValues<1, T>(ts[x], dt, &p[r], &st[r], g, g1);
      });
    }
}

// One unit (the gathered columns, or chunk c >= 0) of every row into the fresh states
// sts[x] of each of the nh tasks ts[x] (kv heads sharing key rows: the same rows,
// positions and keys; nh is 1 but for those). `next`: the chunk the tasks run after this
// unit, or -1: its first tile is prefetched during this unit's last tile (real keys only).
static void FlashUnit(const FlashTask* ts, const FlashScratch* fs, int64_t nh, int64_t chunk,
                      int64_t next, float* const* sts, AmxTiles* amx) {
  const FlashTask& t = ts[0];
  const FlashScratch& f = fs[0];
  const int64_t nq = t.row_end - t.row_begin, rows = FlashRows(t);
  const size_t stride = FlashStateFloats(t.op.value_dim);
  for (int64_t x = 0; x < nh; ++x) ResetState(sts[x], rows, stride, PadKeys(t.op.value_dim));
  FlashSpace sp;
  sp.amx = amx;
  int64_t begin, end, first, step, load;
  base::StridedColumns below{0, 0};
  if (chunk < 0) {  // gathered strided columns: plain causal in column space
    sp.mask = base::Mask{1, 0, 0, 0, 0};
    sp.kv_len = 0;
    sp.floors = false;
    sp.first = t.op.mask.phase;
    sp.step = t.op.mask.stride;
    for (int64_t x = 0; x < nh; ++x)
      for (int64_t r = 0; r < rows; ++r) fs[x].rows[r].qpos = fs[x].rows[r].strided - 1;
    for (int64_t r = 0; r < rows; ++r) sp.kv_len = base::MaxI(sp.kv_len, f.rows[r].strided);
    begin = 0;
    end = sp.kv_len;
    first = t.op.mask.phase;  // column g is key phase + g * stride
    step = t.op.mask.stride;
    load = 0;
  } else {
    sp.mask = t.op.mask;
    sp.kv_len = t.op.kv_len;
    sp.floors = true;
    sp.first = 0;
    sp.step = 1;
    int64_t floor = f.rows[0].floor;
    for (int64_t x = 0; x < nh; ++x)
      for (int64_t r = 0; r < rows; ++r) {
        fs[x].rows[r].qpos = t.op.mask.q_start + t.row_begin + r % nq;
        floor = base::MinI(floor, fs[x].rows[r].floor);
      }
    begin = base::MaxI(chunk * kChunkKeys, floor);
    end = base::MinI((chunk + 1) * kChunkKeys, FlashKeyLimit(t));
    first = 0;
    step = 1;
    load = base::KeyBegin(t.op.mask, t.op.mask.q_start + t.row_begin);
    below = base::StridedBelow(t.op.mask, t.op.mask.q_start + t.row_begin);
  }
  // With a mask tensor (and no strided columns among the real keys), the tiles outside
  // every row's envelope are neither packed nor read.
  int64_t env_lo = 0, env_hi = end;
  if (chunk >= 0 && t.op.mods.mask &&
      !(t.op.mask.causal && t.op.mask.window > 0 && t.op.mask.stride > 0)) {
    env_lo = end;
    env_hi = 0;
    for (int64_t r = 0; r < rows; ++r)
      if (f.rows[r].env_lo < f.rows[r].env_hi) {
        env_lo = base::MinI(env_lo, f.rows[r].env_lo);
        env_hi = base::MaxI(env_hi, f.rows[r].env_hi);
      }
  }
  // Rows are in order of position, so the first and last rows bound what the task reads.
  const int64_t qfirst = f.rows[0].qpos, qlast = f.rows[nq - 1].qpos;
  // The first tile a row reads at or after t0, or end.
  auto next_tile = [&](int64_t t0) {
    for (; t0 < end; t0 = (t0 / kTileKeys + 1) * kTileKeys) {
      const int64_t t1 = base::MinI((t0 / kTileKeys + 1) * kTileKeys, end);
      if (chunk < 0 ||
          (t1 > env_lo && t0 < env_hi &&
           base::Classify(sp.mask, qfirst, qlast + 1, t0, t1, sp.kv_len) != base::kTileEmpty))
        break;  // else no row reads this tile: not even packed
    }
    return t0;
  };
  FlashPrefetch pfs[kMaxTaskKvHeads];
  const int64_t kb = DtypeBytes(t.op.k_type), vb = DtypeBytes(t.op.v_type);
  for (int64_t x = 0; x < nh; ++x) {
    FlashPrefetch& pf = pfs[x];
    const Operands& op = ts[x].op;
    if (op.k_dim == 1 && op.v_dim == 1 && op.paging) {  // steps counted in keys
      pf.paged = &op;
      pf.first = first;
      pf.k_step = pf.v_step = step;
      pf.k_bytes = op.head_dim * kb;
      pf.v_bytes = op.value_dim * vb;
    } else if (op.k_dim == 1 && op.v_dim == 1) {
      pf.k = reinterpret_cast<const char*>(ElemAt(op.k, first * op.k_row, op.k_type));
      pf.v = reinterpret_cast<const char*>(ElemAt(op.v, first * op.v_row, op.v_type));
      pf.k_step = op.k_row * step * kb;
      pf.v_step = op.v_row * step * vb;
      pf.k_bytes = op.head_dim * kb;
      pf.v_bytes = op.value_dim * vb;
    }
  }
  // The keys to fetch while the tile before t0 (the next tile read) is computed: that
  // tile's, or after the unit's last tile the next chunk's first.
  auto upcoming = [&](int64_t t0, int64_t* a, int64_t* b) {
    *a = base::MaxI(t0, load);
    *b = base::MinI((t0 / kTileKeys + 1) * kTileKeys, end);
    if (t0 >= end && chunk >= 0 && next >= 0) {
      *a = base::MaxI(base::MaxI(next * kChunkKeys, begin), load);
      *b = base::MinI((*a / kTileKeys + 1) * kTileKeys, FlashKeyLimit(t));
    }
  };
  const bool direct = chunk >= 0 && FlashDirect(t, step);
  for (int64_t t0 = next_tile(begin); t0 < end;) {
    const int64_t t1 = base::MinI((t0 / kTileKeys + 1) * kTileKeys, end);
    if (direct && t1 - t0 == kTileKeys &&
        base::Classify(sp.mask, qfirst, qlast + 1, t0, t1, sp.kv_len) == base::kTileFull) {
      DirectTile dts[kMaxTaskKvHeads];
      const int64_t t_next = next_tile(t1);
      const FetchTo to = DirectFetch(t.op, t.tuning);
      for (int64_t x = 0; x < nh; ++x) {
        dts[x] = DirectTile{&ts[x].op, first, t0, t1, 0, 0, fs[x].kt};
        dts[x].amx = amx;
        dts[x].vbuf = fs[x].vpack;
        dts[x].fetch = to != kFetchNone;
        dts[x].fetch_l2 = to == kFetchL2;
        upcoming(t_next, &dts[x].next0, &dts[x].next1);
        if (WholeRows(t.op, nh)) {
          dts[x].heads = dts;
          dts[x].lg = __builtin_ctzll(static_cast<uint64_t>(nh));
          dts[x].row0 = x * (kDirectKeys / nh);
        }
      }
      t0 = t_next;
      if (t.op.k_type == kBf16) {
        FlashDirectTileHeads<kBf16>(ts, dts, fs, nh, rows, sts, stride);
      } else if (t.op.k_type == kF16) {
        FlashDirectTileHeads<kF16>(ts, dts, fs, nh, rows, sts, stride);
      } else {
        FlashDirectTileHeads<kF32>(ts, dts, fs, nh, rows, sts, stride);
      }
      continue;
    }
    const int64_t t_next = next_tile(t1);
    for (int64_t x = 0; x < nh; ++x) {
      // 16-bit keys or values: the tile of their widened rows.
      FlashTask wide;
      const FlashTask* tt = &ts[x];
      int64_t tfirst = first, tstep = step;
      if (FlashWidens(ts[x])) {
        wide = ts[x];
        wide.op = WidenTile(ts[x], fs[x], t0, base::MinI(base::MaxI(load, t0), t1), t1, first, step,
                            below);
        tt = &wide;
        tfirst = -t0;
        tstep = 1;
      }
      const FlashTile tile = PackTile(*tt, fs[x], t0, load, t1, tfirst, tstep, below);
      upcoming(t_next, &pfs[x].next, &pfs[x].end);
      // All rows of all heads in one list: decode blocks the heads of a GQA group together.
      FlashHeadTile(*tt, sp, tile, fs[x].rows, rows, sts[x], stride, fs[x].s_buf, &pfs[x]);
    }
    t0 = t_next;
  }
}

// The task's rows (q widened if 16-bit) into f.rows; returns the task as the units read
// it (a widened q: f32 rows of head_dim floats).
static FlashTask PrepareRows(const FlashTask& task, const FlashScratch& f) {
  const int64_t rows = FlashRows(task), nq = task.row_end - task.row_begin;
  const int64_t hd = task.op.head_dim;
  // A 16-bit q: the task's rows widened once, read as rows of head_dim floats; with bf16
  // pairs, copied as they are (q_type stays bf16: the units' sign of pairs).
  const bool pairs = FlashPairs(task.op);
  const bool wide_q = task.op.q_type != kF32;
  FlashTask t = task;
  if (wide_q) t.op.q_dim = 1, t.op.q_type = pairs ? kBf16 : kF32;
  const bool has_strided = t.op.mask.causal && t.op.mask.window > 0 && t.op.mask.stride > 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = r / nq, i = t.row_begin + r % nq;
    FlashRow& row = f.rows[r];
    row.q = ElemAt(task.op.q, h * task.op.q_head + i * task.op.q_row, task.op.q_type);
    if (pairs) {
      float* qr = ElemAt(f.qw, r * hd, kBf16);
      CopyElems(row.q, task.op.q_dim, hd, qr);
      row.q = qr;
    } else if (wide_q) {
      WidenRowV(row.q, task.op.q_dim, task.op.q_type, hd, f.qw + r * hd);
      row.q = f.qw + r * hd;
    }
    const int64_t qpos = t.op.mask.q_start + i;
    const base::RowKeys k = base::KeysOf(t.op.mask, qpos, t.op.kv_len);
    row.floor = k.lo / kTileKeys * kTileKeys;
    // With chunks, a row's strided columns lie in its chunk: read among the real keys
    // (from the chunk's tile on), not gathered.
    if (has_strided && t.op.mask.chunk > 0)
      row.floor = base::MinI(row.floor, k.strided_begin / kTileKeys * kTileKeys);
    row.strided = has_strided && t.op.mask.chunk <= 0
                      ? base::StridedCount(t.op.mask.stride, t.op.mask.phase,
                                           base::MinI(row.floor, k.strided_end))
                      : 0;
    row.mod = RowModsOf(t.op.mods, h, i, qpos);
    row.env_lo = k.lo;
    row.env_hi = k.hi;
    if (row.mod.mask && r + kEnvelopeAhead < rows) {
      // The mask rows' ends are read backward, each from a new place: fetched a few rows
      // ahead, so that the lines arrive before their row's scan.
      const int64_t ra = r + kEnvelopeAhead, ha = ra / nq, ia = t.row_begin + ra % nq;
      const int64_t end = base::KeysOf(t.op.mask, t.op.mask.q_start + ia, t.op.kv_len).hi;
      const uint8_t* m = t.op.mods.mask + ha * t.op.mods.mask_head + ia * t.op.mods.mask_row;
      if (end > 0) __builtin_prefetch(m + (end - 1) * t.op.mods.mask_col, 0, 0);
      if (end > 64) __builtin_prefetch(m + (end - 65) * t.op.mods.mask_col, 0, 0);
    }
    if (row.mod.mask) {
      const KeySpan env = MaskEnvelope(row.mod.mask, row.mod.mask_col, k.lo, k.hi);
      row.env_lo = env.begin;
      row.env_hi = env.end;
    }
  }
  return t;
}

// The final states of a task's rows: its partial, or o and lse.
static void FinishRows(const FlashTask& t, const FlashScratch& f) {
  const int64_t rows = FlashRows(t), dvp = PadKeys(t.op.value_dim), nq = t.row_end - t.row_begin;
  const size_t stride = FlashStateFloats(t.op.value_dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* st = f.run + r * stride;
    if (t.partial) {
      for (size_t d = 0; d < stride; ++d) t.partial[r * stride + d] = st[d];
      continue;
    }
    const int64_t h = r / nq, i = t.row_begin + r % nq;
    FinishRow(st, dvp, t.op.value_dim,
              ElemAt(t.op.o, h * t.op.o_head + i * t.op.o_row, t.op.o_type), t.op.o_dim,
              t.op.o_type, t.op.lse ? t.op.lse + h * t.op.lse_head + i * t.op.lse_row : nullptr,
              f.cur, t.op.mods.sinks ? t.op.mods.sinks[h] : -__builtin_inff());
  }
}

static void FlashTaskRun(const FlashTask& task, float* scratch) {
  const int64_t nh = base::MinI(base::MaxI(task.kv_heads, 1), kMaxTaskKvHeads);
  const int64_t rows = FlashRows(task), dvp = PadKeys(task.op.value_dim);
  const size_t stride = FlashStateFloats(task.op.value_dim);
  FlashTask one = task;
  one.kv_heads = 1;
  const size_t piece = FlashTaskScratchFloats(one);
  // Each kv head's task, scratch and rows.
  FlashTask ts[kMaxTaskKvHeads];
  FlashScratch fs[kMaxTaskKvHeads];
  for (int64_t x = 0; x < nh; ++x) {
    FlashTask tx = one;
    tx.op.q = ElemAt(task.op.q, x * task.q_kv, task.op.q_type);
    tx.op.k = ElemAt(task.op.k, x * task.k_kv, task.op.k_type);
    tx.op.v = ElemAt(task.op.v, x * task.v_kv, task.op.v_type);
    tx.op.o = ElemAt(task.op.o, x * task.o_kv, task.op.o_type);
    if (task.op.lse) tx.op.lse = task.op.lse + x * task.lse_kv;
    if (task.partial) tx.partial = task.partial + x * task.partial_kv;
    fs[x] = Carve(tx, scratch + static_cast<size_t>(x) * piece);
    ts[x] = PrepareRows(tx, fs[x]);
  }
  const bool has_strided =
      task.op.mask.causal && task.op.mask.window > 0 && task.op.mask.stride > 0;
  bool first = true;
  AmxTiles amx;
  auto unit = [&](int64_t chunk) {
    const int64_t next = chunk >= 0 && chunk + 1 < task.chunk_end ? chunk + 1 : -1;
    float* sts[kMaxTaskKvHeads];
    for (int64_t x = 0; x < nh; ++x) sts[x] = first ? fs[x].run : fs[x].cur;
    FlashUnit(ts, fs, nh, chunk, next, sts, &amx);
    if (!first)
      for (int64_t x = 0; x < nh; ++x)
        for (int64_t r = 0; r < rows; ++r)
          MergeState(fs[x].run + r * stride, fs[x].cur + r * stride, dvp);
    first = false;
  };
  if (task.gathered && has_strided) unit(-1);
  for (int64_t c = task.chunk_begin; c < task.chunk_end; ++c) unit(c);
  amx.Release();
  for (int64_t x = 0; x < nh; ++x) {
    if (first) ResetState(fs[x].run, rows, stride, dvp);
    FinishRows(ts[x], fs[x]);
  }
}

// Merges the unit partials of a task's rows in unit order and writes o and lse.
// `scratch`: FlashStateFloats + PadKeys(value_dim) floats.
static void FlashMerge(const FlashTask& t, const float* partials, int64_t units, float* scratch) {
  const int64_t rows = FlashRows(t), dvp = PadKeys(t.op.value_dim), nq = t.row_end - t.row_begin;
  const size_t stride = FlashStateFloats(t.op.value_dim);
  // The first partial is copied, the next ones merged: as FlashTaskRun does in one task.
  float* run = scratch;
  float* tmp = run + stride;
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t d = 0; d < stride; ++d) run[d] = partials[r * stride + d];
    for (int64_t c = 1; c < units; ++c)
      MergeState(run, partials + (c * rows + r) * static_cast<int64_t>(stride), dvp);
    const int64_t h = r / nq, i = t.row_begin + r % nq;
    FinishRow(run, dvp, t.op.value_dim,
              ElemAt(t.op.o, h * t.op.o_head + i * t.op.o_row, t.op.o_type), t.op.o_dim,
              t.op.o_type, t.op.lse ? t.op.lse + h * t.op.lse_head + i * t.op.lse_row : nullptr,
              tmp, t.op.mods.sinks ? t.op.mods.sinks[h] : -__builtin_inff());
  }
}
