// Row-wise score transforms: scaling and the stable softmax, on contiguous padded rows
// and as stages on strided rows. Included inside a per-target namespace that defines
// the SIMD vocabulary S, after common-inl.h; no includes, no namespace of its own.

static inline void ScaleRow(float* row, int64_t n, float scale) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const typename S::V vs = S::Set(scale);
  int64_t j = 0;
  for (; j + L <= n; j += L) S::Store(S::Mul(S::Load(row + j), vs), row + j);
  for (; j < n; ++j) row[j] *= scale;
}

// `n` is a multiple of the lane count; padding entries are -inf. `sink` (-inf: none) is
// one more logit of the denominator, with no weight of its own. A row whose maximum and
// sink are -inf (nothing allowed) becomes zeros with lse -inf; with a sink, a row with
// nothing allowed becomes zeros with lse = sink. NaN anywhere makes the row NaN.
// Returns whether some entry was above -inf (or NaN).
static inline bool SoftmaxRow(float* row, int64_t n, float* lse, float sink = -__builtin_inff()) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  typename S::V vmax = S::Set(-__builtin_inff());
  for (int64_t j = 0; j < n; j += L) vmax = S::Max(vmax, S::Load(row + j));
  float m = S::ReduceMax(vmax);
  if (m == -__builtin_inff()) {
    for (int64_t j = 0; j < n; ++j)
      if (row[j] != row[j]) m = row[j];  // the vector max may drop a NaN
  }
  const bool any = m != -__builtin_inff();
  if (!any) {  // zeros; lse = sink (-inf without one)
    const typename S::V zero = S::Zero();
    for (int64_t j = 0; j < n; j += L) S::Store(zero, row + j);
    if (lse) *lse = sink;
    return false;
  }
  if (sink > m) m = sink;
  const typename S::V vm = S::Set(m);
  typename S::V vsum = S::Zero();
  for (int64_t j = 0; j < n; j += L) {
    const typename S::V e = S::Exp(S::Sub(S::Load(row + j), vm));
    S::Store(e, row + j);
    vsum = S::Add(vsum, e);
  }
  float sum = S::ReduceSum(vsum);
  if (sink != -__builtin_inff()) sum += ExpScalar(sink - m);
  const typename S::V inv = S::Set(1.0f / sum);
  for (int64_t j = 0; j < n; j += L) S::Store(S::Mul(S::Load(row + j), inv), row + j);
  if (lse) *lse = m + __builtin_logf(sum);
  return true;
}

// Stage: rows *= scale. Strided rows get one IEEE multiply per element: the same bits as
// the vector path.
static void ScaleRows(Matrix s, int64_t rows, int64_t cols, float scale) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = s.data + i * s.row;
    if (s.col == 1) {
      ScaleRow(row, cols, scale);
    } else {
      for (int64_t j = 0; j < cols; ++j) row[j * s.col] *= scale;
    }
  }
}

// Stage: softmax of each row through a padded copy in scratch (PadKeys(cols) floats).
static size_t SoftmaxScratchFloats(int64_t cols) { return Piece(base::Count(PadKeys(cols))); }

static void SoftmaxRows(Matrix s, int64_t rows, int64_t cols, float* lse, int64_t lse_row,
                        float sink, float* buf) {
  const int64_t padded = PadKeys(cols);
  for (int64_t i = 0; i < rows; ++i) {
    float* row = s.data + i * s.row;
    for (int64_t j = 0; j < cols; ++j) buf[j] = row[j * s.col];
    for (int64_t j = cols; j < padded; ++j) buf[j] = -__builtin_inff();
    float row_lse;
    SoftmaxRow(buf, padded, &row_lse, sink);
    for (int64_t j = 0; j < cols; ++j) row[j * s.col] = buf[j];
    if (lse) lse[i * lse_row] = row_lse;
  }
}
