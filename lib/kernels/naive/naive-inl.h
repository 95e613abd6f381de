// The naive path and the stage kernels: scores of one head materialized in scratch,
// then softmax, then the weighted sum. Included inside a per-target namespace that
// defines the SIMD vocabulary S, after the qk, softmax and av families.

constexpr int kRowBlock = 4;
constexpr int kQkVecs = 2;
constexpr int kAvVecs = S::kRegs >= 32 ? 4 : 2;
constexpr size_t kLine = 16;  // floats per cache line: scratch pieces start on one

static inline int64_t Lanes() { return static_cast<int64_t>(S::kLanes); }
static inline int64_t PadKeys(int64_t n) {
  return static_cast<int64_t>(plan::RoundUp(static_cast<size_t>(n), S::kLanes));
}
static inline size_t Piece(int64_t floats) {
  return plan::RoundUp(static_cast<size_t>(floats), kLine);
}

// Row stride of packed keys: one cache line more than the keys, so that the rows of the
// transposing copy do not alias each other in the L1 (they are 4 KiB apart otherwise).
static inline int64_t KtStride(int64_t kpad) { return kpad + static_cast<int64_t>(kLine); }

// One past the last key any query row of the task may read.
static inline int64_t KeyLimit(const HeadTask& t) {
  if (!t.mask.causal) return t.kv_len;
  return plan::MaxI(0, plan::MinI(t.kv_len, t.mask.q_start + t.q_len));
}

// Value rows as full vectors: the caller's rows when they are, else packed copies.
static inline bool ValuesDirect(const HeadTask& t) {
  return t.v_dim == 1 && t.value_dim % Lanes() == 0;
}
static inline size_t ValuesScratch(const HeadTask& t, int64_t keys) {
  return ValuesDirect(t) ? 0 : Piece(keys * PadKeys(t.value_dim));
}
static inline const float* PrepareValues(const HeadTask& t, int64_t keys, float* scratch,
                                         int64_t* v_row) {
  if (ValuesDirect(t)) {
    *v_row = t.v_row;
    return t.v;
  }
  const int64_t dvp = PadKeys(t.value_dim);
  for (int64_t j = 0; j < keys; ++j) {
    const float* src = t.v + j * t.v_row;
    float* dst = scratch + j * dvp;
    int64_t d = 0;
    for (; d < t.value_dim; ++d) dst[d] = src[d * t.v_dim];
    for (; d < dvp; ++d) dst[d] = 0.0f;
  }
  *v_row = dvp;
  return scratch;
}

// o rows [i0, i0 + R) = weighted sums of value rows; `tmp` holds R padded rows for
// outputs that are not full contiguous vectors.
template <int R>
static inline void AvStoreRows(const HeadTask& t, int64_t i0, const float* const* p,
                               int64_t p_col, const float* v, int64_t v_row,
                               const plan::RowKeys* keys, float* tmp) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const int64_t dvp = PadKeys(t.value_dim);
  const bool direct = t.o_dim == 1 && t.value_dim % L == 0;
  float* dst[R];
  for (int r = 0; r < R; ++r) dst[r] = direct ? t.o + (i0 + r) * t.o_row : tmp + r * dvp;
  int64_t c0 = 0;
  for (; c0 + kAvVecs * L <= dvp; c0 += kAvVecs * L) {
    typename S::V acc[R][kAvVecs];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < kAvVecs; ++c) acc[r][c] = S::Zero();
    AvRows<R, kAvVecs>(KeyData{p, p_col, v + c0, v_row, 0}, keys, acc);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < kAvVecs; ++c) S::Store(acc[r][c], dst[r] + c0 + c * L);
  }
  for (; c0 < dvp; c0 += L) {
    typename S::V acc[R][1];
    for (int r = 0; r < R; ++r) acc[r][0] = S::Zero();
    AvRows<R, 1>(KeyData{p, p_col, v + c0, v_row, 0}, keys, acc);
    for (int r = 0; r < R; ++r) S::Store(acc[r][0], dst[r] + c0);
  }
  if (!direct)
    for (int r = 0; r < R; ++r) {
      float* o = t.o + (i0 + r) * t.o_row;
      for (int64_t d = 0; d < t.value_dim; ++d) o[d * t.o_dim] = dst[r][d];
    }
}

// Scaled, masked scores of rows [i0, i0 + R) into dst rows, keys [0, padded).
template <int R>
static inline void QkRows(const HeadTask& t, int64_t i0, const float* kt, int64_t padded,
                          int64_t key_end, const plan::Mask& mask, float scale,
                          float* const* dst) {
  const int64_t kt_stride = KtStride(padded);
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const float* q[R];
  int64_t qpos[R];
  for (int r = 0; r < R; ++r) {
    q[r] = t.q + (i0 + r) * t.q_row;
    qpos[r] = mask.q_start + i0 + r;
  }
  int64_t j0 = 0;
  for (; j0 + kQkVecs * L <= padded; j0 += kQkVecs * L)
    QkTile<R, kQkVecs>(q, t.q_dim, kt, kt_stride, t.head_dim, j0, 0, key_end, t.kv_len, mask,
                       qpos, scale, dst);
  for (; j0 < padded; j0 += L)
    QkTile<R, 1>(q, t.q_dim, kt, kt_stride, t.head_dim, j0, 0, key_end, t.kv_len, mask, qpos,
                 scale, dst);
}

static size_t NaiveScratchFloats(const HeadTask& t) {
  const int64_t kpad = PadKeys(KeyLimit(t));
  return Piece(t.head_dim * KtStride(kpad)) + Piece(t.q_len * kpad) + Piece(t.q_len) +
         ValuesScratch(t, KeyLimit(t)) + Piece(kRowBlock * PadKeys(t.value_dim));
}

static void NaiveHead(const HeadTask& t, float* scratch) {
  const int64_t kmax = KeyLimit(t), kpad = PadKeys(kmax);
  float* kt = scratch;
  float* s = kt + Piece(t.head_dim * KtStride(kpad));
  float* row_lse = s + Piece(t.q_len * kpad);
  float* vpack = row_lse + Piece(t.q_len);
  float* otmp = vpack + ValuesScratch(t, kmax);
  PackKeysT(t.k, t.k_row, t.k_dim, 0, kmax, kpad, t.head_dim, kt, KtStride(kpad));

  int64_t i = 0;
  for (; i + kRowBlock <= t.q_len; i += kRowBlock) {
    float* dst[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) dst[r] = s + (i + r) * kpad;
    QkRows<kRowBlock>(t, i, kt, kpad, kmax, t.mask, t.scale, dst);
  }
  for (; i < t.q_len; ++i) {
    float* dst[1] = {s + i * kpad};
    QkRows<1>(t, i, kt, kpad, kmax, t.mask, t.scale, dst);
  }

  for (i = 0; i < t.q_len; ++i) {
    float* row = s + i * kpad;
    SoftmaxRow(row, kpad, &row_lse[i]);
    if (t.lse) t.lse[i * t.lse_row] = row_lse[i];
    if (t.weights) {
      float* w = t.weights + i * t.w_row;
      for (int64_t j = 0; j < t.kv_len; ++j) w[j * t.w_col] = j < kmax ? row[j] : 0.0f;
    }
  }

  int64_t v_row = 0;
  const float* v = PrepareValues(t, kmax, vpack, &v_row);
  const plan::RowKeys none{0, 0, 0, 0};
  i = 0;
  for (; i + kRowBlock <= t.q_len; i += kRowBlock) {
    const float* p[kRowBlock];
    plan::RowKeys keys[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) {
      p[r] = s + (i + r) * kpad;
      keys[r] = row_lse[i + r] == -__builtin_inff()
                    ? none
                    : plan::KeysOf(t.mask, t.mask.q_start + i + r, t.kv_len);
    }
    AvStoreRows<kRowBlock>(t, i, p, 1, v, v_row, keys, otmp);
  }
  for (; i < t.q_len; ++i) {
    const float* p[1] = {s + i * kpad};
    plan::RowKeys keys[1] = {row_lse[i] == -__builtin_inff()
                                 ? none
                                 : plan::KeysOf(t.mask, t.mask.q_start + i, t.kv_len)};
    AvStoreRows<1>(t, i, p, 1, v, v_row, keys, otmp);
  }
}

// Stage: unscaled, unmasked q k^T into task.weights, kRowBlock rows at a time.
static size_t ScoresScratchFloats(const HeadTask& t) {
  const int64_t kpad = PadKeys(t.kv_len);
  return Piece(t.head_dim * KtStride(kpad)) + Piece(kRowBlock * kpad);
}

static void ScoresHead(const HeadTask& t, float* scratch) {
  const int64_t kpad = PadKeys(t.kv_len);
  float* kt = scratch;
  float* s = kt + Piece(t.head_dim * KtStride(kpad));
  PackKeysT(t.k, t.k_row, t.k_dim, 0, t.kv_len, kpad, t.head_dim, kt, KtStride(kpad));
  const plan::Mask full{0, 0, 0, 0};
  for (int64_t i = 0; i < t.q_len; i += kRowBlock) {
    const int64_t rows = plan::MinI(kRowBlock, t.q_len - i);
    float* dst[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) dst[r] = s + r * kpad;
    if (rows == kRowBlock) {
      QkRows<kRowBlock>(t, i, kt, kpad, t.kv_len, full, 1.0f, dst);
    } else {
      for (int r = 0; r < rows; ++r) QkRows<1>(t, i + r, kt, kpad, t.kv_len, full, 1.0f, &dst[r]);
    }
    for (int r = 0; r < rows; ++r) {
      float* w = t.weights + (i + r) * t.w_row;
      for (int64_t j = 0; j < t.kv_len; ++j) w[j * t.w_col] = dst[r][j];
    }
  }
}

// Stage: o = weights v over every key (task.weights is the input).
static size_t WeightedSumScratchFloats(const HeadTask& t) {
  return ValuesScratch(t, t.kv_len) + Piece(kRowBlock * PadKeys(t.value_dim));
}

static void WeightedSumHead(const HeadTask& t, float* scratch) {
  int64_t v_row = 0;
  const float* v = PrepareValues(t, t.kv_len, scratch, &v_row);
  float* otmp = scratch + ValuesScratch(t, t.kv_len);
  const plan::RowKeys all{0, t.kv_len, 0, 0};
  int64_t i = 0;
  for (; i + kRowBlock <= t.q_len; i += kRowBlock) {
    const float* p[kRowBlock];
    plan::RowKeys keys[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) {
      p[r] = t.weights + (i + r) * t.w_row;
      keys[r] = all;
    }
    AvStoreRows<kRowBlock>(t, i, p, t.w_col, v, v_row, keys, otmp);
  }
  for (; i < t.q_len; ++i) {
    const float* p[1] = {t.weights + i * t.w_row};
    plan::RowKeys keys[1] = {all};
    AvStoreRows<1>(t, i, p, t.w_col, v, v_row, keys, otmp);
  }
}

