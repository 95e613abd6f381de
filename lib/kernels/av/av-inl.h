// Weighted sums of value rows, o_r += sum_j p_r[j] v[j], over the keys each row may
// read, and the weighted-sum stage. Included inside a per-target namespace that defines
// the SIMD vocabulary S, after common-inl.h.
//
// Each output lane is one FMA chain over the row's keys in ascending order, so its bits
// do not depend on how rows were blocked together.

// Where key j's weights and value row are: p_r[(j - base) * p_col] and
// v[(j - base) * v_row], so callers can pass a tile that starts at key `base`.
struct KeyData {
  const float* const* p;
  int64_t p_col;
  const float* v;  // the value chunk: rows padded to full vectors
  int64_t v_row;
  int64_t base;
};

// A step's prefetch: none.
struct NoFetch {
  OCTATTN_INLINE void operator()(int64_t) const {}
};

// acc[r][c] += p_r[j] * v[j][c * lanes ...] for j = j0, j0 + step, ... < j1, calling
// fetch(j) first at each j (a prefetch of rows ahead; it changes no result). The value
// rows hold elements of type T (kd.v_row counts them), widened as they are loaded.
template <int R, int C, class Fetch = NoFetch, Dtype T = kF32>
OCTATTN_INLINE void AvRange(const KeyData& kd, const float* const* p, int64_t j0, int64_t j1,
                            int64_t step, typename S::V (&acc)[R][C], Fetch fetch = {}) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  for (int64_t j = j0; j < j1; j += step) {
    fetch(j);
    const float* vj = ElemAt(kd.v, (j - kd.base) * kd.v_row, T);
    typename S::V vv[C];
    for (int c = 0; c < C; ++c) vv[c] = S::template LoadAs<T>(ElemAt(vj, c * L, T));
    for (int r = 0; r < R; ++r) {
      const typename S::V pb = S::Set(p[r][(j - kd.base) * kd.p_col]);
      for (int c = 0; c < C; ++c) acc[r][c] = S::MulAdd(pb, vv[c], acc[r][c]);
    }
  }
}

// Accumulates C value vectors of R rows with key sets keys[r] (only keys >= kd.base),
// each in ascending key order: the shared keys with all R rows at once, the rest row by
// row.
// One row's keys in ascending order, skipping the keys whose bit is set in `holes`
// (relative to kd.base; null: none): the same FMA chains as AvRows for the keys it reads.
template <int C>
OCTATTN_INLINE void AvRowHoles(const KeyData& kd, const float* p, const base::RowKeys& keys,
                               const uint64_t* holes, typename S::V (&acc)[1][C]) {
  const float* pr[1] = {p};
  auto skip = [&](int64_t j) { return holes && HoleAt(holes, j - kd.base); };
  if (keys.stride > 0)
    for (int64_t j =
             base::NextOnStride(base::MaxI(kd.base, keys.strided_begin), keys.stride, keys.phase);
         j < keys.strided_end; j += keys.stride)
      if (!skip(j)) AvRange<1, C>(kd, pr, j, j + 1, 1, acc);
  for (int64_t j = keys.lo; j < keys.hi;) {  // runs between holes
    while (j < keys.hi && skip(j)) ++j;
    int64_t e = j;
    while (e < keys.hi && !skip(e)) ++e;
    AvRange<1, C>(kd, pr, j, e, 1, acc);
    j = e;
  }
}

template <int R, int C>
OCTATTN_INLINE void AvRows(const KeyData& kd, const base::RowKeys* keys,
                           typename S::V (&acc)[R][C]) {
  const float* const* p = kd.p;
  int64_t min_lo = keys[0].lo, max_lo = keys[0].lo, min_hi = keys[0].hi;
  int64_t stride = keys[0].stride, phase = keys[0].phase;  // rows without keys: stride 0
  bool same_begin = true;  // every row's strided columns start at the same key
  for (int r = 1; r < R; ++r) {
    min_lo = base::MinI(min_lo, keys[r].lo);
    max_lo = base::MaxI(max_lo, keys[r].lo);
    min_hi = base::MinI(min_hi, keys[r].hi);
    if (keys[r].stride > stride) stride = keys[r].stride, phase = keys[r].phase;
  }
  int64_t begin = -1;
  for (int r = 0; r < R; ++r)
    if (keys[r].stride > 0) {
      const int64_t b = base::MaxI(kd.base, keys[r].strided_begin);
      same_begin &= begin < 0 || b == begin;
      begin = b;
    }
  if (begin < 0) begin = kd.base;
  if (!same_begin) {  // rows of different chunks: each row alone, in ascending key order
    for (int r = 0; r < R; ++r) {
      typename S::V a[1][C];
      for (int c = 0; c < C; ++c) a[0][c] = acc[r][c];
      AvRowHoles<C>(kd, p[r], keys[r], nullptr, a);
      for (int c = 0; c < C; ++c) acc[r][c] = a[0][c];
    }
    return;
  }
  // 1. strided columns below every row's dense run (shared).
  if (stride > 0)
    AvRange<R, C>(kd, p, base::NextOnStride(begin, stride, phase), min_lo, stride, acc);
  // 2. each row's keys in [min_lo, max_lo): strided columns, then its dense start.
  for (int r = 0; r < R; ++r) {
    const float* pr[1] = {p[r]};
    typename S::V a[1][C];
    for (int c = 0; c < C; ++c) a[0][c] = acc[r][c];
    const int64_t lo = keys[r].lo;
    if (stride > 0 && keys[r].strided_end > min_lo)
      AvRange<1, C>(kd, pr, base::NextOnStride(base::MaxI(min_lo, begin), stride, phase),
                    keys[r].strided_end, stride, a);
    AvRange<1, C>(kd, pr, lo, base::MinI(max_lo, keys[r].hi), 1, a);
    for (int c = 0; c < C; ++c) acc[r][c] = a[0][c];
  }
  // 3. the dense keys every row shares.
  AvRange<R, C>(kd, p, max_lo, min_hi, 1, acc);
  // 4. each row's dense keys past the shared run.
  for (int r = 0; r < R; ++r) {
    const float* pr[1] = {p[r]};
    typename S::V a[1][C];
    for (int c = 0; c < C; ++c) a[0][c] = acc[r][c];
    AvRange<1, C>(kd, pr, base::MaxI(min_hi, max_lo), keys[r].hi, 1, a);
    for (int c = 0; c < C; ++c) acc[r][c] = a[0][c];
  }
}

// bf16 pairs (S::DotBf16): the weights p_r as bf16 pairs (element m of kd.p[r]: keys
// base + 2m and base + 2m + 1), the values as pair rows (row m at kd.v + m * kd.v_row:
// lane c = column c of both keys). Keys [j0, j1) with j0 - base and j1 - base even, in
// pairs: one S::DotBf16 per pair (key 2m + 1, then 2m).
template <int R, int C>
OCTATTN_INLINE void AvPairRange(const KeyData& kd, const float* const* p, int64_t j0, int64_t j1,
                                typename S::V (&acc)[R][C]) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  for (int64_t m = (j0 - kd.base) / 2; m < (j1 - kd.base) / 2; ++m) {
    const float* vm = kd.v + m * kd.v_row;
    typename S::V vv[C];
    for (int c = 0; c < C; ++c) vv[c] = S::Load(vm + c * L);
    for (int r = 0; r < R; ++r) {
      const typename S::V pb = S::Set(p[r][m]);
      for (int c = 0; c < C; ++c) acc[r][c] = S::DotBf16(pb, vv[c], acc[r][c]);
    }
  }
}

// Key j alone: its halves of the weight and value pairs, the other key's zero (its value
// row may hold anything: it is not read into the sum).
template <int C>
OCTATTN_INLINE void AvPairSingle(const KeyData& kd, const float* p, int64_t j,
                                 typename S::V (&acc)[1][C]) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const int64_t m = (j - kd.base) / 2;
  const bool high = (j - kd.base) % 2 != 0;
  const typename S::V pw = S::Set(p[m]);
  const typename S::V pb = high ? S::Bf16Odd(pw) : S::Bf16Low(pw);
  for (int c = 0; c < C; ++c) {
    const typename S::V vp = S::Load(kd.v + m * kd.v_row + c * L);
    acc[0][c] = S::DotBf16(pb, high ? S::Bf16Odd(vp) : S::Bf16Low(vp), acc[0][c]);
  }
}

// One row's keys [j0, j1) as pairs: a key alone where its pair's other key is outside
// (the first if j0 - base is odd, the last if j1 - base is), whole pairs between.
template <int C>
OCTATTN_INLINE void AvPairRow(const KeyData& kd, const float* p, int64_t j0, int64_t j1,
                              typename S::V (&acc)[1][C]) {
  if (j0 >= j1) return;
  const float* pr[1] = {p};
  if ((j0 - kd.base) % 2) AvPairSingle<C>(kd, p, j0++, acc);
  const int64_t e = j1 - (j1 - kd.base) % 2;
  if (j0 < e) AvPairRange<1, C>(kd, pr, j0, e, acc);
  if (e < j1 && e >= j0) AvPairSingle<C>(kd, p, e, acc);
}

// AvRows for dense runs (no strided columns) in bf16 pairs: each row's keys are the same
// sequence of singles and pairs (AvPairRow over its run) whatever rows share the block:
// the run every row shares is cut at keys base + 2m.
template <int R, int C>
OCTATTN_INLINE void AvRowsPairs(const KeyData& kd, const base::RowKeys* keys,
                                typename S::V (&acc)[R][C]) {
  int64_t max_lo = keys[0].lo, min_hi = keys[0].hi;
  for (int r = 1; r < R; ++r) {
    max_lo = base::MaxI(max_lo, keys[r].lo);
    min_hi = base::MinI(min_hi, keys[r].hi);
  }
  const int64_t m0 = max_lo + (max_lo - kd.base) % 2, m1 = min_hi - (min_hi - kd.base) % 2;
  for (int r = 0; r < R; ++r) {
    typename S::V a[1][C];
    for (int c = 0; c < C; ++c) a[0][c] = acc[r][c];
    AvPairRow<C>(kd, kd.p[r], keys[r].lo, base::MinI(m0, keys[r].hi), a);
    for (int c = 0; c < C; ++c) acc[r][c] = a[0][c];
  }
  if (m0 < m1) AvPairRange<R, C>(kd, kd.p, m0, m1, acc);
  for (int r = 0; r < R; ++r) {
    typename S::V a[1][C];
    for (int c = 0; c < C; ++c) a[0][c] = acc[r][c];
    AvPairRow<C>(kd, kd.p[r], base::MaxI(keys[r].lo, base::MaxI(m0, m1)), keys[r].hi, a);
    for (int c = 0; c < C; ++c) acc[r][c] = a[0][c];
  }
}

constexpr int kAvVecs = S::kRegs >= 32 ? 4 : 2;

// o rows [i0, i0 + R) (o[(i0 + r) * o_row + d * o_dim]) = weighted sums of value rows;
// `kd` says where weights and values are; `tmp` holds R padded rows for outputs that are
// not full contiguous vectors.
template <int R>
static inline void AvStoreRows(float* o, int64_t o_row, int64_t o_dim, int64_t value_dim,
                               int64_t i0, const KeyData& kd, const base::RowKeys* keys,
                               float* tmp) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const int64_t dvp = PadKeys(value_dim);
  const bool direct = o_dim == 1 && value_dim % L == 0;
  float* dst[R];
  for (int r = 0; r < R; ++r) dst[r] = direct ? o + (i0 + r) * o_row : tmp + r * dvp;
  int64_t c0 = 0;
  for (; c0 + kAvVecs * L <= dvp; c0 += kAvVecs * L) {
    typename S::V acc[R][kAvVecs];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < kAvVecs; ++c) acc[r][c] = S::Zero();
    AvRows<R, kAvVecs>(KeyData{kd.p, kd.p_col, kd.v + c0, kd.v_row, kd.base}, keys, acc);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < kAvVecs; ++c) S::Store(acc[r][c], dst[r] + c0 + c * L);
  }
  for (; c0 < dvp; c0 += L) {
    typename S::V acc[R][1];
    for (int r = 0; r < R; ++r) acc[r][0] = S::Zero();
    AvRows<R, 1>(KeyData{kd.p, kd.p_col, kd.v + c0, kd.v_row, kd.base}, keys, acc);
    for (int r = 0; r < R; ++r) S::Store(acc[r][0], dst[r] + c0);
  }
  if (!direct)
    for (int r = 0; r < R; ++r) {
      float* orow = o + (i0 + r) * o_row;
      for (int64_t d = 0; d < value_dim; ++d) orow[d * o_dim] = dst[r][d];
    }
}

// Stage: o = p v over every key of one head.
static size_t WeightedSumScratchFloats(int64_t kv_len, int64_t value_dim, int64_t v_dim) {
  return base::SatAdd(ValuesScratch(kv_len, value_dim, v_dim),
                      Piece2(kRowBlock, PadKeys(value_dim)));
}

static void WeightedSumHead(ConstMatrix p, ConstMatrix v, Matrix o, int64_t q_len, int64_t kv_len,
                            int64_t value_dim, float* scratch) {
  int64_t v_row = 0;
  const float* vv = PrepareValues(v.data, v.row, v.col, value_dim, 0, 0, kv_len,
                                  base::StridedColumns{0, 0}, scratch, &v_row);
  float* otmp = scratch + ValuesScratch(kv_len, value_dim, v.col);
  const base::RowKeys all{0, kv_len, 0, 0, 0};
  int64_t i = 0;
  for (; i + kRowBlock <= q_len; i += kRowBlock) {
    const float* pr[kRowBlock];
    base::RowKeys keys[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) {
      pr[r] = p.data + (i + r) * p.row;
      keys[r] = all;
    }
    AvStoreRows<kRowBlock>(o.data, o.row, o.col, value_dim, i, KeyData{pr, p.col, vv, v_row, 0},
                           keys, otmp);
  }
  for (; i < q_len; ++i) {
    const float* pr[1] = {p.data + i * p.row};
    base::RowKeys keys[1] = {all};
    AvStoreRows<1>(o.data, o.row, o.col, value_dim, i, KeyData{pr, p.col, vv, v_row, 0}, keys,
                   otmp);
  }
}
