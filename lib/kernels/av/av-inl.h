// Weighted sums of value rows, o_r += sum_j p_r[j] v[j], over the keys each row may
// read. Included inside a per-target namespace that defines the SIMD vocabulary S.
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

// acc[r][c] += p_r[j] * v[j][c * lanes ...] for j = j0, j0 + step, ... < j1.
template <int R, int C>
OCTATTN_INLINE void AvRange(const KeyData& kd, const float* const* p, int64_t j0, int64_t j1,
                            int64_t step, typename S::V (&acc)[R][C]) {
  constexpr size_t L = S::kLanes;
  for (int64_t j = j0; j < j1; j += step) {
    const float* vj = kd.v + (j - kd.base) * kd.v_row;
    typename S::V vv[C];
    for (int c = 0; c < C; ++c) vv[c] = S::Load(vj + c * L);
    for (int r = 0; r < R; ++r) {
      const typename S::V pb = S::Set(p[r][(j - kd.base) * kd.p_col]);
      for (int c = 0; c < C; ++c) acc[r][c] = S::MulAdd(pb, vv[c], acc[r][c]);
    }
  }
}

// First key at or after j that is a multiple of stride.
static inline int64_t NextStrided(int64_t j, int64_t stride) {
  return (j + stride - 1) / stride * stride;
}

// Accumulates C value vectors of R rows with key sets keys[r] (only keys >= kd.base),
// each in ascending key order: the shared keys with all R rows at once, the rest row by
// row.
template <int R, int C>
OCTATTN_INLINE void AvRows(const KeyData& kd, const plan::RowKeys* keys,
                           typename S::V (&acc)[R][C]) {
  const float* const* p = kd.p;
  int64_t min_lo = keys[0].lo, max_lo = keys[0].lo, min_hi = keys[0].hi;
  int64_t stride = keys[0].stride;  // rows without keys carry stride 0
  for (int r = 1; r < R; ++r) {
    min_lo = plan::MinI(min_lo, keys[r].lo);
    max_lo = plan::MaxI(max_lo, keys[r].lo);
    min_hi = plan::MinI(min_hi, keys[r].hi);
    stride = plan::MaxI(stride, keys[r].stride);
  }
  // 1. strided columns below every row's dense run (shared).
  if (stride > 0) AvRange<R, C>(kd, p, NextStrided(kd.base, stride), min_lo, stride, acc);
  // 2. each row's keys in [min_lo, max_lo): strided columns, then its dense start.
  for (int r = 0; r < R; ++r) {
    const float* pr[1] = {p[r]};
    typename S::V a[1][C];
    for (int c = 0; c < C; ++c) a[0][c] = acc[r][c];
    const int64_t lo = keys[r].lo;
    if (stride > 0 && keys[r].strided_end > min_lo)
      AvRange<1, C>(kd, pr, NextStrided(plan::MaxI(min_lo, kd.base), stride), keys[r].strided_end,
                    stride, a);
    AvRange<1, C>(kd, pr, lo, plan::MinI(max_lo, keys[r].hi), 1, a);
    for (int c = 0; c < C; ++c) acc[r][c] = a[0][c];
  }
  // 3. the dense keys every row shares.
  AvRange<R, C>(kd, p, max_lo, min_hi, 1, acc);
  // 4. each row's dense keys past the shared run.
  for (int r = 0; r < R; ++r) {
    const float* pr[1] = {p[r]};
    typename S::V a[1][C];
    for (int c = 0; c < C; ++c) a[0][c] = acc[r][c];
    AvRange<1, C>(kd, pr, plan::MaxI(min_hi, max_lo), keys[r].hi, 1, a);
    for (int c = 0; c < C; ++c) acc[r][c] = a[0][c];
  }
}
