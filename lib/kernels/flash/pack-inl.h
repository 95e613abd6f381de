// The fused path, scratch and packing: a task's scratch pieces, and the tiles it packs
// (K panels, V panels, bf16 value pairs, paged rows, 16-bit rows widened).

// Scratch pieces of a task. 16-bit operands: qw holds the task's q rows widened (rows of
// head_dim floats; with qk_block each row's QRecord); kw and vw a tile's key and value
// rows widened (WidenTile); ksc (qk_block) their keys' block scales (KeyBlockScales).
struct FlashScratch {
  float *run, *cur, *kt, *s_buf, *vpack;
  FlashRow* rows;
  float *qw, *kw, *vw, *ksc;
  float *rec, *sums;  // key scores: a prefill task's records and their sums (RecordSumFloats)
};

// The records of a task's rows (RecordOf its last row) and the scratch that sums them: a
// float per key of the records, then one per row (their lse).
static inline RecordShape TaskRecord(const FlashTask& t) {
  return RecordOf(t.op.mask, t.op.mask.q_start + t.row_end, t.op.kv_len);
}
// Whether a task keeps its rows' records in its scratch: a prefill task with key scores
// (a decode task's, which has a partial, are in the call's shared scratch).
static inline bool KeepsRecords(const FlashTask& t) { return t.op.key_acc && !t.partial; }
static inline size_t RecordSumFloats(const FlashTask& t) {
  const RecordShape r = TaskRecord(t);
  return Piece(base::Count((r.tiles + r.gathered) * kTileKeys + FlashRows(t)));
}

// q row `src` (elements of type t, `dim` apart) rounded into the record at rec.
static inline void QuantizeQRow(const float* src, int64_t dim, Dtype t, int64_t head_dim,
                                int64_t block, float* rec) {
  WidenRowV(src, dim, t, head_dim, rec);
  const int64_t nb = head_dim / block;
  int8_t* bytes = reinterpret_cast<int8_t*>(rec + head_dim + 2 * nb);
  for (int64_t b = 0; b < nb; ++b) {
    rec[head_dim + b] = base::QuantizeQBlock(rec + b * block, block, bytes + b * block);
    int32_t sum = 0;
    for (int64_t d = b * block; d < (b + 1) * block; ++d) sum += bytes[d];
    memcpy(rec + head_dim + nb + b, &sum, 4);
  }
  for (int64_t d = 0; d < head_dim; ++d) rec[d] = static_cast<float>(bytes[d]);
}
// The q rows' piece of a task's scratch: 16-bit rows widened, or QRecords.
static inline size_t QRowsFloats(const FlashTask& t) {
  if (t.op.qk_block) return Piece2(FlashRows(t), QRecordFloats(t.op.head_dim, t.op.qk_block));
  return t.op.q_type != kF32 ? Piece2(FlashRows(t), t.op.head_dim) : 0;
}

// Whether a task's tiles are first widened into rows of scratch (WidenTile): 16-bit or
// quantized keys or values, or key lists (their rows gathered).
static inline bool FlashWidens(const FlashTask& t) {
  return t.op.k_type != kF32 || t.op.v_type != kF32 || t.op.mods.Listed();
}

// Key lists: a task's rows' keys (ListedKeys), then the bitmap that orders them.
static inline size_t ListFloats(const FlashTask& t) {
  const int64_t cap = t.op.mods.ListCapacity();
  if (cap == 0) return 0;
  return base::SatAdd(Piece(base::Count(cap)),
                      Piece(base::SatMul(base::Count(ListBitWords(cap)), 2)));
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
  n = base::SatAdd(n, QRowsFloats(t));
  if (FlashWidens(t)) {
    n = base::SatAdd(n, Piece2(kTileKeys, t.op.head_dim));
    n = base::SatAdd(n, Piece2(kTileKeys, PadKeys(t.op.value_dim)));
  }
  if (t.op.qk_block) n = base::SatAdd(n, Piece2(kTileKeys, t.op.head_dim / t.op.qk_block));
  if (KeepsRecords(t)) {
    n = base::SatAdd(n, Piece2(FlashRows(t), TaskRecord(t).RowFloats()));
    n = base::SatAdd(n, RecordSumFloats(t));
  }
  return base::SatAdd(n, ListFloats(t));  // (last: FlashListedRun finds it from the end)
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
  f.kw = f.qw + QRowsFloats(t);
  f.vw = f.kw + (FlashWidens(t) ? Piece2(kTileKeys, t.op.head_dim) : 0);
  f.ksc = f.vw + (FlashWidens(t) ? Piece2(kTileKeys, PadKeys(t.op.value_dim)) : 0);
  f.rec = f.ksc + (t.op.qk_block ? Piece2(kTileKeys, t.op.head_dim / t.op.qk_block) : 0);
  f.sums = f.rec + (KeepsRecords(t) ? Piece2(FlashRows(t), TaskRecord(t).RowFloats()) : 0);
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
          S::Store(
              S::PairRows(za ? a : ElemAt(a, p0 + c, kBf16), zb ? b : ElemAt(b, p0 + c, kBf16)),
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
                                 int64_t load, int64_t first, int64_t step,
                                 base::StridedColumns below) {
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

// The operands of rows widened into f's scratch (WidenTile): keys of head_dim f32 (bf16
// pairs: head_dim / 2 pairs, each read as one f32), values of PadKeys(value_dim) f32
// (pairs_v: bf16), unpaged.
static inline Operands WidenedOperands(const Operands& op, const FlashScratch& f, bool pairs,
                                       bool pairs_v) {
  const int64_t hd = op.head_dim;
  Operands w = op;
  w.k = f.kw, w.k_row = hd, w.k_dim = 1, w.k_type = kF32;
  if (pairs) w.k_row = w.head_dim = hd / 2;
  w.v = f.vw, w.v_row = PadKeys(op.value_dim), w.v_dim = 1, w.v_type = pairs_v ? kBf16 : kF32;
  w.paging = nullptr;
  return w;
}

// Whether v's rows are the first value_dim elements of k's (v a view of k: MLA's latent
// rows, K = V layers), so that a widened key row holds its value row too.
static inline bool ValuesInKeys(const Operands& op) {
  return op.v == op.k && op.v_type == op.k_type && op.v_row == op.k_row && op.v_dim == op.k_dim &&
         op.value_dim <= op.head_dim && (!op.paging || op.paging->v_block == op.paging->k_block) &&
         (!Quantized(op.k_type) || (!op.k_scales.data && !op.v_scales.data));
}

// Key and value row j of op widened into kr (head_dim floats) and vr (value_dim floats,
// then zeros to PadKeys(value_dim)).
static inline void WidenKeyValue(const Operands& op, int64_t j, float* kr, float* vr) {
  WidenKey(op, j, kr);
  WidenValue(op, j, vr);
  for (int64_t d = op.value_dim; d < PadKeys(op.value_dim); ++d) vr[d] = 0.0f;
}

// 16-bit or quantized keys or values: the rows of keys [t0, t1) of a space whose key g is row first
// + g * step of k and v, those a row may read (as PackTile says), widened into f32 rows of scratch,
// values zero padded to whole vectors: key g at row g - t0. Returns the operands of these rows (key
// g is their row g - t0: first -t0, step 1), whose f32 tile is the same numbers, so the same bits.
// bf16 pairs (FlashPairs): the key rows are copied as they are, and the operands' keys
// are rows of head_dim / 2 pairs, each read as one f32 (PackTile moves them as such).
// Key lists (`keys` set): space key g is row keys[g] of k and v, every one loaded.
static inline Operands WidenTile(const FlashTask& t, const FlashScratch& f, int64_t t0,
                                 int64_t load, int64_t t1, int64_t first, int64_t step,
                                 base::StridedColumns below, const int32_t* keys = nullptr) {
  const Operands& op = t.op;
  const int64_t hd = op.head_dim, dv = op.value_dim, dvp = PadKeys(dv);
  const bool pairs = S::kDotBf16 && op.q_type == kBf16, pairs_v = pairs && FlashPairsV(op);
  // A widened f32 key row holds its value row where v is a view of k: read once.
  const bool in_keys = !pairs && !op.qk_block && ValuesInKeys(op);
  // Quantized rows are a few lines each, which the core's prefetchers miss where the
  // rows lie apart ([T, H, D] caches: a row of every head between two of this head's),
  // as are a key list's rows: the rows kWidenAhead on are fetched while these are
  // widened.
  constexpr int64_t kWidenAhead = 8;
  const bool fetch = (Quantized(op.k_type) && Quantized(op.v_type)) || keys;
  const int64_t kbytes = RowBytes(op.k_type, hd), vbytes = in_keys ? 0 : RowBytes(op.v_type, dv);
  auto row = [&](int64_t g) { return keys ? static_cast<int64_t>(keys[g]) : first + g * step; };
  for (int64_t g = t0; g < t1; ++g) {
    float* vr = f.vw + (g - t0) * dvp;
    const int64_t a = g + kWidenAhead;
    if (fetch && a < t1 && (a >= load || below.Has(a))) {
      const char* kr = reinterpret_cast<const char*>(KeyRow(op, row(a)));
      const char* vn = reinterpret_cast<const char*>(ValueRow(op, row(a)));
      for (int64_t b = 0; b < kbytes; b += 64) __builtin_prefetch(kr + b, 0, 3);
      for (int64_t b = 0; b < vbytes; b += 64) __builtin_prefetch(vn + b, 0, 3);
    }
    if (g >= load || below.Has(g)) {
      const int64_t j = row(g);
      if (pairs) {
        CopyElems(KeyRow(op, j), op.k_dim, hd, ElemAt(f.kw, (g - t0) * hd, kBf16));
      } else if (op.qk_block) {  // integers and block scales (KeyIntegers)
        KeyIntegers(op, j, f.kw + (g - t0) * hd, f.ksc + (g - t0), kTileKeys);
      } else {
        WidenKey(op, j, f.kw + (g - t0) * hd);
      }
      if (pairs_v) {  // bf16 rows of dvp elements (PackValuePairs)
        vr = ElemAt(f.vw, (g - t0) * dvp, kBf16);
        CopyElems(ValueRow(op, j), op.v_dim, dv, vr);
        for (int64_t d = dv; d < dvp; ++d) memset(ElemAt(vr, d, kBf16), 0, 2);
        continue;
      }
      if (in_keys) {
        memcpy(vr, f.kw + (g - t0) * hd, static_cast<size_t>(dv) * sizeof(float));
      } else {
        WidenValue(op, j, vr);
      }
    } else if (op.qk_block)  // (no row reads the key: its scales only kept finite)
      for (int64_t b = 0; b < hd / op.qk_block; ++b) f.ksc[b * kTileKeys + (g - t0)] = 0.0f;
    for (int64_t d = dv; d < dvp && !pairs_v; ++d) vr[d] = 0.0f;
  }
  return WidenedOperands(op, f, pairs, pairs_v);
}

// WidenTile of the full tiles of nh tasks whose kv heads' slices share each key row
// (quantized decode of [T, H, D] caches): row by row, every head's slice of a row in
// turn, so that whole rows stream in order; each head's rows in its own scratch, as
// WidenTile leaves them (every key of the tile loaded).
static inline void WidenTileHeads(const FlashTask* ts, const FlashScratch* fs, int64_t nh,
                                  int64_t t0, int64_t t1, int64_t first, int64_t step,
                                  Operands* out) {
  const int64_t hd = ts[0].op.head_dim, dvp = PadKeys(ts[0].op.value_dim);
  for (int64_t g = t0; g < t1; ++g)
    for (int64_t x = 0; x < nh; ++x)
      WidenKeyValue(ts[x].op, first + g * step, fs[x].kw + (g - t0) * hd,
                    fs[x].vw + (g - t0) * dvp);
  for (int64_t x = 0; x < nh; ++x) out[x] = WidenedOperands(ts[x].op, fs[x], false, false);
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
  if (t.op.qk_block) tile.ksc = f.ksc;        // the widened keys' block scales (WidenTile)
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
