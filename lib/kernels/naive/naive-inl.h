// The naive path: the scores of one head materialized in scratch, then softmax, then the
// weighted sum. Included inside a per-target namespace that defines the SIMD vocabulary
// S, after the common, qk, softmax, mods and av families.

static size_t NaiveF32ScratchFloats(const Operands& t) {
  const int64_t kend = base::KeyEnd(t.mask, t.mask.q_start + t.q_len, t.kv_len);
  const int64_t kpad = PadKeys(kend);
  size_t n = Piece2(t.head_dim, KtStride(kpad));
  n = base::SatAdd(n, Piece2(t.q_len, kpad));
  n = base::SatAdd(n, base::SatMul(2, Piece(base::Count(t.q_len))));  // row_lse, row_any
  n = base::SatAdd(n, ValuesScratch(kend, t.value_dim, t.v_dim));
  n = base::SatAdd(n, Piece2(kRowBlock, PadKeys(t.value_dim)));
  // With modifiers: each row's hole bits (two floats per word).
  if (t.mods.Scores()) n = base::SatAdd(n, Piece2(t.q_len, 2 * HoleWords(kpad)));
  if (t.mods.Listed()) n = base::SatAdd(n, Piece2(1, 2 * HoleWords(kpad)));  // a row's lists
  if (t.key_acc) n = base::SatAdd(n, Piece(base::Count(kend)));              // key scores' sums
  return n;
}

// Key scores: each key's weights over the head's rows (s, kpad apart, normalized), the
// rows in order, only the pairs a row reads (its keys, no hole: those its weighted sum
// reads), then each key's sum once.
template <typename KeysOf, typename HolesOf>
static void NaiveKeyScores(const Operands& t, const float* s, int64_t kpad, int64_t kend,
                           const float* row_any, KeysOf keys_of, HolesOf holes_of, float* sums) {
  for (int64_t j = 0; j < kend; ++j) sums[j] = 0.0f;
  for (int64_t i = 0; i < t.q_len; ++i) {
    if (row_any[i] == 0.0f) continue;
    const float* row = s + i * kpad;
    const base::RowKeys k = keys_of(i);
    const uint64_t* h = holes_of(i);
    auto add = [&](int64_t j) {
      if (!h || !HoleAt(h, j)) sums[j] += row[j];
    };
    if (k.stride > 0)
      for (int64_t j = base::NextOnStride(k.strided_begin, k.stride, k.phase); j < k.strided_end;
           j += k.stride)
        add(j);
    for (int64_t j = k.lo; j < k.hi; ++j) add(j);
  }
  for (int64_t j = 0; j < kend; ++j) AddKeyScore(t.key_acc + j, sums[j]);
}

// o row i = sum of the row's keys other than its holes, one row at a time.
static inline void AvStoreRowHoles(const Operands& t, int64_t i, const float* p, const float* v,
                                   int64_t v_row, const base::RowKeys& keys, const uint64_t* holes,
                                   float* tmp) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const int64_t dvp = PadKeys(t.value_dim);
  const bool direct = t.o_dim == 1 && t.value_dim % L == 0;
  float* dst = direct ? t.o + i * t.o_row : tmp;
  const float* pr[1] = {p};
  for (int64_t c0 = 0; c0 < dvp; c0 += L) {
    typename S::V acc[1][1] = {{S::Zero()}};
    AvRowHoles<1>(KeyData{pr, 1, v + c0, v_row, 0}, p, keys, holes, acc);
    S::Store(acc[0][0], dst + c0);
  }
  if (!direct)
    for (int64_t d = 0; d < t.value_dim; ++d) t.o[i * t.o_row + d * t.o_dim] = dst[d];
}

// Key lists: the keys of [0, kend) that row i's lists name, as bits of `words` words.
static void NaiveListedBits(const Operands& t, int64_t i, int64_t kend, uint64_t* bits,
                            int64_t words) {
  for (int64_t w = 0; w < words; ++w) bits[w] = 0;
  ForEachListed(t.mods, i, [&](int64_t j) {
    if (j < kend) SetHole(bits, j);
  });
}

// With modifiers: each row's raw scores (s, kpad apart) get them, then the analytic mask
// and the row's holes (hole_words words a row from `holes`). With key lists (`listed`:
// a row of hole_words words), every key a row's lists do not name is a hole.
static void NaiveModRows(const Operands& t, float* s, int64_t kpad, int64_t kend, uint64_t* holes,
                         int64_t hole_words, uint64_t* listed) {
  for (int64_t i = 0; i < t.q_len; ++i) {
    uint64_t* h = holes + i * hole_words;
    for (int64_t w = 0; w < hole_words; ++w) h[w] = 0;
    if (listed) {
      NaiveListedBits(t, i, kend, listed, hole_words);
      for (int64_t w = 0; w < hole_words; ++w) h[w] = ~listed[w];
    }
    const int64_t qpos = t.mask.q_start + i;
    const RowMods m = RowModsOf(t.mods, 0, i, qpos);
    const base::RowKeys k = base::KeysOf(t.mask, qpos, t.kv_len);
    if (m.Keeps()) {
      const bool strided = k.stride > 0 && k.strided_end > k.strided_begin;
      const int64_t jb = strided ? k.strided_begin : k.lo;
      const int64_t je = k.hi > k.lo ? k.hi : (strided ? k.strided_end : jb);
      ScanKeep(m, 0, 1, 0, jb, base::MaxI(jb, je), h);
    }
    float* row = s + i * kpad;
    ModRow(row, 0, kpad, 0, kend, 0, 1, m, h);
    // Holes outside the row's keys change nothing: cleared, the row's value sum then
    // takes the blocked path.
    if (!MaskRowLanes(row, 0, kpad, 0, kend, k, h))
      for (int64_t w = 0; w < hole_words; ++w) h[w] = 0;
  }
}

static void NaiveF32Head(const Operands& t, float* scratch) {
  // Keys [kbegin, kend) and the strided columns below are the only ones a row of this
  // head may read: nothing else is loaded (other packed keys are zeros, and masked).
  const int64_t kend = base::KeyEnd(t.mask, t.mask.q_start + t.q_len, t.kv_len);
  const int64_t kbegin = base::MinI(base::KeyBegin(t.mask, t.mask.q_start), kend);
  const base::StridedColumns below = base::StridedBelow(t.mask, t.mask.q_start);
  const int64_t kpad = PadKeys(kend);
  const bool modded = t.mods.Scores();
  const int64_t hole_words = HoleWords(kpad);
  float* kt = scratch;
  float* s = kt + Piece2(t.head_dim, KtStride(kpad));
  float* row_lse = s + Piece2(t.q_len, kpad);
  float* row_any = row_lse + Piece(base::Count(t.q_len));
  float* vpack = row_any + Piece(base::Count(t.q_len));
  float* otmp = vpack + ValuesScratch(kend, t.value_dim, t.v_dim);
  uint64_t* holes = reinterpret_cast<uint64_t*>(otmp + Piece2(kRowBlock, PadKeys(t.value_dim)));
  const size_t hole_floats = modded ? Piece2(t.q_len, 2 * hole_words) : 0;
  const size_t list_floats = t.mods.Listed() ? Piece2(1, 2 * hole_words) : 0;
  uint64_t* listed = t.mods.Listed() ? holes + hole_floats / 2 : nullptr;
  PackKeysT(t.k, t.k_row, t.k_dim, 0, kbegin, kend, below, kpad, t.head_dim, kt,
            KeyLayout::Flat(KtStride(kpad)));

  int64_t i = 0;
  for (; i + kRowBlock <= t.q_len; i += kRowBlock) {
    float* dst[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) dst[r] = s + (i + r) * kpad;
    QkRows<kRowBlock>(t.q, t.q_row, t.q_dim, t.head_dim, i, kt, kpad, kend, t.kv_len, t.mask,
                      t.scale, dst, modded);
  }
  for (; i < t.q_len; ++i) {
    float* dst[1] = {s + i * kpad};
    QkRows<1>(t.q, t.q_row, t.q_dim, t.head_dim, i, kt, kpad, kend, t.kv_len, t.mask, t.scale, dst,
              modded);
  }

  const base::RowKeys none{0, 0, 0, 0, 0};
  auto keys_of = [&](int64_t row) { return base::KeysOf(t.mask, t.mask.q_start + row, t.kv_len); };
  auto row_holes = [&](int64_t row) { return holes + row * hole_words; };
  if (modded) NaiveModRows(t, s, kpad, kend, holes, hole_words, listed);

  for (i = 0; i < t.q_len; ++i) {
    float* row = s + i * kpad;
    const float sink = t.mods.sinks ? t.mods.sinks[0] : -__builtin_inff();
    // A row whose every allowed score is -inf reads no value row (row_any 0).
    row_any[i] = SoftmaxRow(row, kpad, &row_lse[i], sink) ? 1.0f : 0.0f;
    if (t.lse) t.lse[i * t.lse_row] = row_lse[i];
    if (t.weights) {
      float* w = t.weights + i * t.w_row;
      for (int64_t j = 0; j < t.kv_len; ++j) w[j * t.w_col] = j < kend ? row[j] : 0.0f;
    }
  }

  if (t.key_acc)
    NaiveKeyScores(
        t, s, kpad, kend, row_any, keys_of,
        [&](int64_t row) {
          return modded ? row_holes(row) : static_cast<const uint64_t*>(nullptr);
        },
        reinterpret_cast<float*>(holes) + hole_floats + list_floats);

  int64_t v_row = 0;
  const float* v =
      PrepareValues(t.v, t.v_row, t.v_dim, t.value_dim, 0, kbegin, kend, below, vpack, &v_row);
  auto keys_av = [&](int64_t row) { return row_any[row] == 0.0f ? none : keys_of(row); };
  auto has_holes = [&](int64_t row) {
    if (!modded) return false;
    const uint64_t* h = row_holes(row);
    for (int64_t w = 0; w < hole_words; ++w)
      if (h[w]) return true;
    return false;
  };
  i = 0;
  for (; i + kRowBlock <= t.q_len; i += kRowBlock) {
    const float* p[kRowBlock];
    base::RowKeys keys[kRowBlock];
    bool holey = false;
    for (int r = 0; r < kRowBlock; ++r) {
      p[r] = s + (i + r) * kpad;
      keys[r] = keys_av(i + r);
      holey |= has_holes(i + r);
    }
    if (!holey) {
      AvStoreRows<kRowBlock>(t.o, t.o_row, t.o_dim, t.value_dim, i, KeyData{p, 1, v, v_row, 0},
                             keys, otmp);
      continue;
    }
    for (int r = 0; r < kRowBlock; ++r)
      AvStoreRowHoles(t, i + r, p[r], v, v_row, keys[r], row_holes(i + r), otmp);
  }
  for (; i < t.q_len; ++i) {
    const float* p[1] = {s + i * kpad};
    base::RowKeys keys[1] = {keys_av(i)};
    if (has_holes(i)) {
      AvStoreRowHoles(t, i, p[0], v, v_row, keys[0], row_holes(i), otmp);
    } else {
      AvStoreRows<1>(t.o, t.o_row, t.o_dim, t.value_dim, i, KeyData{p, 1, v, v_row, 0}, keys, otmp);
    }
  }
}

// 16-bit operands: the head's q rows and the keys and values its rows may read widened
// into f32 rows of scratch (exact), o computed there and narrowed (round to nearest
// even).
// Null `scratch`: only the widened operands' strides (for the size function).
static Operands NaiveWidened(const Operands& t, float* scratch, float** o) {
  const int64_t kend = base::KeyEnd(t.mask, t.mask.q_start + t.q_len, t.kv_len);
  const int64_t hd = t.head_dim, dv = t.value_dim;
  Operands w = t;
  w.q_row = w.k_row = hd, w.v_row = w.o_row = dv;
  w.q_dim = w.k_dim = w.v_dim = w.o_dim = 1;
  w.q_type = w.k_type = w.v_type = w.o_type = kF32;
  if (!scratch) return w;
  float* q = scratch;
  float* k = q + Piece2(t.q_len, hd);
  float* v = k + Piece2(kend, hd);
  *o = v + Piece2(kend, dv);
  w.q = q, w.k = k, w.v = v, w.o = *o;
  for (int64_t i = 0; i < t.q_len; ++i)
    WidenRowV(ElemAt(t.q, i * t.q_row, t.q_type), t.q_dim, t.q_type, hd, q + i * hd);
  // Only the rows a query may read (as NaiveF32Head loads them): the others stay
  // unloaded, whatever memory they are in.
  const int64_t kbegin = base::MinI(base::KeyBegin(t.mask, t.mask.q_start), kend);
  const base::StridedColumns below = base::StridedBelow(t.mask, t.mask.q_start);
  for (int64_t j = 0; j < kend; ++j) {
    if (j < kbegin && !below.Has(j)) continue;
    WidenKey(t, j, k + j * hd);
    WidenValue(t, j, v + j * dv);
  }
  return w;
}
static size_t NaiveWidenFloats(const Operands& t) {
  const int64_t kend = base::KeyEnd(t.mask, t.mask.q_start + t.q_len, t.kv_len);
  size_t n = base::SatAdd(Piece2(t.q_len, t.head_dim), Piece2(kend, t.head_dim));
  n = base::SatAdd(n, Piece2(kend, t.value_dim));
  return base::SatAdd(n, Piece2(t.q_len, t.value_dim));
}

static size_t NaiveScratchFloats(const Operands& t) {
  if (t.F32()) return NaiveF32ScratchFloats(t);
  float* o = nullptr;
  return base::SatAdd(NaiveWidenFloats(t), NaiveF32ScratchFloats(NaiveWidened(t, nullptr, &o)));
}

static void NaiveHead(const Operands& t, float* scratch) {
  if (t.F32()) return NaiveF32Head(t, scratch);
  float* o = nullptr;
  const Operands w = NaiveWidened(t, scratch, &o);
  NaiveF32Head(w, scratch + NaiveWidenFloats(t));
  for (int64_t i = 0; i < t.q_len; ++i)
    NarrowRowV(o + i * t.value_dim, t.value_dim, ElemAt(t.o, i * t.o_row, t.o_type), t.o_dim,
               t.o_type);
}
