// The fused path, the task: its rows prepared, its units of keys run tile by tile
// (packed or direct), its final states written, and decode's merge of units.

// The rows of nh tasks (one, or kv heads sharing key rows) against a direct tile, in
// blocks of 4, 2 and 1 rows: the scores of kDirectKeys keys of every block of every
// head, then the next keys' (the heads' slices of the same key rows are read together,
// and each group of rows by every block while it is in L1); the softmax updates (a row
// with no readable score yet skips the sums, as in FlashBlock); the weighted sums the
// same way. A row's operations do not depend on nh or on its block. T: the rows' element
// type; kI8 stands for every quantized type (FlashDirectQuant: the loops read the
// operands' own, and blocks of two rows run as two of one).
// A direct tile's fetches (DirectTile::Fetch): where DirectFetch says, value rows
// skipped where they are key rows; on AMD cores f32 rows, bf16 pair rows and bf16 rows
// that lie apart also far ahead into L2 (kDirectFarBytes), on Intel cores contiguous
// 16-bit rows.
static inline void SetDirectFetches(const FlashTask& t, DirectTile* dt) {
  const FetchTo to = DirectFetch(t.op, t.tuning);
  dt->fetch = to != kFetchNone;
  dt->fetch_l2 = to == kFetchL2;
  dt->values_in_keys = ValuesInKeys(t.op);
  // bf16 rows widened in registers take them on the 16-lane targets where the rows lie
  // apart ([T, H, D] and paged caches: a head's slices of the rows, which the core's own
  // prefetchers do not follow), not where they are contiguous (nor on AVX2, nor for f16
  // rows: 0.93-0.97x; ARM64 unmeasured).
  const bool spread_bf16 =
      S::kLanes >= 16 && t.op.k_type == kBf16 && RowsApart(t.op.k_row, t.op.head_dim);
  // On Intel cores contiguous 16-bit rows gained (1.05-1.12x from memory, the same from
  // L3) and f32 rows lost from L3 (0.90-0.93x); there the near fetches' prefetcht0 alone
  // left the rows' loop waiting on memory.
  const bool contiguous16 = S::kLanes >= 16 && (t.op.k_type == kBf16 || t.op.k_type == kF16) &&
                            !RowsApart(t.op.k_row, t.op.head_dim);
  if (t.tuning.vendor_fetch ? contiguous16
                            : t.op.k_type == kF32 || FlashPairsV(t.op) || spread_bf16)
    dt->far = base::MaxI(1, kDirectFarBytes / RowBytes(t.op.k_type, t.op.head_dim));
}

template <Dtype T>
static void FlashDirectTileHeads(const FlashTask* ts, const DirectTile* dts, const FlashScratch* fs,
                                 int64_t nh, int64_t n, float* const* sts, size_t stride) {
  const int64_t t0 = dts[0].t0, t1 = dts[0].t1, dvp = PadKeys(ts[0].op.value_dim);
  const Operands& op0 = ts[0].op;
  const Tuning& tn = ts[0].tuning;
  // (Quantized rows, a few lines each, are read in place, kDirectVecs key vectors a step,
  // one for eight rows.)
  constexpr bool quant = T >= kI8;
  // Quantized rows: a block of two or three rows runs as four, and a block of five to
  // eight as eight (on the eight-lane targets, AVX2, in the scores only), the last row's q
  // again in the others,
  // whose scores and sums go to the tile's scratch (DirectTile::scratch, which these loops
  // do not use otherwise): each key's bytes are turned into values once for the block,
  // where one row at a time turned them once a row (two rows took 2.9x the time per flop
  // of four, three 2.8x) and eight rows as two fours (1.2-1.3x eight's time). Each
  // row's chains are its own: the same bytes. Padded rows' state: 2 floats before whole
  // vectors, as the rows' states lie.
  constexpr int64_t kPadState = kTileKeys + 16 - 2;
  // Eight rows' scores: the 32-register targets, and on AVX2 quantized and bf16 rows, whose
  // eight chains and one key vector's values (some on the stack) cost less than each key
  // widened twice (1.03-1.14x two blocks of four); not f32 and f16 rows, whose two key
  // vectors of four dimensions a step (TransposeRowsHalf) ran faster as two blocks of four.
  // Quantized weighted sums of eight rows only with 32 registers (AVX2: two blocks of
  // four; eight ran 0.93x).
  constexpr bool kScores8 = S::kRegs >= 32 || (S::kLanes == 8 && (quant || T == kBf16));
  constexpr bool quant8 = quant && kScores8, quant8v = quant && S::kRegs >= 32;
  // f32, bf16 and f16 rows: a block of three rows, and of five to eight (kScores8), in
  // the scores (each key vector's transposes shared by the block: 1.07-1.16x
  // two fours at eight rows, 1.08-1.30x four and one to three at five to seven, 1.11-1.36x
  // two and one at three), and in blocks of four, three, two and one in the weighted sums
  // (eight rows' broadcast weights cost more there than the loads of the values they
  // share: 0.88-0.94x); not padded (their scratch stages keys), nor on AMX (its tiles
  // take the rows).
  const bool rows_any = !quant && !FlashAmx(op0);
  const bool rows8 = quant8 || (rows_any && kScores8);
  const bool pad = quant && kPadState + 2 + dvp <= op0.head_dim * kTileKeys;
  if (pad)  // (sums that start at zero, as the rows' do)
    for (int64_t x = 0; x < nh; ++x) memset(dts[x].scratch + kPadState, 0, (2 + dvp) * 4);
  auto blocks = [&](auto&& fn) {
    for (int64_t i = 0; i < n;) {
      const int64_t m = n - i;
      const int64_t h = rows8 && (m >= 8 || ((pad || !quant) && m >= 5)) ? base::MinI(m, 8)
                        : m >= 4                                         ? 4
                        : (pad || rows_any) && m >= 2                    ? m
                        : m >= 2                                         ? 2
                                                                         : 1;
      fn(i, h);
      i += h;
    }
  };
  const bool stage_k = !quant && StageRows(op0.k_row, op0.head_dim, DtypeBytes(T), op0.paging, tn);
  const bool one_vec = !quant && OneKeyVec(op0.k_row, op0.head_dim, DtypeBytes(T), op0.paging, tn);
  for (int64_t j = t0; j < t1; j += kDirectKeys)
    for (int64_t x = 0; x < nh; ++x) {
      const int64_t j1 = base::MinI(j + kDirectKeys, t1);
      DirectTile dt = dts[x];
      if (stage_k) dt.Stage(j, j1, fs[0].kt);
      blocks([&](int64_t i, int64_t h) {
        const float* q[8];
        float* s[8];
        for (int64_t r = 0; r < h; ++r) {
          q[r] = fs[x].rows[i + r].q;
          s[r] = fs[x].s_buf + (i + r) * kTileKeys;
        }
        auto scores = [&](auto vecs) {
          constexpr int V = decltype(vecs)::value;
          if constexpr (quant) {
            if (h >= 2 && (h == 4 || h == 8 || pad)) {
              const int64_t w = h > 4 ? 8 : 4;  // (h > 4: quant8 only)
              for (int64_t r = h; r < w; ++r) {
                q[r] = q[h - 1];
                s[r] = dt.scratch;
              }
              if constexpr (quant8) {
                if (w == 8) return DirectScoresQuantOf<8>(ts[x], dt, q, s, j, j1);
              }
              return DirectScoresQuantOf<4>(ts[x], dt, q, s, j, j1);
            }
            for (int64_t r = 0; r < h; ++r) DirectScoresQuantOf<1>(ts[x], dt, &q[r], &s[r], j, j1);
          } else {
            if constexpr (kScores8) {
              if (h == 8) return DirectScores<8, T, 1>(ts[x], dt, q, s, j, j1);
              if (h == 7) return DirectScores<7, T, 1>(ts[x], dt, q, s, j, j1);
              if (h == 6) return DirectScores<6, T, 1>(ts[x], dt, q, s, j, j1);
              if (h == 5) return DirectScores<5, T, 1>(ts[x], dt, q, s, j, j1);
            }
            if (h == 4) DirectScores<4, T, V>(ts[x], dt, q, s, j, j1);
            if (h == 3) DirectScores<3, T, V>(ts[x], dt, q, s, j, j1);
            if (h == 2) DirectScores<2, T, V>(ts[x], dt, q, s, j, j1);
            if (h == 1) DirectScores<1, T, V>(ts[x], dt, q, s, j, j1);
          }
        };
        if (quant) {
          scores(std::integral_constant<int, kDirectVecs>());
        } else if (one_vec) {
          scores(std::integral_constant<int, 1>());
        } else {
          scores(std::integral_constant<int, kDirectVecs>());
        }
      });
    }
  bool read[kMaxTaskKvHeads][kPackValueRows];
  for (int64_t x = 0; x < nh; ++x)
    for (int64_t r = 0; r < n; ++r) {
      float* st = sts[x] + static_cast<size_t>(r) * stride;
      read[x][r] = SoftmaxTile(fs[x].s_buf + r * kTileKeys, 0, t1 - t0, st, dvp);
      const FlashRow& row = fs[x].rows[r];
      if (read[x][r] && row.rec)
        RecordTile(row, true, t0, fs[x].s_buf + r * kTileKeys, 0, t1 - t0, st[0]);
    }
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
        const float* p[8];
        float* st[8];
        for (int64_t r = 0; r < h; ++r) {
          p[r] = fs[x].s_buf + (i + r) * kTileKeys;
          st[r] = sts[x] + static_cast<size_t>(i + r) * stride;
        }
        if constexpr (quant) {
          for (int64_t b = 0; b < h;) {  // (blocks of eight, or without quant8v four)
            const int64_t hb = base::MinI(h - b, quant8v ? 8 : 4);
            bool all = true;
            for (int64_t r = b; r < b + hb; ++r) all &= read[x][i + r];
            if (all && hb >= 2 && (hb == 4 || hb == 8 || pad)) {
              const int64_t w = hb > 4 ? 8 : 4;
              for (int64_t r = b + hb; r < b + w; ++r) {
                p[r] = p[b + hb - 1];
                st[r] = dt.scratch + kPadState;
              }
              if constexpr (quant8v) {
                if (w == 8) {
                  DirectValuesQuantOf<8>(dt, p + b, st + b, g, g1);
                  b += hb;
                  continue;
                }
              }
              DirectValuesQuantOf<4>(dt, p + b, st + b, g, g1);
            } else {
              for (int64_t r = b; r < b + hb; ++r)
                if (read[x][i + r]) DirectValuesQuantOf<1>(dt, &p[r], &st[r], g, g1);
            }
            b += hb;
          }
        } else {
          for (int64_t b = 0; b < h;) {  // (blocks of four, three, two and one)
            const int64_t hb = h - b >= 4 ? 4 : h - b;
            bool read_all = true;
            for (int64_t r = b; r < b + hb; ++r) read_all &= read[x][i + r];
            if (read_all && hb == 4) {
              DirectValues<4, T>(ts[x], dt, p + b, st + b, g, g1);
            } else if (read_all && hb == 3) {
              DirectValues<3, T>(ts[x], dt, p + b, st + b, g, g1);
            } else if (read_all && hb == 2) {
              DirectValues<2, T>(ts[x], dt, p + b, st + b, g, g1);
            } else {
              for (int64_t r = b; r < b + hb; ++r)
                if (read[x][i + r]) DirectValues<1, T>(ts[x], dt, &p[r], &st[r], g, g1);
            }
            b += hb;
          }
        }
      });
    }
}

// The task whose row r is (a stacked task's: its member's; else t).
static inline const FlashTask& StackedMember(const FlashTask& t, int64_t r) {
  return t.members ? t.members[r / (FlashRows(t) / t.n_members)] : t;
}

// The keys of one unit (the gathered columns, or key span `span` >= 0): its space, its
// keys [begin, end) (space key g is key first + g * step of the operands), the keys
// below `load` that no row reads but the strided columns `below`, and with a mask
// tensor the envelope of every row's kept keys. Sets each row's position in the space.
struct UnitKeys {
  FlashSpace sp;
  int64_t begin, end, first, step, load;
  base::StridedColumns below{0, 0};
  int64_t env_lo, env_hi;
};
static UnitKeys UnitKeysOf(const FlashTask* ts, const FlashScratch* fs, int64_t nh, int64_t span,
                           AmxTiles* amx) {
  const FlashTask& t = ts[0];
  const FlashScratch& f = fs[0];
  const int64_t nq = t.row_end - t.row_begin, rows = FlashRows(t);
  UnitKeys u;
  FlashSpace& sp = u.sp;
  sp.amx = amx;
  if (span < 0) {  // gathered strided columns: plain causal in column space
    sp.mask = base::Mask{1, 0, 0, 0, 0};
    sp.kv_len = 0;
    sp.floors = false;
    sp.first = t.op.mask.phase;
    sp.step = t.op.mask.stride;
    for (int64_t x = 0; x < nh; ++x)
      for (int64_t r = 0; r < rows; ++r) fs[x].rows[r].qpos = fs[x].rows[r].strided - 1;
    for (int64_t r = 0; r < rows; ++r) sp.kv_len = base::MaxI(sp.kv_len, f.rows[r].strided);
    u.begin = 0;
    u.end = sp.kv_len;
    u.first = t.op.mask.phase;  // column g is key phase + g * stride
    u.step = t.op.mask.stride;
    u.load = 0;
  } else {
    sp.mask = t.op.mask;
    sp.kv_len = t.op.kv_len;
    sp.floors = true;
    sp.first = 0;
    sp.step = 1;
    int64_t floor = f.rows[0].floor;
    for (int64_t x = 0; x < nh; ++x)
      for (int64_t r = 0; r < rows; ++r) {
        fs[x].rows[r].qpos = StackedMember(t, r).op.mask.q_start + t.row_begin + r % nq;
        floor = base::MinI(floor, fs[x].rows[r].floor);
      }
    u.begin = base::MaxI(span * kSpanKeys, floor);
    u.end = base::MinI((span + 1) * kSpanKeys, FlashKeyLimit(t));
    u.first = 0;
    u.step = 1;
    u.load = base::KeyBegin(t.op.mask, t.op.mask.q_start + t.row_begin);
    u.below = base::StridedBelow(t.op.mask, t.op.mask.q_start + t.row_begin);
  }
  // With a mask tensor (and no strided columns among the real keys), the tiles outside
  // every row's envelope are neither packed nor read.
  u.env_lo = 0;
  u.env_hi = u.end;
  if (span >= 0 && (t.op.mods.keep || t.op.mods.block_kv > 0) &&
      !(t.op.mask.causal && t.op.mask.window > 0 && t.op.mask.stride > 0)) {
    u.env_lo = u.end;
    u.env_hi = 0;
    for (int64_t r = 0; r < rows; ++r)
      if (f.rows[r].env_lo < f.rows[r].env_hi) {
        u.env_lo = base::MinI(u.env_lo, f.rows[r].env_lo);
        u.env_hi = base::MaxI(u.env_hi, f.rows[r].env_hi);
      }
  }
  return u;
}

// Each task's prefetcher of the unit's key and value rows (contiguous or paged rows of
// whole elements; none otherwise).
static void UnitPrefetches(const FlashTask* ts, int64_t nh, int64_t first, int64_t step,
                           FlashPrefetch* pfs) {
  const Dtype kt = ts[0].op.k_type, vt = ts[0].op.v_type;
  for (int64_t x = 0; x < nh; ++x) {
    FlashPrefetch& pf = pfs[x];
    const Operands& op = ts[x].op;
    if (op.k_dim == 1 && op.v_dim == 1 && op.paging) {  // steps counted in keys
      pf.paged = &op;
      pf.first = first;
      pf.k_step = pf.v_step = step;
      pf.k_bytes = RowBytes(kt, op.head_dim);
      pf.v_bytes = RowBytes(vt, op.value_dim);
    } else if (op.k_dim == 1 && op.v_dim == 1) {
      pf.k = reinterpret_cast<const char*>(ElemAt(op.k, first * op.k_row, op.k_type));
      pf.v = reinterpret_cast<const char*>(ElemAt(op.v, first * op.v_row, op.v_type));
      pf.k_step = op.k_row * step * DtypeBytes(kt);
      pf.v_step = op.v_row * step * DtypeBytes(vt);
      pf.k_bytes = RowBytes(kt, op.head_dim);
      pf.v_bytes = RowBytes(vt, op.value_dim);
    }
  }
}

// Key scores: the records of the tiles of one unit (the gathered columns, or key span
// `span`) of every row marked unread, before the unit reads any.
static void ClearRecords(const FlashTask& t, const FlashScratch* fs, int64_t nh, int64_t span) {
  const int64_t rows = FlashRows(t), per = kSpanKeys / kTileKeys;
  const RecordShape rs = TaskRecord(t);
  for (int64_t x = 0; x < nh; ++x)
    for (int64_t r = 0; r < rows; ++r) {
      const FlashRow& row = fs[x].rows[r];
      // (A stacked task's rows are its members', each with its own records.)
      const int64_t tiles = (row.grec - row.rec) / kRecordFloats;
      float* base = span < 0 ? row.grec : row.rec;
      const int64_t k0 = span < 0 ? 0 : span * per;
      const int64_t k1 = span < 0 ? rs.gathered : base::MinI(k0 + per, tiles);
      for (int64_t k = k0; k < k1; ++k) base[k * kRecordFloats + kTileKeys] = -__builtin_inff();
    }
}

// One unit (the gathered columns, or key span s >= 0) of every row into the fresh states
// sts[x] of each of the nh tasks ts[x] (kv heads sharing key rows: the same rows,
// positions and keys; nh is 1 but for those). `next`: the span the tasks run after this
// unit, or -1: its first tile is prefetched during this unit's last tile (real keys only).
static void FlashUnit(const FlashTask* ts, const FlashScratch* fs, int64_t nh, int64_t span,
                      int64_t next, float* const* sts, AmxTiles* amx) {
  const FlashTask& t = ts[0];
  const FlashScratch& f = fs[0];
  const int64_t nq = t.row_end - t.row_begin, rows = FlashRows(t);
  const size_t stride = FlashStateFloats(t.op.value_dim);
  for (int64_t x = 0; x < nh; ++x) ResetState(sts[x], rows, stride, PadKeys(t.op.value_dim));
  const UnitKeys u = UnitKeysOf(ts, fs, nh, span, amx);
  const FlashSpace& sp = u.sp;
  if (f.rows[0].rec) ClearRecords(t, fs, nh, span);
  const int64_t begin = u.begin, end = u.end, first = u.first, step = u.step, load = u.load;
  const base::StridedColumns below = u.below;
  // Rows are in order of position, so the first and last rows bound what the task reads.
  const int64_t qfirst = f.rows[0].qpos, qlast = f.rows[nq - 1].qpos;
  // Whether a row's block lists (a block mask) hold a key of [t0, t1).
  const bool lists = span >= 0 && t.op.mods.block_kv > 0;
  auto listed = [&](int64_t t0, int64_t t1) {
    const base::RowBlocks* last = nullptr;
    for (int64_t x = 0; x < nh; ++x)
      for (int64_t r = 0; r < rows; ++r) {
        const base::RowBlocks& b = fs[x].rows[r].mod.blocks;
        if (last && b.partial.idx == last->partial.idx && b.full.idx == last->full.idx &&
            b.partial.n == last->partial.n && b.full.n == last->full.n)
          continue;  // the rows of a query block share its lists
        if (base::BlocksAny(b, t0, t1)) return true;
        last = &b;
      }
    return false;
  };
  // The first tile a row reads at or after t0, or end.
  auto next_tile = [&](int64_t t0) {
    for (; t0 < end; t0 = (t0 / kTileKeys + 1) * kTileKeys) {
      const int64_t t1 = base::MinI((t0 / kTileKeys + 1) * kTileKeys, end);
      if (span < 0 ||
          (t1 > u.env_lo && t0 < u.env_hi &&
           base::Classify(sp.mask, qfirst, qlast + 1, t0, t1, sp.kv_len) != base::kTileEmpty &&
           (!lists || listed(t0, t1))))
        break;  // else no row reads this tile: not even packed
    }
    return t0;
  };
  FlashPrefetch pfs[kMaxTaskKvHeads];
  UnitPrefetches(ts, nh, first, step, pfs);
  // The keys to fetch while the tile before t0 (the next tile read) is computed: that
  // tile's, or after the unit's last tile the next span's first.
  auto upcoming = [&](int64_t t0, int64_t* a, int64_t* b) {
    *a = base::MaxI(t0, load);
    *b = base::MinI((t0 / kTileKeys + 1) * kTileKeys, end);
    if (t0 >= end && span >= 0 && next >= 0) {
      *a = base::MaxI(base::MaxI(next * kSpanKeys, begin), load);
      *b = base::MinI((*a / kTileKeys + 1) * kTileKeys, FlashKeyLimit(t));
    }
  };
  const bool direct = span >= 0 && FlashDirect(t, step);
  const bool quant = span >= 0 && FlashDirectQuant(t, step);
  const bool widened = !quant && span >= 0 && FlashDirectWidened(t, step);
  for (int64_t t0 = next_tile(begin); t0 < end;) {
    const int64_t t1 = base::MinI((t0 / kTileKeys + 1) * kTileKeys, end);
    if (widened && t1 - t0 == kTileKeys &&
        base::Classify(sp.mask, qfirst, qlast + 1, t0, t1, sp.kv_len) == base::kTileFull) {
      // A quantized tile every row reads: its rows dequantized, then read in place as f32
      // rows (the bytes of the packed tile of the same values).
      FlashTask wide[kMaxTaskKvHeads];
      DirectTile dts[kMaxTaskKvHeads];
      Operands ops[kMaxTaskKvHeads];
      if (nh > 1) WidenTileHeads(ts, fs, nh, t0, t1, first, step, ops);
      for (int64_t x = 0; x < nh; ++x) {
        wide[x] = ts[x];
        wide[x].op = nh > 1 ? ops[x] : WidenTile(ts[x], fs[x], t0, t0, t1, first, step, below);
        dts[x] = DirectTile{&wide[x].op, -t0, t0, t1, 0, 0, fs[x].kt};
        dts[x].vbuf = fs[x].vpack;
      }
      t0 = next_tile(t1);
      FlashDirectTileHeads<kF32>(wide, dts, fs, nh, rows, sts, stride);
      continue;
    }
    if ((direct || quant) && t1 - t0 == kTileKeys &&
        base::Classify(sp.mask, qfirst, qlast + 1, t0, t1, sp.kv_len) == base::kTileFull) {
      DirectTile dts[kMaxTaskKvHeads];
      const int64_t t_next = next_tile(t1);
      for (int64_t x = 0; x < nh; ++x) {
        dts[x] = DirectTile{&ts[x].op, first, t0, t1, 0, 0, fs[x].kt};
        dts[x].amx = amx;
        dts[x].vbuf = fs[x].vpack;
        SetDirectFetches(ts[x], &dts[x]);
        upcoming(t_next, &dts[x].next0, &dts[x].next1);
        dts[x].SetStream();
        if (WholeRows(t.op, nh)) {
          dts[x].heads = dts;
          dts[x].lg = __builtin_ctzll(static_cast<uint64_t>(nh));
          dts[x].row0 = x * (kDirectKeys / nh);
        }
      }
      t0 = t_next;
      if (quant) {
        // Quantized rows read in place, dequantized in registers (kI8: every quantized
        // type; the loops dispatch on the operands' own and issue their own fetches).
        if constexpr (S::kQuantRows) FlashDirectTileHeads<kI8>(ts, dts, fs, nh, rows, sts, stride);
      } else if (t.op.k_type == kBf16) {
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

// Where row r of a task keeps its q in scratch (qw: the scratch's first): int8 records,
// bf16 pairs or widened f32 rows, one size per row.
static inline float* QScratchRow(const FlashTask& t, float* qw, int64_t r) {
  const int64_t hd = t.op.head_dim;
  if (t.op.qk_block) return qw + r * QRecordFloats(hd, t.op.qk_block);
  return FlashPairs(t.op) ? ElemAt(qw, r * hd, kBf16) : qw + r * hd;
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
  const int64_t qk = task.op.qk_block;
  FlashTask t = task;
  if (wide_q || qk) t.op.q_dim = 1, t.op.q_type = pairs ? kBf16 : kF32;
  const bool has_strided = t.op.mask.causal && t.op.mask.window > 0 && t.op.mask.stride > 0;
  const RecordShape rs = TaskRecord(task);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = r / nq, i = t.row_begin + r % nq;
    FlashRow& row = f.rows[r];
    row.rec = task.rec ? task.rec + r * rs.RowFloats() : nullptr;
    row.grec = task.rec ? row.rec + rs.tiles * kRecordFloats : nullptr;
    row.q = ElemAt(task.op.q, h * task.op.q_head + i * task.op.q_row, task.op.q_type);
    float* qr = QScratchRow(task, f.qw, r);
    if (qk) {  // rounded to int8 (QRecord): the rows' integers, scales and sums
      QuantizeQRow(row.q, task.op.q_dim, task.op.q_type, hd, qk, qr);
      row.q = qr;
    } else if (pairs) {
      CopyElems(row.q, task.op.q_dim, hd, qr);
      row.q = qr;
    } else if (wide_q) {
      WidenRowV(row.q, task.op.q_dim, task.op.q_type, hd, qr);
      row.q = qr;
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
    if (row.mod.keep && !row.mod.keep_bits && r + kEnvelopeAhead < rows) {
      // The mask rows' ends are read backward, each from a new place: fetched a few rows
      // ahead, so that the lines arrive before their row's scan.
      const int64_t ra = r + kEnvelopeAhead, ha = ra / nq, ia = t.row_begin + ra % nq;
      const int64_t end = base::KeysOf(t.op.mask, t.op.mask.q_start + ia, t.op.kv_len).hi;
      const uint8_t* m = t.op.mods.keep + ha * t.op.mods.keep_head + ia * t.op.mods.keep_row;
      if (end > 0) __builtin_prefetch(m + (end - 1) * t.op.mods.keep_col, 0, 0);
      if (end > 64) __builtin_prefetch(m + (end - 65) * t.op.mods.keep_col, 0, 0);
    }
    if (row.mod.Keeps()) {
      const KeySpan env = KeepEnvelope(row.mod, k.lo, k.hi);
      row.env_lo = env.begin;
      row.env_hi = env.end;
    }
  }
  return t;
}

// Key scores: adds the weights the records `rec` of a task's rows hold, exp(s - lse) for
// each row's lse (lses[r]), to the sums of their keys (op.key_acc): each key's weights in
// row order in f32 (`sums`: RecordSumFloats), then the sum once (`alone`: no other task
// adds to these keys, a decode merge's, so without atomic operations). Pairs a row does
// not read hold 0 and add nothing (also in a row whose lse is NaN).
static void AddRecords(const FlashTask& t, const float* lses, const float* rec, float* sums,
                       bool alone) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const RecordShape rs = TaskRecord(t);
  const int64_t rows = FlashRows(t), tiles = rs.tiles + rs.gathered;
  for (int64_t j = 0; j < tiles * kTileKeys; j += L) S::Store(S::Zero(), sums + j);
  for (int64_t r = 0; r < rows; ++r) {
    if (lses[r] == -__builtin_inff()) continue;  // no key read
    const float* row = rec + r * rs.RowFloats();
    for (int64_t k = 0; k < tiles; ++k) {
      const float* p = row + k * kRecordFloats;
      if (p[kTileKeys] == -__builtin_inff()) continue;  // no key of the tile read
      const float f = ExpScalar(p[kTileKeys] - lses[r]);
      float* c = sums + k * kTileKeys;
      if (f - f == 0.0f) {  // finite: a weight of 0 stays 0
        const typename S::V vf = S::Set(f);
        for (int64_t j = 0; j < kTileKeys; j += L)
          S::Store(S::MulAdd(S::Load(p + j), vf, S::Load(c + j)), c + j);
        continue;
      }
      for (int64_t j = 0; j < kTileKeys; ++j)
        if (p[j] != 0.0f) c[j] += p[j] * f;
    }
  }
  int64_t* acc = t.op.key_acc;
  // (The last tile's keys past kv_len are another kv head's sums: not touched.)
  const int64_t real = base::MinI(rs.tiles * kTileKeys, t.op.kv_len);
  bool plain = alone;  // every sum a number below 2^19 (KeyScoreUnits'), added alone
  for (int64_t j = 0; plain && j < real; ++j) plain = sums[j] < 524288.0f || sums[j] == 0.0f;
  if (plain) {
    for (int64_t j = 0; j < real; ++j) acc[j] += KeyScoreUnits(sums[j]);
  } else {
    for (int64_t j = 0; j < real; ++j)
      if (sums[j] != 0.0f) AddKeyScore(acc + j, sums[j]);
  }
  const float* g = sums + rs.tiles * kTileKeys;
  for (int64_t c = 0; c < rs.gathered * kTileKeys; ++c)
    if (g[c] != 0.0f) AddKeyScore(acc + t.op.mask.phase + c * t.op.mask.stride, g[c]);
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
    const float sink = t.op.mods.sinks ? t.op.mods.sinks[h] : -__builtin_inff();
    FinishRow(st, dvp, t.op.value_dim,
              ElemAt(t.op.o, h * t.op.o_head + i * t.op.o_row, t.op.o_type), t.op.o_dim,
              t.op.o_type, t.op.lse ? t.op.lse + h * t.op.lse_head + i * t.op.lse_row : nullptr,
              f.cur, sink);
    if (t.rec && !t.partial) {
      float factor;
      f.sums[(TaskRecord(t).tiles + TaskRecord(t).gathered) * kTileKeys + r] =
          RowLse(st, sink, &factor);
    }
  }
  if (t.rec && !t.partial) {
    const RecordShape rs = TaskRecord(t);
    AddRecords(t, f.sums + (rs.tiles + rs.gathered) * kTileKeys, t.rec, f.sums, false);
  }
}

// Cascade decode (FlashTask::members): one span of every member, their rows stacked as
// one task's rows (member x's from x * FlashRows(member) on), so that each tile of the
// shared keys is read, and packed, once for all of them. A row's operations are those
// of its own task: they do not depend on the other rows of its tile or block (prefill's
// rows and decode's go through the same ones).
static void FlashStackedRun(const FlashTask& task, float* scratch) {
  const int64_t nh = base::MinI(base::MaxI(task.n_members, 1), kMaxTaskKvHeads);
  const int64_t per = FlashRows(task.members[0]);
  const size_t stride = FlashStateFloats(task.op.value_dim);
  FlashTask all = task.members[0];
  all.heads *= nh;
  all.members = task.members;
  all.n_members = nh;
  all.kv_heads = 1;
  all.gathered = 0;
  all.span_begin = task.span_begin;
  all.span_end = task.span_end;
  const FlashScratch f = Carve(all, scratch);
  FlashTask ts[kMaxTaskKvHeads];
  for (int64_t x = 0; x < nh; ++x) {
    FlashTask tx = task.members[x];
    tx.kv_heads = 1;
    tx.members = nullptr;
    tx.n_members = 0;
    FlashScratch fx = f;
    fx.rows = f.rows + x * per;
    fx.qw = QScratchRow(tx, f.qw, x * per);
    ts[x] = PrepareRows(tx, fx);
  }
  const FlashTask prepared = ts[0];
  all.op = prepared.op;  // (the rows' q as prepared: their element type)
  float* sts[1] = {f.run};
  AmxTiles amx;
  FlashUnit(&all, &f, 1, task.span_begin, -1, sts, &amx);
  amx.Release();
  for (int64_t x = 0; x < nh; ++x) {
    FlashScratch fx = f;
    fx.run = f.run + static_cast<size_t>(x * per) * stride;
    FinishRows(ts[x], fx);
  }
}

// Key lists: `n` listed keys (`keys`, ascending) of a task of one query row into the fresh
// states st, a tile of them at a time gathered (widened) into rows of scratch, then packed
// and read by the rows in blocks as real keys are; or, a few rows' tile of keys mostly in
// runs (ListedDirect), read in place as a dense decode tile is. The same bytes either way.
static void FlashListedUnit(const FlashTask& t, const FlashScratch& f, const int32_t* keys,
                            int64_t n, float* st, AmxTiles* amx) {
  const int64_t rows = FlashRows(t);
  const size_t stride = FlashStateFloats(t.op.value_dim);
  ResetState(st, rows, stride, PadKeys(t.op.value_dim));
  FlashSpace sp;
  sp.mask = base::Mask{0, 0, 0, 0, 0};  // (each key is one the analytic mask allows)
  sp.kv_len = n;
  sp.floors = false;
  sp.first = 0;
  sp.step = 1;
  sp.amx = amx;
  sp.keys = keys;
  for (int64_t r = 0; r < rows; ++r) f.rows[r].qpos = 0;
  const base::StridedColumns none{0, 0};
  FlashPrefetch pf;
  for (int64_t t0 = 0; t0 < n; t0 += kTileKeys) {
    const int64_t t1 = base::MinI(t0 + kTileKeys, n);
    if (t1 - t0 == kTileKeys && ListedDirect(t, keys, t0, t1)) {  // in place, as FlashDirect
      DirectTile dt{&t.op, 0, t0, t1, t1, base::MinI(t1 + kTileKeys, n), f.kt};
      dt.keys = keys;
      dt.vbuf = f.vpack;
      SetDirectFetches(t, &dt);
      if (t.op.k_type == kBf16) {
        FlashDirectTileHeads<kBf16>(&t, &dt, &f, 1, rows, &st, stride);
      } else if (t.op.k_type == kF16) {
        FlashDirectTileHeads<kF16>(&t, &dt, &f, 1, rows, &st, stride);
      } else {
        FlashDirectTileHeads<kF32>(&t, &dt, &f, 1, rows, &st, stride);
      }
      continue;
    }
    FlashTask wide = t;
    wide.op = WidenTile(t, f, t0, t0, t1, 0, 1, none, keys);
    const FlashTile tile = PackTile(wide, f, t0, t0, t1, -t0, 1, none);
    FlashHeadTile(wide, sp, tile, f.rows, rows, st, stride, f.s_buf, &pf);
  }
}

// A task of key lists: each query row in turn, its query heads' rows against its own keys
// (ListedKeys), in units of kSpanKeys of them: [span_begin, span_end) merged in order as
// FlashTaskRun merges key spans, into o and lse or the task's partial (decode: one unit).
// A row's operations depend on its keys alone, whatever the other rows of its task.
static void FlashListedRun(const FlashTask& task, float* scratch) {
  const int64_t nq = task.row_end - task.row_begin, dvp = PadKeys(task.op.value_dim);
  const size_t stride = FlashStateFloats(task.op.value_dim);
  float* lists = scratch + FlashTaskScratchFloats(task) - ListFloats(task);
  int32_t* keys = reinterpret_cast<int32_t*>(lists);
  uint64_t* bits =
      reinterpret_cast<uint64_t*>(lists + Piece(base::Count(task.op.mods.ListCapacity())));
  AmxTiles amx;
  for (int64_t i = task.row_begin; i < task.row_end; ++i) {
    FlashTask one = task;
    one.row_begin = i;
    one.row_end = i + 1;
    one.partial = nullptr;
    const FlashScratch f = Carve(one, scratch);
    one = PrepareRows(one, f);
    const int64_t n = ListedKeys(task.op.mods, i, task.op.mask, task.op.mask.q_start + i,
                                 task.op.kv_len, keys, bits);
    bool first = true;
    for (int64_t c = task.span_begin; c < task.span_end; ++c) {
      const int64_t k0 = base::MinI(c * kSpanKeys, n), k1 = base::MinI(k0 + kSpanKeys, n);
      FlashListedUnit(one, f, keys + k0, k1 - k0, first ? f.run : f.cur, &amx);
      if (!first)
        for (int64_t h = 0; h < task.heads; ++h)
          MergeState(f.run + h * stride, f.cur + h * stride, dvp);
      first = false;
    }
    if (first) ResetState(f.run, task.heads, stride, dvp);
    if (!task.partial) {
      FinishRows(one, f);
      continue;
    }
    for (int64_t h = 0; h < task.heads; ++h)  // row h * nq + (i - row_begin) of the partial
      memcpy(task.partial + (h * nq + i - task.row_begin) * stride, f.run + h * stride,
             stride * sizeof(float));
  }
  amx.Release();
}

static void FlashTaskRun(const FlashTask& task, float* scratch) {
  if (task.op.mods.Listed()) return FlashListedRun(task, scratch);
  if (task.members) return FlashStackedRun(task, scratch);
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
    if (tx.op.k_scales.data)
      tx.op.k_scales.data = ElemAt(static_cast<const float*>(task.op.k_scales.data), x * task.ks_kv,
                                   task.op.k_scales.type);
    if (tx.op.v_scales.data)
      tx.op.v_scales.data = ElemAt(static_cast<const float*>(task.op.v_scales.data), x * task.vs_kv,
                                   task.op.v_scales.type);
    tx.op.o = ElemAt(task.op.o, x * task.o_kv, task.op.o_type);
    if (task.op.lse) tx.op.lse = task.op.lse + x * task.lse_kv;
    if (task.partial) tx.partial = task.partial + x * task.partial_kv;
    fs[x] = Carve(tx, scratch + static_cast<size_t>(x) * piece);
    if (task.rec) tx.rec = task.rec + x * task.rec_kv;     // decode: the pair's, shared
    if (tx.op.key_acc && !tx.partial) tx.rec = fs[x].rec;  // prefill: its scratch's
    ts[x] = PrepareRows(tx, fs[x]);
  }
  const bool has_strided =
      task.op.mask.causal && task.op.mask.window > 0 && task.op.mask.stride > 0;
  bool first = true;
  AmxTiles amx;
  auto unit = [&](int64_t span) {
    const int64_t next = span >= 0 && span + 1 < task.span_end ? span + 1 : -1;
    float* sts[kMaxTaskKvHeads];
    for (int64_t x = 0; x < nh; ++x) sts[x] = first ? fs[x].run : fs[x].cur;
    FlashUnit(ts, fs, nh, span, next, sts, &amx);
    if (!first)
      for (int64_t x = 0; x < nh; ++x)
        for (int64_t r = 0; r < rows; ++r)
          MergeState(fs[x].run + r * stride, fs[x].cur + r * stride, dvp);
    first = false;
  };
  if (task.gathered && has_strided) unit(-1);
  for (int64_t c = task.span_begin; c < task.span_end; ++c) unit(c);
  amx.Release();
  for (int64_t x = 0; x < nh; ++x) {
    if (first) ResetState(fs[x].run, rows, stride, dvp);
    FinishRows(ts[x], fs[x]);
  }
}

// Merges the unit partials of a task's rows in unit order and writes o and lse (with key
// scores, then adds the weights of the task's records, t.rec). `scratch`: FlashStateFloats
// + Piece(PadKeys(value_dim)) floats, then with key scores RecordSumFloats.
static void FlashMerge(const FlashTask& t, const float* partials, int64_t units, float* scratch) {
  const int64_t rows = FlashRows(t), dvp = PadKeys(t.op.value_dim), nq = t.row_end - t.row_begin;
  const size_t stride = FlashStateFloats(t.op.value_dim);
  // The first partial is copied, the next ones merged: as FlashTaskRun does in one task.
  float* run = scratch;
  float* tmp = run + stride;
  float* sums = tmp + Piece(base::Count(dvp));  // key scores: RecordSumFloats
  const RecordShape rs = TaskRecord(t);
  float* lses = sums + (rs.tiles + rs.gathered) * kTileKeys;
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t d = 0; d < stride; ++d) run[d] = partials[r * stride + d];
    for (int64_t c = 1; c < units; ++c)
      MergeState(run, partials + (c * rows + r) * static_cast<int64_t>(stride), dvp);
    const int64_t h = r / nq, i = t.row_begin + r % nq;
    const float sink = t.op.mods.sinks ? t.op.mods.sinks[h] : -__builtin_inff();
    FinishRow(run, dvp, t.op.value_dim,
              ElemAt(t.op.o, h * t.op.o_head + i * t.op.o_row, t.op.o_type), t.op.o_dim,
              t.op.o_type, t.op.lse ? t.op.lse + h * t.op.lse_head + i * t.op.lse_row : nullptr,
              tmp, sink);
    float factor;
    if (t.rec) lses[r] = RowLse(run, sink, &factor);
  }
  if (t.rec) AddRecords(t, lses, t.rec, sums, true);
}
