// The fused path: online-softmax attention over packed K/V tiles, never holding more
// than a tile of scores. Included inside a per-target namespace that defines the SIMD
// vocabulary S, after the qk, softmax, av and naive families.
//
// Row state: [m, l, o[0 .. dvp)] = running max, running sum of exp(s - m), and the
// unnormalized output. Every update is the same sequence of operations for a row
// whatever rows share its task (see kChunkKeys in kernels.h).

constexpr int kFlashRows = 4;
constexpr int kFlashQkVecs = S::kRegs >= 32 ? 4 : 2;

static inline int64_t FlashRows(const FlashTask& t) { return t.heads * (t.row_end - t.row_begin); }
static inline size_t FlashStateFloats(const FlashTask& t) { return Piece(2 + PadKeys(t.value_dim)); }
static inline bool FlashValuesDirect(const FlashTask& t) {
  return t.v_dim == 1 && t.value_dim % Lanes() == 0;
}

// One past the last key any row of the task may read.
static inline int64_t FlashKeyLimit(const FlashTask& t) {
  if (!t.mask.causal) return t.kv_len;
  return plan::MaxI(0, plan::MinI(t.kv_len, t.mask.q_start + t.row_end));
}

static size_t FlashScratchFloats(const FlashTask& t) {
  const size_t state = FlashStateFloats(t) * static_cast<size_t>(FlashRows(t));
  return 2 * state + Piece(t.head_dim * kTileKeys) + Piece(kFlashRows * kTileKeys) +
         (FlashValuesDirect(t) ? 0 : Piece(kTileKeys * PadKeys(t.value_dim)));
}

static inline void ResetState(float* st, int64_t rows, size_t stride, int64_t dvp) {
  for (int64_t r = 0; r < rows; ++r) {
    float* s = st + r * stride;
    s[0] = -__builtin_inff();
    s[1] = 0.0f;
    for (int64_t d = 0; d < dvp; ++d) s[2 + d] = 0.0f;
  }
}

static inline float ExpScalar(float x) { return S::ReduceMax(S::Exp(S::Set(x))); }

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

// o row and lse from a final state.
static inline void FinishRow(const float* st, int64_t dvp, int64_t value_dim, float* o,
                             int64_t o_dim, float* lse, float* tmp) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const bool empty = st[0] == -__builtin_inff();
  const bool direct = o_dim == 1 && value_dim % L == 0;
  float* dst = direct ? o : tmp;
  const typename S::V inv = S::Set(empty ? 0.0f : 1.0f / st[1]);
  for (int64_t d = 0; d < dvp; d += L) S::Store(S::Mul(S::Load(st + 2 + d), inv), dst + d);
  if (empty)
    for (int64_t d = 0; d < dvp; ++d) dst[d] = 0.0f;  // also when the state holds NaN
  if (!direct)
    for (int64_t d = 0; d < value_dim; ++d) o[d * o_dim] = dst[d];
  if (lse) *lse = empty ? -__builtin_inff() : st[0] + __builtin_logf(st[1]);
}

// Keys of a row inside the tile [t0, t1).
static inline plan::RowKeys ClipKeys(plan::RowKeys k, int64_t t0, int64_t t1) {
  plan::RowKeys c;
  c.lo = plan::MinI(plan::MaxI(k.lo, t0), t1);
  c.hi = plan::MaxI(plan::MinI(plan::MaxI(k.hi, t0), t1), c.lo);
  c.stride = k.stride;
  c.strided_end = plan::MaxI(plan::MinI(k.strided_end, t1), t0);
  return c;
}

// The packed tile a block of rows works on.
struct FlashTile {
  const float* kt;  // [head_dim][kTileKeys], keys t0 .. t1 (zero padded to tpad)
  const float* v;   // value row of key t0 (direct or packed)
  int64_t v_row;
  int64_t t0, t1, tpad;
};

// R rows (q pointers, positions, states) against one tile: scores, online softmax update,
// weighted sum into the states.
template <int R>
static inline void FlashBlock(const FlashTask& t, const FlashTile& tile, const float* const* q,
                              const int64_t* qpos, float* const* st, float* s_buf) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  int64_t qmin = qpos[0], qmax = qpos[0];
  for (int r = 1; r < R; ++r) {
    qmin = plan::MinI(qmin, qpos[r]);
    qmax = plan::MaxI(qmax, qpos[r]);
  }
  if (plan::Classify(t.mask, qmin, qmax + 1, tile.t0, tile.t1, t.kv_len) == plan::kTileEmpty) return;
  float* s[R];
  for (int r = 0; r < R; ++r) s[r] = s_buf + r * kTileKeys;
  int64_t j0 = 0;
  for (; j0 + kFlashQkVecs * L <= tile.tpad; j0 += kFlashQkVecs * L)
    QkTile<R, kFlashQkVecs>(q, t.q_dim, tile.kt, kTileKeys, t.head_dim, j0, tile.t0, tile.t1,
                            t.kv_len, t.mask, qpos, t.scale, s);
  for (; j0 < tile.tpad; j0 += L)
    QkTile<R, 1>(q, t.q_dim, tile.kt, kTileKeys, t.head_dim, j0, tile.t0, tile.t1, t.kv_len,
                 t.mask, qpos, t.scale, s);

  const int64_t dvp = PadKeys(t.value_dim);
  plan::RowKeys keys[R];
  const plan::RowKeys none{tile.t0, tile.t0, 0, tile.t0};
  for (int r = 0; r < R; ++r) {
    typename S::V vmax = S::Set(-__builtin_inff());
    for (int64_t j = 0; j < tile.tpad; j += L) vmax = S::Max(vmax, S::Load(s[r] + j));
    const float mt = S::ReduceMax(vmax);
    const float m_old = st[r][0];
    float m_new = mt > m_old ? mt : m_old;
    if (m_new == -__builtin_inff()) {
      // Vector max may drop a NaN; look for one before calling the tile empty.
      for (int64_t j = 0; j < tile.tpad; ++j)
        if (s[r][j] != s[r][j]) m_new = s[r][j];
      if (m_new == -__builtin_inff()) {  // nothing readable yet: the state stays as it is
        keys[r] = none;
        continue;
      }
      st[r][0] = m_new;
    }
    if (m_new > m_old) {
      const typename S::V alpha = S::Exp(S::Set(m_old - m_new));
      st[r][1] *= S::ReduceMax(alpha);
      for (int64_t d = 0; d < dvp; d += L) S::Store(S::Mul(S::Load(st[r] + 2 + d), alpha), st[r] + 2 + d);
      st[r][0] = m_new;
    }
    const typename S::V vm = S::Set(m_new);
    typename S::V vsum = S::Zero();
    for (int64_t j = 0; j < tile.tpad; j += L) {
      const typename S::V e = S::Exp(S::Sub(S::Load(s[r] + j), vm));
      S::Store(e, s[r] + j);
      vsum = S::Add(vsum, e);
    }
    st[r][1] += S::ReduceSum(vsum);
    keys[r] = ClipKeys(plan::KeysOf(t.mask, qpos[r], t.kv_len), tile.t0, tile.t1);
  }

  const float* p[R];
  for (int r = 0; r < R; ++r) p[r] = s[r];
  int64_t c0 = 0;
  for (; c0 + kAvVecs * L <= dvp; c0 += kAvVecs * L) {
    typename S::V acc[R][kAvVecs];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < kAvVecs; ++c) acc[r][c] = S::Load(st[r] + 2 + c0 + c * L);
    AvRows<R, kAvVecs>(KeyData{p, 1, tile.v + c0, tile.v_row, tile.t0}, keys, acc);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < kAvVecs; ++c) S::Store(acc[r][c], st[r] + 2 + c0 + c * L);
  }
  for (; c0 < dvp; c0 += L) {
    typename S::V acc[R][1];
    for (int r = 0; r < R; ++r) acc[r][0] = S::Load(st[r] + 2 + c0);
    AvRows<R, 1>(KeyData{p, 1, tile.v + c0, tile.v_row, tile.t0}, keys, acc);
    for (int r = 0; r < R; ++r) S::Store(acc[r][0], st[r] + 2 + c0);
  }
}

// The rows of one head, [row_begin, row_end), against one tile, in blocks of kFlashRows.
static inline void FlashHeadTile(const FlashTask& t, const FlashTile& tile, int64_t head,
                                 float* states, size_t stride, float* s_buf) {
  const int64_t nq = t.row_end - t.row_begin;
  const float* qh = t.q + head * t.q_head;
  float* sh = states + static_cast<size_t>(head * nq) * stride;
  int64_t i = 0;
  for (; i + kFlashRows <= nq; i += kFlashRows) {
    const float* q[kFlashRows];
    int64_t qpos[kFlashRows];
    float* st[kFlashRows];
    for (int r = 0; r < kFlashRows; ++r) {
      q[r] = qh + (t.row_begin + i + r) * t.q_row;
      qpos[r] = t.mask.q_start + t.row_begin + i + r;
      st[r] = sh + static_cast<size_t>(i + r) * stride;
    }
    FlashBlock<kFlashRows>(t, tile, q, qpos, st, s_buf);
  }
  for (; i < nq; ++i) {
    const float* q[1] = {qh + (t.row_begin + i) * t.q_row};
    const int64_t qpos[1] = {t.mask.q_start + t.row_begin + i};
    float* st[1] = {sh + static_cast<size_t>(i) * stride};
    FlashBlock<1>(t, tile, q, qpos, st, s_buf);
  }
}

static void FlashTaskRun(const FlashTask& t, float* scratch) {
  const int64_t rows = FlashRows(t), dvp = PadKeys(t.value_dim), kmax = FlashKeyLimit(t);
  const size_t stride = FlashStateFloats(t);
  float* run = scratch;
  float* cur = run + stride * static_cast<size_t>(rows);
  float* kt = cur + stride * static_cast<size_t>(rows);
  float* s_buf = kt + Piece(t.head_dim * kTileKeys);
  float* vpack = s_buf + Piece(kFlashRows * kTileKeys);
  const bool direct = FlashValuesDirect(t);

  ResetState(run, rows, stride, dvp);
  for (int64_t c = t.chunk_begin; c < t.chunk_end; ++c) {
    const int64_t c0 = c * kChunkKeys, c1 = plan::MinI(c0 + kChunkKeys, kmax);
    if (c0 >= c1) break;
    float* st = c == t.chunk_begin ? run : cur;
    if (st == cur) ResetState(cur, rows, stride, dvp);
    for (int64_t t0 = c0; t0 < c1; t0 += kTileKeys) {
      FlashTile tile;
      tile.t0 = t0;
      tile.t1 = plan::MinI(t0 + kTileKeys, c1);
      tile.tpad = PadKeys(tile.t1 - t0);
      PackKeysT(t.k, t.k_row, t.k_dim, t0, tile.t1, tile.tpad, t.head_dim, kt, kTileKeys);
      tile.kt = kt;
      if (direct) {
        tile.v = t.v + t0 * t.v_row;
        tile.v_row = t.v_row;
      } else {
        for (int64_t j = t0; j < tile.t1; ++j) {
          float* dst = vpack + (j - t0) * dvp;
          int64_t d = 0;
          for (; d < t.value_dim; ++d) dst[d] = t.v[j * t.v_row + d * t.v_dim];
          for (; d < dvp; ++d) dst[d] = 0.0f;
        }
        tile.v = vpack;
        tile.v_row = dvp;
      }
      for (int64_t h = 0; h < t.heads; ++h) FlashHeadTile(t, tile, h, st, stride, s_buf);
    }
    if (st == cur)
      for (int64_t r = 0; r < rows; ++r) MergeState(run + r * stride, cur + r * stride, dvp);
  }

  const int64_t nq = t.row_end - t.row_begin;
  for (int64_t r = 0; r < rows; ++r) {
    const float* st = run + r * stride;
    if (t.partial) {
      for (size_t d = 0; d < stride; ++d) t.partial[r * stride + d] = st[d];
      continue;
    }
    const int64_t h = r / nq, i = t.row_begin + r % nq;
    FinishRow(st, dvp, t.value_dim, t.o + h * t.o_head + i * t.o_row, t.o_dim,
              t.lse ? t.lse + h * t.lse_head + i * t.lse_row : nullptr, cur);
  }
}

// Merges the chunk partials of a task's rows in chunk order and writes o and lse.
// `scratch`: FlashStateFloats + PadKeys(value_dim) floats.
static void FlashMerge(const FlashTask& t, const float* partials, int64_t chunks, float* scratch) {
  const int64_t rows = FlashRows(t), dvp = PadKeys(t.value_dim), nq = t.row_end - t.row_begin;
  const size_t stride = FlashStateFloats(t);
  // The first partial is copied, the next ones merged: as FlashTaskRun does in one task.
  float* run = scratch;
  float* tmp = run + stride;
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t d = 0; d < stride; ++d) run[d] = partials[r * stride + d];
    for (int64_t c = 1; c < chunks; ++c)
      MergeState(run, partials + (c * rows + r) * static_cast<int64_t>(stride), dvp);
    const int64_t h = r / nq, i = t.row_begin + r % nq;
    FinishRow(run, dvp, t.value_dim, t.o + h * t.o_head + i * t.o_row, t.o_dim,
              t.lse ? t.lse + h * t.lse_head + i * t.lse_row : nullptr, tmp);
  }
}

// The table of this target, filled by the including translation unit.
#define OCTATTN_KERNEL_TABLE(BACKEND, TARGET)                                               \
  {BACKEND,           TARGET,           S::kLanes,       NaiveScratchFloats, NaiveHead,      \
   ScoresScratchFloats, ScoresHead,     ScaleRow,        SoftmaxRow,                         \
   WeightedSumScratchFloats, WeightedSumHead, FlashScratchFloats, FlashStateFloats,          \
   FlashTaskRun,      FlashMerge}
