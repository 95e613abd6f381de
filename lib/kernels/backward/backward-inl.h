// The backward of attention (FlashAttention-2's): dq, dk, dv (and the gradients of a bias
// tensor and of the sinks) of one (batch, kv head) task, recomputing the probabilities
// tile by tile from q, k and the forward's lse, never a [q_len, kv_len] buffer. Included
// inside a per-target namespace that defines the SIMD vocabulary S, after the common and
// mods families.
//
// Order, the same for any thread count and any strides: key tiles in key order; a tile's
// dk and dv accumulate over the group's heads in order and, within a head, its query
// tiles in row order, each tile's rows in order; a row's dq accumulates over the key
// tiles in key order, in the caller's dq (zeroed first), each tile's keys in order.
//
// A pair that a row may not read reaches no gradient: query tiles that read nothing of
// a key tile are skipped, and in a tile where some pair is masked (the mask's edges, a
// mask tensor or a -inf bias, a row with no readable key) every pair is checked and the
// masked ones are skipped, never multiplied by 0 (0 * NaN is NaN).

constexpr int64_t kBwdKeys = 64;  // keys per tile
constexpr int64_t kBwdRows = 64;  // query rows per tile
// The product micro-kernel: kBwdR rows of kBwdC vectors of accumulators (12 of 16 or 24
// of 32 registers).
constexpr int kBwdR = 6;
constexpr int kBwdC = S::kRegs >= 32 ? 4 : 2;

// c[m][n..] += sum over t of a[m * am + t * at] * b[t * ldb + n..]: R rows, C vectors,
// one FMA chain per accumulator in t order. P (S::kDotBf16): a's and b's elements are bf16
// pairs in 32 bits (t counts pairs), each step one S::DotBf16. Fresh: c is written, its
// chains started at 0 (the bits of adding to a zeroed c).
template <int R, int C, bool P = false>
static inline void BwdBlock(const float* a, int64_t am, int64_t at, const float* b, int64_t ldb,
                            float* c, int64_t ldc, int64_t t_len, bool fresh) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  using V = typename S::V;
  V acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < C; ++k) acc[r][k] = fresh ? S::Zero() : S::Load(c + r * ldc + k * L);
  for (int64_t t = 0; t < t_len; ++t) {
    V bv[C];
    for (int k = 0; k < C; ++k) bv[k] = S::Load(b + t * ldb + k * L);
    for (int r = 0; r < R; ++r) {
      const V av = S::Set(a[r * am + t * at]);
      for (int k = 0; k < C; ++k) {
        if constexpr (P) {
          acc[r][k] = S::DotBf16(av, bv[k], acc[r][k]);
        } else {
          acc[r][k] = S::MulAdd(av, bv[k], acc[r][k]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < C; ++k) S::Store(acc[r][k], c + r * ldc + k * L);
}

// Rows in blocks of kBwdR, the rest in blocks of 4, 2 and 1 (a row's bytes do not depend
// on its block: fewer block heights keep the build small).
template <int C, bool P>
static inline void BwdCols(const float* a, int64_t am, int64_t at, const float* b, int64_t ldb,
                           float* c, int64_t ldc, int64_t m_len, int64_t t_len, bool fresh) {
  int64_t m = 0;
  for (; m + kBwdR <= m_len; m += kBwdR)
    BwdBlock<kBwdR, C, P>(a + m * am, am, at, b, ldb, c + m * ldc, ldc, t_len, fresh);
  while (m < m_len) {
    const int64_t h = m_len - m >= 4 ? 4 : m_len - m >= 2 ? 2 : 1;
    if (h == 4) BwdBlock<4, C, P>(a + m * am, am, at, b, ldb, c + m * ldc, ldc, t_len, fresh);
    if (h == 2) BwdBlock<2, C, P>(a + m * am, am, at, b, ldb, c + m * ldc, ldc, t_len, fresh);
    if (h == 1) BwdBlock<1, C, P>(a + m * am, am, at, b, ldb, c + m * ldc, ldc, t_len, fresh);
    m += h;
  }
}

// c[m][n] += sum_t a[m * am + t * at] * b[t * ldb + n] for m < m_len, t < t_len and
// n < n_len (whole vectors); P: on bf16 pairs (BwdBlock); fresh: c = the sum (BwdBlock).
template <bool P = false>
static void BwdProduct(const float* a, int64_t am, int64_t at, const float* b, int64_t ldb,
                       float* c, int64_t ldc, int64_t m_len, int64_t n_len, int64_t t_len,
                       bool fresh = false) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  int64_t n = 0;
  for (; n + kBwdC * L <= n_len; n += kBwdC * L)
    BwdCols<kBwdC, P>(a, am, at, b + n, ldb, c + n, ldc, m_len, t_len, fresh);
  for (; n < n_len; n += L) BwdCols<1, P>(a, am, at, b + n, ldb, c + n, ldc, m_len, t_len, fresh);
}

// BwdProduct over the pairs (m, t) with ok[m * om + t * ot] != 0 only: the same
// FMAs in the same order, the others skipped. Each row's read t are listed first, then
// its columns accumulate in registers, C vectors at a time, over them (t_len at most
// kBwdRows or kBwdKeys).
template <int C>
static OCTATTN_INLINE void BwdRowMasked(const float* a, int64_t at, const int32_t* ts, int64_t n_ts,
                                        const float* b, int64_t ldb, float* cm, int64_t n) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  typename S::V acc[C];
  for (int k = 0; k < C; ++k) acc[k] = S::Load(cm + n + k * L);
  for (int64_t x = 0; x < n_ts; ++x) {
    const int64_t t = ts[x];
    const typename S::V av = S::Set(a[t * at]);
    const float* bt = b + t * ldb + n;
    for (int k = 0; k < C; ++k) acc[k] = S::MulAdd(av, S::Load(bt + k * L), acc[k]);
  }
  for (int k = 0; k < C; ++k) S::Store(acc[k], cm + n + k * L);
}
static void BwdProductMasked(const float* a, int64_t am, int64_t at, const uint8_t* ok, int64_t om,
                             int64_t ot, const float* b, int64_t ldb, float* c, int64_t ldc,
                             int64_t m_len, int64_t n_len, int64_t t_len) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  static_assert(kBwdRows <= 64 && kBwdKeys <= 64, "a row's read t fit the list");
  int32_t ts[64];
  for (int64_t m = 0; m < m_len; ++m) {
    int64_t n_ts = 0;
    for (int64_t t = 0; t < t_len; ++t) {
      ts[n_ts] = static_cast<int32_t>(t);
      n_ts += ok[m * om + t * ot] != 0;
    }
    if (n_ts == 0) continue;
    const float* am_row = a + m * am;
    float* cm = c + m * ldc;
    int64_t n = 0;
    for (; n + kBwdC * L <= n_len; n += kBwdC * L)
      BwdRowMasked<kBwdC>(am_row, at, ts, n_ts, b, ldb, cm, n);
    for (; n < n_len; n += L) BwdRowMasked<1>(am_row, at, ts, n_ts, b, ldb, cm, n);
  }
}

// On the S::kDotBf16 targets, which of the backward's products over a tile's dimensions
// run on bf16 pairs (S::DotBf16, as the forward's q . k does): q . k with bf16 q and k,
// dout . v with bf16 dout and v, an even number of dimensions each. The products that
// sum over rows or keys (dv, dk, dq) stay f32 on the widened values but where
// BwdPairsAll.
static inline bool BwdPairsQk(const BackwardTask& t) {
  return S::kDotBf16 && t.op.q_type == kBf16 && t.op.k_type == kBf16 && t.op.head_dim % 2 == 0;
}
static inline bool BwdPairsDv(const BackwardTask& t) {
  return S::kDotBf16 && t.do_type == kBf16 && t.op.v_type == kBf16 && t.op.value_dim % 2 == 0;
}
// With both, a tile whose every pair is read also runs its sums over rows and keys (dv,
// dk, dq) on pairs: the probabilities and the scores' gradient rounded to bf16 (as the
// forward's weights are), pairs of rows and of keys. (Sized from q, k and v alone: the
// schedule sizes a task from the forward call's dtypes.)
static inline bool BwdPairsSized(const BackwardTask& t) {
  return S::kDotBf16 && t.op.q_type == kBf16 && t.op.k_type == kBf16 && t.op.v_type == kBf16 &&
         t.op.head_dim % 2 == 0 && t.op.value_dim % 2 == 0;
}
static inline bool BwdPairsAll(const BackwardTask& t) { return BwdPairsQk(t) && BwdPairsDv(t); }

// Scratch pieces of a task.
struct BwdScratch {
  float *kt, *vt;   // K and V tile transposed: [head_dim][kp], [value_dim][kp] (pairs:
                    // [head_dim / 2][kp] pair words, BwdPairsQk; v's likewise, BwdPairsDv)
  float *qw, *dow;  // pairs: the query tile's q and dout rows as pair words [kBwdRows][dp]
  // BwdPairsAll: p and the scores' gradient as pairs of rows [kBwdRows / 2][kp] (pt, gt)
  // and of keys [kBwdRows][kp / 2] (gk); q and dout as pairs of rows [kBwdRows / 2][dp]
  // (q2, do2); the key tile's bf16 rows [kBwdKeys][dp] (kb) and pairs of them
  // [kBwdKeys / 2][dp] (k2).
  float *pt, *gt, *gk, *q2, *do2, *kb, *k2;
  float* kr;        // K tile rows [kBwdKeys][dp]
  float *dk, *dv;   // the tile's accumulators [kBwdKeys][dp], [kBwdKeys][dvp]
  float *qp, *dop;  // query tile rows [kBwdRows][dp], output gradient rows [kBwdRows][dvp]
  float* dq;        // the query tile's dq rows [kBwdRows][dp]
  float *s, *g;     // scores then probabilities, dP then the scores' gradient [kBwdRows][kp]
  float* row;       // one row's temporaries (2 * dvp or kp floats)
  float *lse, *dd;  // per query row: lse, do . o
  // Key lists (BackwardListedRun): each row of the query tile's listed keys (ListedKeys,
  // ascending; row r's at keys + r * cap), their counts, the first not yet passed
  // (cursor), ListedKeys' bitmap.
  int32_t* keys;
  int64_t *counts, *cursor;
  uint64_t* bits;
  int64_t cap;
  float* vr;    // key lists: the V tile's rows [kBwdKeys][dvp] (BwdSparseRow)
  uint8_t* ok;  // [kBwdRows][kp]: whether the pair is read
};

static inline int64_t BwdKp() { return PadKeys(kBwdKeys); }

static size_t BackwardScratchFloats(const BackwardTask& t) {
  const int64_t dp = PadKeys(t.op.head_dim), dvp = PadKeys(t.op.value_dim), kp = BwdKp();
  size_t n = Piece2(t.op.head_dim, kp);
  n = base::SatAdd(n, Piece2(t.op.value_dim, kp));
  n = base::SatAdd(n, base::SatMul(2, Piece2(kBwdKeys, dp)));
  n = base::SatAdd(n, Piece2(kBwdKeys, dvp));
  n = base::SatAdd(n, base::SatMul(2, Piece2(kBwdRows, dp)));
  n = base::SatAdd(n, Piece2(kBwdRows, dvp));
  n = base::SatAdd(n, base::SatMul(2, Piece2(kBwdRows, kp)));
  n = base::SatAdd(n, Piece(base::Count(base::MaxI(2 * dvp, kp))));  // dvp < 2^61
  n = base::SatAdd(n, base::SatMul(2, Piece(kBwdRows)));
  // (The pairs' rows whatever dout's dtype: the schedule sizes a task from the forward
  // call's dtypes.)
  if (BwdPairsQk(t)) n = base::SatAdd(n, Piece2(kBwdRows, dp));
  if (S::kDotBf16 && t.op.v_type == kBf16) n = base::SatAdd(n, Piece2(kBwdRows, dvp));
  if (BwdPairsSized(t)) {
    n = base::SatAdd(n, base::SatMul(2, Piece2(kBwdRows / 2, kp)));
    n = base::SatAdd(n, Piece2(kBwdRows, kp / 2));
    n = base::SatAdd(n, Piece2(kBwdRows / 2, dp));
    n = base::SatAdd(n, Piece2(kBwdRows / 2, dvp));
    n = base::SatAdd(n, Piece2(kBwdKeys, dp));
    n = base::SatAdd(n, Piece2(kBwdKeys / 2, dp));
  }
  const int64_t cap = t.op.mods.ListCapacity();  // key lists: a query tile's
  if (cap > 0) {
    n = base::SatAdd(n, Piece2(kBwdRows, cap));
    n = base::SatAdd(n, base::SatMul(2, Piece(2 * kBwdRows)));
    n = base::SatAdd(n, Piece(base::SatMul(base::Count(ListBitWords(cap)), 2)));
    n = base::SatAdd(n, Piece2(kBwdKeys, dvp));
  }
  return base::SatAdd(n, Piece(base::Count(kBwdRows * kp / 4 + 1)));
}

static inline BwdScratch BwdCarve(const BackwardTask& t, float* p) {
  const int64_t dp = PadKeys(t.op.head_dim), dvp = PadKeys(t.op.value_dim), kp = BwdKp();
  BwdScratch f;
  auto take = [&](size_t floats) {
    float* r = p;
    p += floats;
    return r;
  };
  f.kt = take(Piece2(t.op.head_dim, kp));
  f.vt = take(Piece2(t.op.value_dim, kp));
  f.kr = take(Piece2(kBwdKeys, dp));
  f.dk = take(Piece2(kBwdKeys, dp));
  f.dv = take(Piece2(kBwdKeys, dvp));
  f.qp = take(Piece2(kBwdRows, dp));
  f.dq = take(Piece2(kBwdRows, dp));
  f.dop = take(Piece2(kBwdRows, dvp));
  f.s = take(Piece2(kBwdRows, kp));
  f.g = take(Piece2(kBwdRows, kp));
  f.row = take(Piece(base::Count(base::MaxI(2 * dvp, kp))));
  f.lse = take(Piece(kBwdRows));
  f.dd = take(Piece(kBwdRows));
  f.qw = BwdPairsQk(t) ? take(Piece2(kBwdRows, dp)) : nullptr;
  f.dow = BwdPairsDv(t) ? take(Piece2(kBwdRows, dvp)) : nullptr;
  f.pt = f.gt = f.gk = f.q2 = f.do2 = f.kb = f.k2 = nullptr;
  if (BwdPairsAll(t)) {
    f.pt = take(Piece2(kBwdRows / 2, kp));
    f.gt = take(Piece2(kBwdRows / 2, kp));
    f.gk = take(Piece2(kBwdRows, kp / 2));
    f.q2 = take(Piece2(kBwdRows / 2, dp));
    f.do2 = take(Piece2(kBwdRows / 2, dvp));
    f.kb = take(Piece2(kBwdKeys, dp));
    f.k2 = take(Piece2(kBwdKeys / 2, dp));
  }
  f.cap = t.op.mods.ListCapacity();
  f.keys = nullptr;
  f.counts = f.cursor = nullptr;
  f.bits = nullptr;
  f.vr = nullptr;
  if (f.cap > 0) {
    f.keys = reinterpret_cast<int32_t*>(take(Piece2(kBwdRows, f.cap)));
    f.counts = reinterpret_cast<int64_t*>(take(Piece(2 * kBwdRows)));
    f.cursor = reinterpret_cast<int64_t*>(take(Piece(2 * kBwdRows)));
    f.bits =
        reinterpret_cast<uint64_t*>(take(Piece(base::SatMul(base::Count(ListBitWords(f.cap)), 2))));
    f.vr = take(Piece2(kBwdKeys, dvp));
  }
  f.ok = reinterpret_cast<uint8_t*>(p);
  return f;
}

// n elements of a strided row of dtype t into dst (16-bit ones widened: exact), zero
// padded to `pad`.
static inline void BwdPackRow(const float* src, int64_t step, int64_t n, int64_t pad, float* dst,
                              Dtype t = kF32) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  int64_t d = 0;
  if (t != kF32) {
    WidenRowV(src, step, t, n, dst);
    d = n;
  } else if (step == 1) {
    for (; d + L <= n; d += L) S::Store(S::Load(src + d), dst + d);
  }
  for (; d < n; ++d) dst[d] = src[d * step];
  for (; d < pad; ++d) dst[d] = 0.0f;
}

// n (even) bf16 elements of a row, `step` elements apart, as n / 2 pair words (elements 2t
// and 2t + 1 of the row, as the forward's pairs), word t at dst[t * dst_step].
static inline void BwdPairWords(const float* src, int64_t step, int64_t n, float* dst,
                                int64_t dst_step) {
  if (step == 1 && dst_step == 1) {  // a contiguous row's elements are its words
    memcpy(dst, src, static_cast<size_t>(n) * 2);
    return;
  }
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  for (int64_t d = 0; d < n; d += 2) {
    const uint32_t w = s[d * step] | static_cast<uint32_t>(s[(d + 1) * step]) << 16;
    memcpy(dst + d / 2 * dst_step, &w, sizeof(w));
  }
}

// a . b over n floats (whole vectors: padded rows), lane-wise in order, then summed.
static inline float BwdDot(const float* a, const float* b, int64_t n) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  typename S::V acc = S::Zero();
  for (int64_t d = 0; d < n; d += L) acc = S::MulAdd(S::Load(a + d), S::Load(b + d), acc);
  return S::ReduceSum(acc);
}

// do . o of one row in f32 (o of dtype o_type): the padded rows multiplied lane-wise in
// order, then summed.
static inline float BwdRowDot(const float* dop, const float* o, int64_t o_dim, int64_t value_dim,
                              float* tmp, Dtype o_type) {
  const int64_t dvp = PadKeys(value_dim);
  if (o_type == kF32 && o_dim == 1 && dvp == value_dim) return BwdDot(dop, o, dvp);  // in place
  BwdPackRow(o, o_dim, value_dim, dvp, tmp, o_type);
  return BwdDot(dop, tmp, dvp);
}

// dlse of row i of head h (0 without dlse).
static inline float BwdDlse(const BackwardTask& t, int64_t h, int64_t i) {
  return t.dlse ? t.dlse[h * t.dlse_head + i * t.dlse_row] : 0.0f;
}

// Whether row i (at qpos) of head h reads key j: the analytic mask, the mask tensor, a
// bias of -inf (the tensors read only where the mask before them allows the pair).
// `kind`: the kind of j's block in the row's block lists.
static inline bool BwdPairRead(const base::Mask& mask, const RowMods& m, int64_t qpos, int64_t j,
                               base::BlockKind kind) {
  if (!base::Allowed(mask, qpos, j) ||
      !base::RowKeeps(m.blocks, kind, m.keep, m.keep_col, m.keep_bits, m.keep_from, j))
    return false;
  if (m.bias && m.bias[j * m.bias_col] == -__builtin_inff()) return false;
  return true;
}

// Rows [i0, i0 + nq) of head h against keys [j0, j0 + nk), their products with the key
// and value tiles in f.s and f.g: the probabilities into f.s, the scores' gradient
// (times scale) into f.g, and dbias where the call asks for it (the pairs read only,
// unless `every`).
static OCTATTN_INLINE void BwdTileGradients(const BackwardTask& t, const BwdScratch& f, int64_t h,
                                            int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                                            bool every) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  using V = typename S::V;
  const Operands& op = t.op;
  const int64_t kp = BwdKp();
  const V scale = S::Set(op.scale), one = S::Set(1.0f);
  const V iota = S::Load(kIota);
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t i = i0 + r, qpos = op.mask.q_start + i;
    const RowMods m = RowModsOf(op.mods, h, i, qpos);
    const V lse = S::Set(f.lse[r]), dd = S::Set(f.dd[r]);
    const V cap = S::Set(m.cap), inv_cap = S::Set(m.inv_cap), slope = S::Set(m.slope);
    float* s = f.s + r * kp;
    float* g = f.g + r * kp;
    alignas(64) float bias[S::kLanes];
    for (int64_t j = 0; j < kp; j += L) {
      V x = S::Mul(S::Load(s + j), scale);
      V th = S::Zero();
      if (m.cap > 0.0f) {
        th = S::Tanh(S::Mul(x, inv_cap));
        x = S::Mul(th, cap);
      }
      if (m.alibi) x = S::MulAdd(slope, S::Add(S::Set(static_cast<float>(j0 + j - qpos)), iota), x);
      if (m.bias) {
        for (int64_t l = 0; l < L; ++l)
          bias[l] = j + l < nk ? m.bias[(j0 + j + l) * m.bias_col] : 0.0f;
        x = S::Add(x, S::Load(bias));
      }
      const V p = S::Exp(S::Sub(x, lse));
      V ds = S::Mul(p, S::Sub(S::Load(g + j), dd));
      if (t.dbias) S::Store(ds, f.row + j);
      if (m.cap > 0.0f) ds = S::Mul(ds, S::Sub(one, S::Mul(th, th)));
      S::Store(p, s + j);
      S::Store(S::Mul(ds, scale), g + j);
    }
    if (t.dbias) {
      float* db = t.dbias + h * t.db_head + i * t.db_row + j0 * t.db_col;
      const uint8_t* ok = f.ok + r * kp;
      for (int64_t j = 0; j < nk; ++j)
        if (every || ok[j]) db[j * t.db_col] = f.row[j];
    }
  }
}

// Key lists: whether a row reads few enough of a tile's keys (fewer than an eighth) that
// dot products of its pairs cost less than its share of the tile's dense products.
static inline bool BwdSparse(const uint8_t* ok, int64_t nk) {
  int64_t n = 0;
  for (int64_t j = 0; j < nk; ++j) n += ok[j];
  return 8 * n < nk;
}

// A sparse row's scores (q . k_j) and dP (dout . v_j) of its read pairs only (ok), into
// s and g: a row's values then depend on its own pairs alone.
static void BwdSparseRow(const float* q, const float* dout, const float* kr, int64_t k_row,
                         const float* vr, int64_t dp, int64_t dvp, const uint8_t* ok, int64_t nk,
                         float* s, float* g) {
  for (int64_t j = 0; j < nk; ++j) {
    if (!ok[j]) continue;
    s[j] = BwdDot(q, kr + j * k_row, dp);
    g[j] = BwdDot(dout, vr + j * dvp, dvp);
  }
}

// BwdPairsAll, a tile whose every pair is read: dv += p^T dout and dk += g^T q over pairs
// of rows, dq += g k over pairs of keys, p and g (f.s, f.g: the probabilities and the
// scores' gradient times scale) rounded to bf16 pairs. A row past nq and keys past nk
// are zero (g's padded keys zeroed first: their probabilities are no key's).
static inline void BwdPairSums(const BwdScratch& f, int64_t dp, int64_t dvp, int64_t nq, int64_t nk,
                               float* dq, int64_t dq_row) {
  if constexpr (S::kDotBf16) {
    constexpr int64_t L = static_cast<int64_t>(S::kLanes);
    using V = typename S::V;
    const int64_t kp = BwdKp(), row_pairs = (nq + 1) / 2;
    alignas(64) static const uint16_t kZero[S::kLanes] = {};  // the row past an odd nq
    const float* zero = reinterpret_cast<const float*>(kZero);
    for (int64_t r = 0; r < nq; ++r) std::fill(f.g + r * kp + nk, f.g + (r + 1) * kp, 0.0f);
    for (int64_t m = 0; m < row_pairs; ++m) {  // rows 2m and 2m + 1
      const bool two = 2 * m + 1 < nq;
      const float* qa = f.qw + 2 * m * dp;
      for (int64_t c = 0; c < dp; c += L)
        S::Store(S::PairRows(ElemAt(qa, c, kBf16), two ? ElemAt(qa + dp, c, kBf16) : zero),
                 f.q2 + m * dp + c);
      const float* da = f.dow + 2 * m * dvp;
      for (int64_t c = 0; c < dvp; c += L)
        S::Store(S::PairRows(ElemAt(da, c, kBf16), two ? ElemAt(da + dvp, c, kBf16) : zero),
                 f.do2 + m * dvp + c);
      for (int64_t j = 0; j < kp; j += L) {
        const float* s0 = f.s + 2 * m * kp + j;
        const float* g0 = f.g + 2 * m * kp + j;
        const V s1 = two ? S::Load(s0 + kp) : S::Zero(), g1 = two ? S::Load(g0 + kp) : S::Zero();
        S::Store(S::NarrowRowPairs(S::Load(s0), s1), f.pt + m * kp + j);
        S::Store(S::NarrowRowPairs(S::Load(g0), g1), f.gt + m * kp + j);
      }
    }
    for (int64_t r = 0; r < nq; ++r)
      for (int64_t j = 0; j < kp; j += 2 * L)
        S::Store(S::NarrowPairs(S::Load(f.g + r * kp + j), S::Load(f.g + r * kp + j + L)),
                 f.gk + r * (kp / 2) + j / 2);
    BwdProduct<true>(f.pt, 1, kp, f.do2, dvp, f.dv, dvp, nk, dvp, row_pairs);       // dv += p^T do
    BwdProduct<true>(f.gt, 1, kp, f.q2, dp, f.dk, dp, nk, dp, row_pairs);           // dk += g^T q
    BwdProduct<true>(f.gk, kp / 2, 1, f.k2, dp, dq, dq_row, nq, dp, (nk + 1) / 2);  // dq += g k
  }
}

// Whether the key rows are read in place (f32 whole vectors), else packed as rows (kr).
static inline bool BwdKDirect(const Operands& op) {
  return op.k_type == kF32 && op.k_dim == 1 && PadKeys(op.head_dim) == op.head_dim;
}

// Query rows [i0, i0 + nq) of head h against the packed key tile [j0, j0 + nk).
static void BwdTilePair(const BackwardTask& t, const BwdScratch& f, int64_t h, int64_t i0,
                        int64_t nq, int64_t j0, int64_t nk, base::TileKind kind) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const Operands& op = t.op;
  const int64_t dp = PadKeys(op.head_dim), dvp = PadKeys(op.value_dim), kp = BwdKp();
  // Rows that are whole vectors of f32 in the caller's memory are read (and dq accumulated)
  // in place, others through packed copies (16-bit ones widened): the same products either
  // way.
  const bool q_direct = op.q_type == kF32 && op.q_dim == 1 && dp == op.head_dim;
  const bool do_direct = t.do_type == kF32 && t.do_dim == 1 && dvp == op.value_dim;
  const bool dq_direct = t.dq_dim == 1 && dp == op.head_dim;
  const bool k_direct = BwdKDirect(op);
  const float* q = q_direct ? op.q + h * op.q_head + i0 * op.q_row : f.qp;
  const int64_t q_row = q_direct ? op.q_row : dp;
  const float* dout = do_direct ? t.dout + h * t.do_head + i0 * t.do_row : f.dop;
  const int64_t do_row = do_direct ? t.do_row : dvp;
  float* dq = dq_direct ? t.dq + h * t.dq_head + i0 * t.dq_row : f.dq;
  const int64_t dq_row = dq_direct ? t.dq_row : dp;
  const float* kr = k_direct ? op.k + j0 * op.k_row : f.kr;
  const int64_t k_row = k_direct ? op.k_row : dp;
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t i = i0 + r;
    if (!q_direct)
      BwdPackRow(ElemAt(op.q, h * op.q_head + i * op.q_row, op.q_type), op.q_dim, op.head_dim, dp,
                 f.qp + r * dp, op.q_type);
    if (!do_direct)
      BwdPackRow(ElemAt(t.dout, h * t.do_head + i * t.do_row, t.do_type), t.do_dim, op.value_dim,
                 dvp, f.dop + r * dvp, t.do_type);
    if (f.qw) {  // the bf16 row, zeros past it
      BwdPairWords(ElemAt(op.q, h * op.q_head + i * op.q_row, op.q_type), op.q_dim, op.head_dim,
                   f.qw + r * dp, 1);
      std::fill(f.qw + r * dp + op.head_dim / 2, f.qw + (r + 1) * dp, 0.0f);
    }
    if (f.dow) {
      BwdPairWords(ElemAt(t.dout, h * t.do_head + i * t.do_row, t.do_type), t.do_dim, op.value_dim,
                   f.dow + r * dvp, 1);
      std::fill(f.dow + r * dvp + op.value_dim / 2, f.dow + (r + 1) * dvp, 0.0f);
    }
    f.lse[r] = op.lse[h * op.lse_head + i * op.lse_row];
    f.dd[r] = BwdRowDot(dout + r * do_row, ElemAt(op.o, h * op.o_head + i * op.o_row, op.o_type),
                        op.o_dim, op.value_dim, f.row, op.o_type) -
              BwdDlse(t, h, i);
  }
  // Whether every pair is read (then no pair is checked).
  // (A tree's prefix, the keys below its first column, is read unchecked.)
  const bool listed = op.mods.Listed();
  bool kept = !listed && (!op.mods.keep || (op.mods.keep_bits && j0 + nk <= op.mods.keep_from));
  if (op.mods.block_kv > 0)  // every row's blocks here listed full (or partial, unread)
    for (int64_t r = 0; r < nq && kept; ++r) {
      const unsigned kinds = base::BlockKinds(RowBlocksOf(op.mods, h, i0 + r), j0, j0 + nk);
      kept = kinds == 1u << base::kBlockFull ||
             (!op.mods.keep && (kinds & (1u << base::kBlockNone)) == 0);
    }
  bool every = kind == base::kTileFull && kept && !op.mods.bias;
  for (int64_t r = 0; r < nq && every; ++r) every = f.lse[r] != -__builtin_inff();
  if (!every) {
    bool all = true, any = false;
    for (int64_t r = 0; r < nq; ++r) {
      const int64_t qpos = op.mask.q_start + i0 + r;
      const RowMods m = RowModsOf(op.mods, h, i0 + r, qpos);
      const bool live = f.lse[r] != -__builtin_inff();
      uint8_t* ok = f.ok + r * kp;
      if (!listed && m.blocks.size == 0 && !m.keep && !m.bias) {
        // The analytic mask alone: a row's keys without strided columns are one run.
        const base::RowKeys k = base::KeysOf(op.mask, qpos, op.kv_len);
        if (k.stride == 0) {
          const int64_t a = live ? base::MinI(base::MaxI(k.lo - j0, 0), nk) : 0;
          const int64_t b = live ? base::MinI(base::MaxI(k.hi - j0, a), nk) : 0;
          std::fill(ok, ok + nk, uint8_t{0});
          std::fill(ok + a, ok + b, uint8_t{1});
          all &= a == 0 && b == nk;
          any |= b > a;
          continue;
        }
      }
      base::BlockKind kind_j = base::kBlockFull;
      // Key lists: the row's entries from the first at or past j0 (BackwardListedRun).
      const int32_t* e = listed ? f.keys + r * f.cap + f.cursor[r] : nullptr;
      const int32_t* e_end = listed ? f.keys + r * f.cap + f.counts[r] : nullptr;
      for (int64_t j = 0; j < nk; ++j) {
        if (m.blocks.size > 0 && (j == 0 || (j0 + j) % m.blocks.size == 0))
          kind_j = base::BlockKindOf(m.blocks, j0 + j);
        bool named = true;
        if (listed) {
          named = e < e_end && *e == j0 + j;
          e += named;
        }
        ok[j] = live && named && BwdPairRead(op.mask, m, qpos, j0 + j, kind_j);
        all &= ok[j] != 0;
        any |= ok[j] != 0;
      }
    }
    // No pair read (a mask tensor's masked tile): nothing to add.
    if (!any) return;
    every = all;
  }

  // Key lists' sparse rows write their read pairs alone: their other entries are 0. The
  // dense products write whole rows (fresh chains, the bits of adding to zeros).
  if (listed)
    for (int64_t x = 0; x < nq * kp; x += L) {
      S::Store(S::Zero(), f.s + x);
      S::Store(S::Zero(), f.g + x);
    }
  // Rows [r, e) of the tile: their scores into f.s and dout . v into f.g.
  auto dense = [&](int64_t r, int64_t e) {
    bool qk_pairs = false, dv_pairs = false;
    if constexpr (S::kDotBf16) {
      if ((qk_pairs = f.qw != nullptr))
        BwdProduct<true>(f.qw + r * dp, dp, 1, f.kt, kp, f.s + r * kp, kp, e - r, kp,
                         op.head_dim / 2, true);
      if ((dv_pairs = f.dow != nullptr))
        BwdProduct<true>(f.dow + r * dvp, dvp, 1, f.vt, kp, f.g + r * kp, kp, e - r, kp,
                         op.value_dim / 2, true);
    }
    if (!qk_pairs)
      BwdProduct(q + r * q_row, q_row, 1, f.kt, kp, f.s + r * kp, kp, e - r, kp, op.head_dim, true);
    if (!dv_pairs)
      BwdProduct(dout + r * do_row, do_row, 1, f.vt, kp, f.g + r * kp, kp, e - r, kp, op.value_dim,
                 true);
  };
  if (!listed) dense(0, nq);
  // Key lists: rows that read few of the tile's keys take dot products of their pairs
  // (BwdSparseRow), runs of the others the dense products (a row's bytes do not depend
  // on its block, so neither on its neighbours').
  for (int64_t r = 0; listed && r < nq;) {
    if (BwdSparse(f.ok + r * kp, nk)) {
      BwdSparseRow(q + r * q_row, dout + r * do_row, kr, k_row, f.vr, dp, dvp, f.ok + r * kp, nk,
                   f.s + r * kp, f.g + r * kp);
      ++r;
      continue;
    }
    int64_t e = r + 1;
    while (e < nq && !BwdSparse(f.ok + e * kp, nk)) ++e;
    dense(r, e);
    r = e;
  }

  BwdTileGradients(t, f, h, i0, nq, j0, nk, every);

  if (!dq_direct)
    for (int64_t r = 0; r < nq; ++r)
      BwdPackRow(t.dq + h * t.dq_head + (i0 + r) * t.dq_row, t.dq_dim, op.head_dim, dp,
                 f.dq + r * dp);
  bool pairs = false;
  if constexpr (S::kDotBf16) {
    if ((pairs = every && f.pt != nullptr)) BwdPairSums(f, dp, dvp, nq, nk, dq, dq_row);
  }
  if (!pairs && every) {
    BwdProduct(f.s, 1, kp, dout, do_row, f.dv, dvp, nk, dvp, nq);  // dv += p^T do
    BwdProduct(f.g, 1, kp, q, q_row, f.dk, dp, nk, dp, nq);        // dk += g^T q
    BwdProduct(f.g, kp, 1, kr, k_row, dq, dq_row, nq, dp, nk);     // dq += g k
  } else if (!pairs) {
    BwdProductMasked(f.s, 1, kp, f.ok, 1, kp, dout, do_row, f.dv, dvp, nk, dvp, nq);
    BwdProductMasked(f.g, 1, kp, f.ok, 1, kp, q, q_row, f.dk, dp, nk, dp, nq);
    BwdProductMasked(f.g, kp, 1, f.ok, kp, 1, kr, k_row, dq, dq_row, nq, dp, nk);
  }
  if (!dq_direct)
    for (int64_t r = 0; r < nq; ++r) {
      float* dst = t.dq + h * t.dq_head + (i0 + r) * t.dq_row;
      for (int64_t d = 0; d < op.head_dim; ++d) dst[d * t.dq_dim] = f.dq[r * dp + d];
    }
}

// The key tile [j0, j0 + nk) into f: transposed (kt, vt; with pairs, bf16 pair words)
// and, where BwdTilePair does not read k in place, as rows (kr), with key lists v as rows
// too (vr); zeros past nk. 16-bit rows are widened first (k into kr, v into f.row) and
// transposed from there.
static void BwdPackTile(const BackwardTask& t, const BwdScratch& f, int64_t j0, int64_t nk) {
  const Operands& op = t.op;
  const int64_t dp = PadKeys(op.head_dim), dvp = PadKeys(op.value_dim), kp = BwdKp();
  const bool k_direct = BwdKDirect(op);
  const int64_t kt_rows = f.qw ? op.head_dim / 2 : op.head_dim;
  const int64_t vt_rows = f.dow ? op.value_dim / 2 : op.value_dim;
  for (int64_t j = 0; j < kp; ++j) {
    if (f.kb) {  // the bf16 row, zeros past it (and past nk)
      float* row = f.kb + j * dp;
      std::fill(row, row + dp, 0.0f);
      if (j < nk)
        BwdPairWords(ElemAt(op.k, (j0 + j) * op.k_row, kBf16), op.k_dim, op.head_dim, row, 1);
    }
    if (j >= nk) {
      for (int64_t d = 0; d < kt_rows; ++d) f.kt[d * kp + j] = 0.0f;
      for (int64_t d = 0; d < vt_rows; ++d) f.vt[d * kp + j] = 0.0f;
      continue;
    }
    const float* k = ElemAt(op.k, (j0 + j) * op.k_row, op.k_type);
    const float* v = ElemAt(op.v, (j0 + j) * op.v_row, op.v_type);
    if (!k_direct) BwdPackRow(k, op.k_dim, op.head_dim, dp, f.kr + j * dp, op.k_type);
    if (f.vr) BwdPackRow(v, op.v_dim, op.value_dim, dvp, f.vr + j * dvp, op.v_type);
    if (f.qw) {
      BwdPairWords(k, op.k_dim, op.head_dim, f.kt + j, kp);
    } else {
      const float* kf = op.k_type == kF32 ? k : f.kr + j * dp;
      const int64_t k_dim = op.k_type == kF32 ? op.k_dim : 1;
      for (int64_t d = 0; d < op.head_dim; ++d) f.kt[d * kp + j] = kf[d * k_dim];
    }
    if (f.dow) {
      BwdPairWords(v, op.v_dim, op.value_dim, f.vt + j, kp);
    } else {
      int64_t v_dim = op.v_dim;
      if (op.v_type != kF32) {
        WidenRowV(v, op.v_dim, op.v_type, op.value_dim, f.row);
        v = f.row;
        v_dim = 1;
      }
      for (int64_t d = 0; d < op.value_dim; ++d) f.vt[d * kp + j] = v[d * v_dim];
    }
  }
  if constexpr (S::kDotBf16) {
    constexpr int64_t L = static_cast<int64_t>(S::kLanes);
    for (int64_t m = 0; f.k2 && m < kp / 2; ++m)  // pairs of keys (2m, 2m + 1)
      for (int64_t c = 0; c < dp; c += L)
        S::Store(S::PairRows(ElemAt(f.kb + 2 * m * dp, c, kBf16),
                             ElemAt(f.kb + (2 * m + 1) * dp, c, kBf16)),
                 f.k2 + m * dp + c);
  }
}

// The tile's dk and dv accumulators to (load: from) the caller's rows [j0, j0 + nk).
static void BwdMoveTileGrads(const BackwardTask& t, const BwdScratch& f, int64_t j0, int64_t nk,
                             bool load) {
  const Operands& op = t.op;
  const int64_t dp = PadKeys(op.head_dim), dvp = PadKeys(op.value_dim);
  for (int64_t j = 0; j < nk; ++j) {
    float* dk = t.dk + (j0 + j) * t.dk_row;
    float* dv = t.dv + (j0 + j) * t.dv_row;
    if (!load) {
      for (int64_t d = 0; d < op.head_dim; ++d) dk[d * t.dk_dim] = f.dk[j * dp + d];
      for (int64_t d = 0; d < op.value_dim; ++d) dv[d * t.dv_dim] = f.dv[j * dvp + d];
      continue;
    }
    for (int64_t d = 0; d < dp; ++d) f.dk[j * dp + d] = d < op.head_dim ? dk[d * t.dk_dim] : 0.0f;
    for (int64_t d = 0; d < dvp; ++d)
      f.dv[j * dvp + d] = d < op.value_dim ? dv[d * t.dv_dim] : 0.0f;
  }
}

// Row i's listed keys (ListedKeys) into row slot r of f; returns their count.
static inline int64_t BwdListRow(const BackwardTask& t, const BwdScratch& f, int64_t r, int64_t i) {
  const Operands& op = t.op;
  return ListedKeys(op.mods, i, op.mask, op.mask.q_start + i, op.kv_len, f.keys + r * f.cap,
                    f.bits);
}

// Key lists: query tiles in row order, each tile's rows' listed keys found once (their
// cursors then step through them); for each key tile that a row of the query tile lists,
// in key order, every head's rows of the tile in order. dk and dv accumulate in the
// caller's rows (zeroed first) over the query tiles in order, dq over the key tiles in
// order: the same order for any thread count. A key tile that no row of a query tile
// lists is not read with it, so the cost follows the tiles the lists touch, and the
// scratch the capacity of a tile's lists.
static void BackwardListedRun(const BackwardTask& t, const BwdScratch& f) {
  const Operands& op = t.op;
  for (int64_t j = 0; j < op.kv_len; ++j) {
    for (int64_t d = 0; d < op.head_dim; ++d) t.dk[j * t.dk_row + d * t.dk_dim] = 0.0f;
    for (int64_t d = 0; d < op.value_dim; ++d) t.dv[j * t.dv_row + d * t.dv_dim] = 0.0f;
  }
  for (int64_t i0 = 0; i0 < op.q_len; i0 += kBwdRows) {
    const int64_t nq = base::MinI(kBwdRows, op.q_len - i0);
    for (int64_t r = 0; r < nq; ++r) {
      f.counts[r] = BwdListRow(t, f, r, i0 + r);
      f.cursor[r] = 0;
    }
    for (;;) {
      // The next key tile: the one holding the least entry not yet passed.
      int64_t next = INT64_MAX;
      for (int64_t r = 0; r < nq; ++r)
        if (f.cursor[r] < f.counts[r]) next = base::MinI(next, f.keys[r * f.cap + f.cursor[r]]);
      if (next == INT64_MAX) break;
      const int64_t j0 = next / kBwdKeys * kBwdKeys, nk = base::MinI(kBwdKeys, op.kv_len - j0);
      BwdPackTile(t, f, j0, nk);
      BwdMoveTileGrads(t, f, j0, nk, true);
      for (int64_t h = 0; h < t.heads; ++h)
        BwdTilePair(t, f, h, i0, nq, j0, nk, base::kTilePartial);
      BwdMoveTileGrads(t, f, j0, nk, false);
      for (int64_t r = 0; r < nq; ++r)
        while (f.cursor[r] < f.counts[r] && f.keys[r * f.cap + f.cursor[r]] < j0 + nk)
          ++f.cursor[r];
    }
  }
}

static void BackwardTaskRun(const BackwardTask& t, float* scratch) {
  const Operands& op = t.op;
  const BwdScratch f = BwdCarve(t, scratch);
  const base::Mask& mask = op.mask;
  const int64_t dvp = PadKeys(op.value_dim);
  for (int64_t h = 0; h < t.heads; ++h)
    for (int64_t i = 0; i < op.q_len; ++i) {
      float* dq = t.dq + h * t.dq_head + i * t.dq_row;
      for (int64_t d = 0; d < op.head_dim; ++d) dq[d * t.dq_dim] = 0.0f;
      if (!t.dbias) continue;
      float* db = t.dbias + h * t.db_head + i * t.db_row;
      for (int64_t j = 0; j < op.kv_len; ++j) db[j * t.db_col] = 0.0f;
    }
  if (op.mods.sinks && t.dsinks)
    for (int64_t h = 0; h < t.heads; ++h) {
      double sum = 0.0;
      const float sink = op.mods.sinks[h];
      for (int64_t i = 0; i < op.q_len && sink != -__builtin_inff(); ++i) {
        const float lse = op.lse[h * op.lse_head + i * op.lse_row];
        // A row with no key: o = 0 and lse = the sink; only dlse reaches the sink.
        float dd = -BwdDlse(t, h, i);
        const bool reads =
            op.mods.Listed()
                ? BwdListRow(t, f, 0, i) > 0
                : base::AllowedCount(base::KeysOf(mask, mask.q_start + i, op.kv_len)) > 0;
        if (reads) {
          BwdPackRow(ElemAt(t.dout, h * t.do_head + i * t.do_row, t.do_type), t.do_dim,
                     op.value_dim, dvp, f.dop, t.do_type);
          dd += BwdRowDot(f.dop, ElemAt(op.o, h * op.o_head + i * op.o_row, op.o_type), op.o_dim,
                          op.value_dim, f.row, op.o_type);
        }
        sum -= __builtin_exp(static_cast<double>(sink) - lse) * dd;
      }
      t.dsinks[h] = sum;
    }
  if (op.mods.Listed()) return BackwardListedRun(t, f);

  const int64_t key_end = base::KeyEnd(mask, mask.q_start + op.q_len, op.kv_len);
  const int64_t dp = PadKeys(op.head_dim);
  for (int64_t j0 = 0; j0 < op.kv_len; j0 += kBwdKeys) {
    const int64_t nk = base::MinI(kBwdKeys, op.kv_len - j0);
    for (int64_t j = 0; j < nk; ++j) {
      for (int64_t d = 0; d < dp; ++d) f.dk[j * dp + d] = 0.0f;
      for (int64_t d = 0; d < dvp; ++d) f.dv[j * dvp + d] = 0.0f;
    }
    bool packed = false;
    for (int64_t h = 0; h < t.heads && j0 < key_end; ++h)
      for (int64_t i0 = 0; i0 < op.q_len; i0 += kBwdRows) {
        const int64_t nq = base::MinI(kBwdRows, op.q_len - i0);
        const base::TileKind kind =
            base::Classify(mask, mask.q_start + i0, mask.q_start + i0 + nq, j0, j0 + nk, op.kv_len);
        if (kind == base::kTileEmpty) continue;
        if (op.mods.block_kv > 0) {  // no row's block lists hold a key here: not read
          bool listed = false;       // (a query block's rows share its lists)
          for (int64_t i = i0; i < i0 + nq && !listed;
               i = (i / op.mods.block_q + 1) * op.mods.block_q)
            listed = base::BlocksAny(RowBlocksOf(op.mods, h, i), j0, j0 + nk);
          if (!listed) continue;
        }
        if (!packed) BwdPackTile(t, f, j0, nk);
        packed = true;
        BwdTilePair(t, f, h, i0, nq, j0, nk, kind);
      }
    BwdMoveTileGrads(t, f, j0, nk, false);
  }
}
