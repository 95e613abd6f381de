// The naive path: the scores of one head materialized in scratch, then softmax, then the
// weighted sum. Included inside a per-target namespace that defines the SIMD vocabulary
// S, after the common, qk, softmax and av families.

static size_t NaiveScratchFloats(const Operands& t) {
  const int64_t kend = plan::KeyEnd(t.mask, t.mask.q_start + t.q_len, t.kv_len);
  const int64_t kpad = PadKeys(kend);
  size_t n = Piece2(t.head_dim, KtStride(kpad));
  n = plan::SatAdd(n, Piece2(t.q_len, kpad));
  n = plan::SatAdd(n, Piece(plan::Count(t.q_len)));
  n = plan::SatAdd(n, ValuesScratch(kend, t.value_dim, t.v_dim));
  return plan::SatAdd(n, Piece2(kRowBlock, PadKeys(t.value_dim)));
}

static void NaiveHead(const Operands& t, float* scratch) {
  // Keys [kbegin, kend) and the strided columns below are the only ones a row of this
  // head may read: nothing else is loaded (other packed keys are zeros, and masked).
  const int64_t kend = plan::KeyEnd(t.mask, t.mask.q_start + t.q_len, t.kv_len);
  const int64_t kbegin = plan::MinI(plan::KeyBegin(t.mask, t.mask.q_start), kend);
  const plan::Columns below = plan::StridedBelow(t.mask);
  const int64_t kpad = PadKeys(kend);
  float* kt = scratch;
  float* s = kt + Piece2(t.head_dim, KtStride(kpad));
  float* row_lse = s + Piece2(t.q_len, kpad);
  float* vpack = row_lse + Piece(plan::Count(t.q_len));
  float* otmp = vpack + ValuesScratch(kend, t.value_dim, t.v_dim);
  PackKeysT(t.k, t.k_row, t.k_dim, 0, kbegin, kend, below, kpad, t.head_dim, kt,
            KeyLayout::Flat(KtStride(kpad)));

  int64_t i = 0;
  for (; i + kRowBlock <= t.q_len; i += kRowBlock) {
    float* dst[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) dst[r] = s + (i + r) * kpad;
    QkRows<kRowBlock>(t.q, t.q_row, t.q_dim, t.head_dim, i, kt, kpad, kend, t.kv_len, t.mask,
                      t.scale, dst);
  }
  for (; i < t.q_len; ++i) {
    float* dst[1] = {s + i * kpad};
    QkRows<1>(t.q, t.q_row, t.q_dim, t.head_dim, i, kt, kpad, kend, t.kv_len, t.mask, t.scale, dst);
  }

  for (i = 0; i < t.q_len; ++i) {
    float* row = s + i * kpad;
    SoftmaxRow(row, kpad, &row_lse[i]);
    if (t.lse) t.lse[i * t.lse_row] = row_lse[i];
    if (t.weights) {
      float* w = t.weights + i * t.w_row;
      for (int64_t j = 0; j < t.kv_len; ++j) w[j * t.w_col] = j < kend ? row[j] : 0.0f;
    }
  }

  int64_t v_row = 0;
  const float* v =
      PrepareValues(t.v, t.v_row, t.v_dim, t.value_dim, 0, kbegin, kend, below, vpack, &v_row);
  const plan::RowKeys none{0, 0, 0, 0, 0};
  auto keys_of = [&](int64_t row) {
    return row_lse[row] == -__builtin_inff() ? none
                                             : plan::KeysOf(t.mask, t.mask.q_start + row, t.kv_len);
  };
  i = 0;
  for (; i + kRowBlock <= t.q_len; i += kRowBlock) {
    const float* p[kRowBlock];
    plan::RowKeys keys[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) {
      p[r] = s + (i + r) * kpad;
      keys[r] = keys_of(i + r);
    }
    AvStoreRows<kRowBlock>(t.o, t.o_row, t.o_dim, t.value_dim, i, KeyData{p, 1, v, v_row, 0}, keys,
                           otmp);
  }
  for (; i < t.q_len; ++i) {
    const float* p[1] = {s + i * kpad};
    plan::RowKeys keys[1] = {keys_of(i)};
    AvStoreRows<1>(t.o, t.o_row, t.o_dim, t.value_dim, i, KeyData{p, 1, v, v_row, 0}, keys, otmp);
  }
}
