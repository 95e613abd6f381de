// The fused path, blocks: R rows against a packed tile (scores, softmax update,
// weighted sums, on vectors or on AMX tiles), and a tile's rows in blocks.

// Vectors per row of a register block acc[R][C].
template <class A>
constexpr int AccVecs() {
  return static_cast<int>(std::extent<std::remove_reference_t<A>, 1>::value);
}

// The weighted sums of R states over a tile's value columns, a register block at a time
// (kAvVecs vectors, then single ones): av(kd, acc) adds the tile's keys (weights p) to
// the block's accumulators.
template <int R, class Av>
OCTATTN_INLINE void Columns(const FlashTile& tile, float* const* st, int64_t dvp,
                            const float* const* p, Av&& av) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  int64_t c0 = 0, v_row = 0;
  auto block = [&](auto vecs) OCTATTN_LAMBDA_INLINE {
    constexpr int C = decltype(vecs)::value;
    typename S::V acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = S::Load(st[r] + 2 + c0 + c * L);
    const float* v = tile.Values(c0, dvp, &v_row);
    av(KeyData{p, 1, v, v_row, tile.t0}, acc);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) S::Store(acc[r][c], st[r] + 2 + c0 + c * L);
    c0 += C * L;
  };
  while (c0 + kAvVecs * L <= dvp) block(std::integral_constant<int, kAvVecs>());
  while (c0 < dvp) block(std::integral_constant<int, 1>());
}

// Keys per AMX step of the weighted sums: 16 pairs.
constexpr int64_t kAmxKeys = 32;

// S::kAmx, bf16 value pairs (FlashPairsV with FlashAmx): the whole groups of kAmxKeys
// keys from the tile's first key that row r reads, [g0[r], g1[r]) (group numbers), added
// to the R states on AMX tiles, a group a tdpbf16ps step of each 16-column block: the
// weights' pairs (pw, rows kTileKeys floats apart, PairWeights) by the V panel's pair
// rows (the packed tile's panels of kAvPanel columns). A row's sums depend on its own
// groups alone: a group other rows of the block read and it does not leaves its state
// as it was (its value rows may hold anything). The keys of a row outside its groups are
// the vector pairs' (FlashBlock: those before, then the groups, then those after).
// values(c0, &row): the pair rows of value columns [c0, c0 + 64) of group 0 (row floats
// apart; group g's at + g * 16 rows).
template <int R, class Values>
static inline void AmxWeightedSums(AmxTiles* amx, const int64_t* g0, const int64_t* g1,
                                   float* const* st, int64_t dvp, const float* const* pw,
                                   Values&& values) {
  int64_t ga = INT64_MAX, gb = 0;
  for (int r = 0; r < R; ++r)
    if (g0[r] < g1[r]) {
      ga = base::MinI(ga, g0[r]);
      gb = base::MaxI(gb, g1[r]);
    }
  if (ga >= gb) return;
  amx->Use<R>();
  constexpr int64_t kPairs = kAmxKeys / 2;
  const int64_t a_stride = kTileKeys * 4;
  alignas(64) float c[R][64], keep[R][64];
  for (int64_t c0 = 0; c0 < dvp; c0 += 64) {
    const int nc = static_cast<int>(base::MinI(4, (dvp - c0) / 16));
    const size_t bytes = static_cast<size_t>(nc) * 64;
    int64_t v_row = 0;
    const float* v = values(c0, &v_row);
    for (int r = 0; r < R; ++r) memcpy(c[r], st[r] + 2 + c0, bytes);
    S::AmxLoadSums(c[0], nc);
    for (int64_t g = ga; g < gb; ++g) {
      bool all = true, none = true;
      for (int r = 0; r < R; ++r) {
        const bool in = g >= g0[r] && g < g1[r];
        all &= in;
        none &= !in;
      }
      if (none) continue;
      if (!all) S::AmxStoreSums(keep[0], nc);
      S::AmxStep(pw[0] + g * kPairs, a_stride, v + g * kPairs * v_row, v_row * 4, nc);
      if (!all) {  // the rows that do not read the group keep their sums
        S::AmxStoreSums(c[0], nc);
        for (int r = 0; r < R; ++r)
          if (g < g0[r] || g >= g1[r]) memcpy(c[r], keep[r], bytes);
        S::AmxLoadSums(c[0], nc);
      }
    }
    S::AmxStoreSums(c[0], nc);
    for (int r = 0; r < R; ++r) memcpy(st[r] + 2 + c0, c[r], bytes);
  }
}

// What a block of R rows reads of one tile: each row's keys in the tile, and the packed
// columns [a, b) (whole vectors) that hold them: the scores outside are never read, so
// neither computed nor scanned. Dropping masked scores (-inf, exp 0) changes no max and
// no sum. With modifiers, keys masked by the tensors are the rows' holes (bits from
// t0); the mask tensor is read here, once, and a row none of whose keys it keeps here
// is skipped like a masked tile.
template <int R>
struct BlockKeys {
  static constexpr int64_t kWords = kTileKeys / kHoleBits;
  const float* q[R];
  int64_t qpos[R];
  base::RowKeys keys[R];
  uint64_t holes[R][kWords];
  bool holey[R];
  int64_t a[R], b[R], block_a, block_b;
  bool full;    // every row reads every key of a full tile: no panel needs its own mask
  bool modded;  // score modifiers apply
};

// The keys of R rows in the tile (BlockKeys); false: the tile holds none of them.
template <int R>
OCTATTN_INLINE bool FlashBlockKeys(const FlashTask& t, const FlashSpace& sp, const FlashTile& tile,
                                   const FlashRow* rows, BlockKeys<R>* bk) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  bool active[R];
  bool any = false;
  int64_t qmin = rows[0].qpos, qmax = rows[0].qpos;
  for (int r = 0; r < R; ++r) {
    bk->q[r] = rows[r].q;
    bk->qpos[r] = rows[r].qpos;
    active[r] = !sp.floors || tile.t1 > rows[r].floor;
    any |= active[r];
    qmin = base::MinI(qmin, rows[r].qpos);
    qmax = base::MaxI(qmax, rows[r].qpos);
  }
  const base::TileKind kind =
      any ? base::Classify(sp.mask, qmin, qmax + 1, tile.t0, tile.t1, sp.kv_len) : base::kTileEmpty;
  if (kind == base::kTileEmpty) return false;
  bk->full = kind == base::kTileFull && tile.t1 - tile.t0 == tile.tpad;
  // A tile of a tree's prefix (every real key below its first column) runs as one with
  // no modifier when the tree is the only one.
  const Mods& mods = t.op.mods;
  const bool prefix = mods.keep_bits && mods.block_kv == 0 && mods.softcap == 0.0f &&
                      !mods.slopes && !mods.bias && sp.Real(tile.t1 - 1) < mods.keep_from;
  bk->modded = mods.Modifies() && !prefix;
  // Block lists alone (real keys): a tile in each of whose rows the listed blocks hold
  // one run of keys (full blocks, or partial ones with no entries to read) that begins
  // and ends on whole vectors (or the tile's end) needs no holes: each row reads its run,
  // and the vectors it scores hold no key outside it that the analytic mask allows.
  const bool lists = mods.block_kv > 0 && sp.first == 0 && sp.step == 1;
  int64_t run_lo[R], run_hi[R];
  bool runs = false;
  if (lists && bk->modded && mods.softcap == 0.0f && !mods.slopes && !mods.bias) {
    runs = true;
    for (int r = 0; r < R && runs; ++r) {
      if (!active[r]) continue;
      runs = base::BlockRun(rows[r].mod.blocks, tile.t0, tile.t1, mods.keep != nullptr, &run_lo[r],
                            &run_hi[r]) &&
             (run_lo[r] >= run_hi[r] || ((run_lo[r] - tile.t0) % L == 0 &&
                                         ((run_hi[r] - tile.t0) % L == 0 || run_hi[r] == tile.t1)));
    }
    if (runs) {
      bk->modded = false;
      for (int r = 0; r < R; ++r)
        bk->full &= !active[r] || (run_lo[r] == tile.t0 && run_hi[r] == tile.t1);
    }
  }
  bk->block_a = tile.tpad;
  bk->block_b = 0;
  for (int r = 0; r < R; ++r) {
    bk->keys[r] = base::RowKeys{tile.t0, tile.t0, 0, tile.t0, 0};
    bk->a[r] = bk->b[r] = 0;
    bk->holey[r] = false;
    if (!active[r]) continue;  // below the row's floor: another unit holds these keys
    base::RowKeys k = ClipKeys(base::KeysOf(sp.mask, rows[r].qpos, sp.kv_len), tile.t0, tile.t1);
    const RowMods& mod = rows[r].mod;
    if (sp.floors && mod.Keeps()) {  // the dense run within the row's mask envelope
      k.lo = base::MinI(base::MaxI(k.lo, rows[r].env_lo), k.hi);
      k.hi = base::MaxI(base::MinI(k.hi, rows[r].env_hi), k.lo);
    }
    if (runs) {  // the run of its listed blocks (none: it reads nothing here)
      if (run_lo[r] >= run_hi[r]) continue;
      k.lo = base::MinI(base::MaxI(k.lo, run_lo[r]), run_hi[r]);
      k.hi = base::MaxI(base::MinI(k.hi, run_hi[r]), k.lo);
      k.strided_begin = base::MaxI(k.strided_begin, run_lo[r]);
      k.strided_end = base::MaxI(base::MinI(k.strided_end, run_hi[r]), k.strided_begin);
    }
    const bool strided = k.stride > 0 && k.strided_end > k.strided_begin;
    int64_t jb = strided ? k.strided_begin : k.lo;
    int64_t je = k.hi > k.lo ? k.hi : (strided ? k.strided_end : jb);
    if (je <= jb) continue;
    if (bk->modded) {
      for (int64_t w = 0; w < BlockKeys<R>::kWords; ++w) bk->holes[r][w] = 0;
      if (mod.Keeps()) {
        const KeySpan span = sp.keys
                                 ? ScanKeepListed(mod, sp.keys, tile.t0, jb, je, bk->holes[r])
                                 : ScanKeep(mod, sp.first, sp.step, tile.t0, jb, je, bk->holes[r]);
        if (span.begin >= span.end) continue;  // the tensor masks every key of the row here
        // The keys outside the span are holes: dropped from the row's keys here.
        jb = span.begin;
        je = span.end;
        k.lo = base::MinI(base::MaxI(k.lo, jb), je);
        k.hi = base::MaxI(base::MinI(k.hi, je), k.lo);
        k.strided_begin = base::MaxI(k.strided_begin, jb);
        k.strided_end = base::MaxI(base::MinI(k.strided_end, je), k.strided_begin);
      }
    }
    bk->keys[r] = k;
    bk->a[r] = (jb - tile.t0) / L * L;
    bk->b[r] = base::MinI(tile.tpad, (je - tile.t0 + L - 1) / L * L);
    bk->block_a = base::MinI(bk->block_a, bk->a[r]);
    bk->block_b = base::MaxI(bk->block_b, bk->b[r]);
  }
  return true;
}

// Whether a row of the block reads one of the n keys from key j (its dense run or one
// of its strided columns).
template <int R>
OCTATTN_INLINE bool ReadsVector(const BlockKeys<R>& bk, int64_t j, int64_t n) {
  for (int r = 0; r < R; ++r) {
    const base::RowKeys& k = bk.keys[r];
    if (k.lo < k.hi && k.lo < j + n && k.hi > j) return true;
    if (k.stride > 0 && k.strided_begin < k.strided_end &&
        base::NextOnStride(base::MaxI(j, k.strided_begin), k.stride, k.phase) <
            base::MinI(j + n, k.strided_end))
      return true;
  }
  return false;
}

// Pack columns [ja, jb) of the panel at j0 where strided columns lie among the keys:
// the whole panel if a row reads a key of each of its vectors, else the vectors a row
// reads one at a time, the others masked without being scored. Out of line: the dense
// blocks' code stays as it was.
template <int R, class Score>
__attribute__((noinline)) static void ScoreSparsePanel(const BlockKeys<R>& bk, int64_t t0,
                                                       int64_t j0, int64_t ja, int64_t jb,
                                                       float* const* s, Score&& score) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  bool whole = ja == j0 && jb == j0 + kQkPanel;
  for (int c = 0; c < kFlashQkVecs && whole; ++c) whole = ReadsVector(bk, t0 + j0 + c * L, L);
  if (whole) {
    score(std::integral_constant<int, kFlashQkVecs>(), j0, j0);
    return;
  }
  for (int64_t j = ja; j < jb; j += L) {
    if (ReadsVector(bk, t0 + j, L)) {
      score(std::integral_constant<int, 1>(), j0, j);
    } else {
      for (int r = 0; r < R; ++r) S::Store(S::Set(-__builtin_inff()), s[r] + j);
    }
  }
}

// The scaled, masked scores of the block's rows into s[r] (the modifiers applied, the
// holes masked), a K panel at a time: f32, bf16 pairs, or bf16 pairs on AMX tiles. A
// panel the block's columns [block_a, block_b) end inside (a window's or the diagonal's
// edge) is scored a vector at a time, its vectors outside left alone: no row reads
// them, and a score's chains are the same at any width.
template <int R>
OCTATTN_INLINE void FlashBlockScores(const FlashTask& t, const FlashSpace& sp,
                                     const FlashTile& tile, const FlashRow* rows, BlockKeys<R>* bk,
                                     float* const* s, FlashPrefetch* pf) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const bool all = bk->full || bk->modded;
  // With strided columns among the real keys, a row's first tile holds a few of them
  // below its window: the vectors between them, which no row reads, are not scored.
  const bool sparse = !all && sp.first == 0 && sp.step == 1 && !sp.keys && sp.mask.causal &&
                      sp.mask.window > 0 && sp.mask.stride > 0;
  // Pack columns [j, j + C * L) of the panel that starts at j0.
  auto score = [&](auto vecs, int64_t j0, int64_t j) OCTATTN_LAMBDA_INLINE {
    constexpr int C = decltype(vecs)::value;
    const float* kt = tile.kt + j0 * t.op.head_dim + (j - j0);
    if (t.op.qk_block) {  // integer keys and rows (OCTATTN_QK_INT8)
      QkTile<R, C, false, false, true>(bk->q, 1, kt, kQkPanel, t.op.head_dim, j, tile.t0, tile.t1,
                                       sp.kv_len, sp.mask, bk->qpos, t.op.scale, s, all, nullptr,
                                       IntKeys{t.op.qk_block, tile.ksc + j});
      return;
    }
    if constexpr (S::kDotBf16) {
      if (t.op.q_type == kBf16) {  // bf16 pairs (FlashPairs): head_dim counts pairs
        QkTile<R, C, true>(bk->q, 1, kt, kQkPanel, t.op.head_dim, j, tile.t0, tile.t1, sp.kv_len,
                           sp.mask, bk->qpos, t.op.scale, s, all);
        return;
      }
    }
    QkTile<R, C>(bk->q, t.op.q_dim, kt, kQkPanel, t.op.head_dim, j, tile.t0, tile.t1, sp.kv_len,
                 sp.mask, bk->qpos, t.op.scale, s, all);
  };
  for (int64_t j0 = bk->block_a / kQkPanel * kQkPanel; j0 < bk->block_b; j0 += kQkPanel) {
    pf->Step();
    if constexpr (S::kAmx) {
      if (t.op.q_type == kBf16 && !t.op.qk_block && t.op.head_dim % 16 == 0) {  // FlashAmx
        QkTile<R, kFlashQkVecs, true, true>(bk->q, 1, tile.kt + j0 * t.op.head_dim, kQkPanel,
                                            t.op.head_dim, j0, tile.t0, tile.t1, sp.kv_len, sp.mask,
                                            bk->qpos, t.op.scale, s, all, sp.amx);
        continue;
      }
    }
    const int64_t ja = base::MaxI(j0, bk->block_a), jb = base::MinI(j0 + kQkPanel, bk->block_b);
    if (ja == j0 && jb == j0 + kQkPanel && !sparse) {
      score(std::integral_constant<int, kFlashQkVecs>(), j0, j0);
    } else if (!sparse) {
      for (int64_t j = ja; j < jb; j += L) score(std::integral_constant<int, 1>(), j0, j);
    } else {
      ScoreSparsePanel(*bk, tile.t0, j0, ja, jb, s, score);
    }
  }
  if (bk->modded)  // the raw scores get the modifiers, then the mask and the holes
    for (int r = 0; r < R; ++r) {
      if (bk->a[r] == bk->b[r]) continue;
      bk->holey[r] = ModifyAndMask(s[r], bk->a[r], bk->b[r], tile.t0, tile.t1, sp.first, sp.step,
                                   rows[r].mod, bk->keys[r], bk->holes[r], sp.keys);
    }
}

// S::kDotBf16, bf16 weight and value pairs (FlashPairsV: no holes, no strides): the
// weighted sums of the block's rows on vector pairs, and where FlashAmx their whole
// groups of keys on AMX tiles.
template <int R>
OCTATTN_INLINE void FlashBlockPairSums(const FlashTask& t, const FlashSpace& sp,
                                       const FlashTile& tile, const BlockKeys<R>& bk,
                                       float* const* s, float* const* st, float* s_buf) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const int64_t dvp = PadKeys(t.op.value_dim);
  const float* pw[R];
  for (int r = 0; r < R; ++r) {
    float* w = PairWeights(t, s_buf, r);
    pw[r] = w;
    for (int64_t x = bk.a[r]; x < bk.b[r]; x += 2 * L)
      S::Store(
          S::NarrowPairs(S::Load(s[r] + x), x + L < bk.b[r] ? S::Load(s[r] + x + L) : S::Zero()),
          w + x / 2);
  }
  if constexpr (S::kAmx) {
    if (t.op.head_dim % 16 == 0) {  // FlashAmx: whole groups of keys on AMX tiles
      // Row r's keys: [lo, g0) on vector pairs, the groups [g0, g1) on AMX, [g1, hi) on
      // vector pairs, in this order.
      int64_t g0[R], g1[R];
      base::RowKeys before[R], after[R];
      bool any_before = false, any_after = false;
      for (int r = 0; r < R; ++r) {
        const int64_t lo = bk.keys[r].lo - tile.t0, hi = bk.keys[r].hi - tile.t0;
        g0[r] = (lo + kAmxKeys - 1) / kAmxKeys;
        g1[r] = base::MaxI(g0[r], hi / kAmxKeys);
        before[r] = after[r] = bk.keys[r];
        if (g0[r] == g1[r]) {  // no whole group: every key on vector pairs
          after[r].hi = after[r].lo;
        } else {
          before[r].hi = tile.t0 + g0[r] * kAmxKeys;
          after[r].lo = tile.t0 + g1[r] * kAmxKeys;
        }
        any_before |= before[r].hi > before[r].lo;
        any_after |= after[r].hi > after[r].lo;
      }
      auto pairs = [&](const base::RowKeys* ks) {
        Columns<R>(tile, st, dvp, pw, [&](const KeyData& kd, auto& acc) OCTATTN_LAMBDA_INLINE {
          AvRowsPairs<R, AccVecs<decltype(acc)>()>(kd, ks, acc);
        });
      };
      if (any_before) pairs(before);
      AmxWeightedSums<R>(sp.amx, g0, g1, st, dvp, pw, [&](int64_t c0, int64_t* row) {
        return tile.Values(c0, dvp, row);  // the V panel of the columns
      });
      if (any_after) pairs(after);
      return;
    }
  }
  Columns<R>(tile, st, dvp, pw, [&](const KeyData& kd, auto& acc) OCTATTN_LAMBDA_INLINE {
    AvRowsPairs<R, AccVecs<decltype(acc)>()>(kd, bk.keys, acc);
  });
}

// R rows against one tile: scores, online softmax update, weighted sum into the states.
template <int R>
static inline void FlashBlock(const FlashTask& t, const FlashSpace& sp, const FlashTile& tile,
                              const FlashRow* rows, float* const* st, float* s_buf,
                              FlashPrefetch* pf) {
  BlockKeys<R> bk;
  if (!FlashBlockKeys<R>(t, sp, tile, rows, &bk)) return;
  float* s[R];
  for (int r = 0; r < R; ++r) s[r] = s_buf + r * kTileKeys;
  FlashBlockScores<R>(t, sp, tile, rows, &bk, s, pf);
  const int64_t dvp = PadKeys(t.op.value_dim);
  for (int r = 0; r < R; ++r) {
    if (bk.a[r] == bk.b[r]) continue;  // no key of the row here: no change
    if (!SoftmaxTile(s[r], bk.a[r], bk.b[r], st[r], dvp)) {
      bk.keys[r] = base::RowKeys{tile.t0, tile.t0, 0, tile.t0, 0};
      bk.holey[r] = false;
    } else if (rows[r].rec) {
      RecordTile(rows[r], sp.floors, tile.t0, s[r], bk.a[r], bk.b[r], st[r][0]);
    }
  }
  if constexpr (S::kDotBf16) {
    if (tile.pairs) {
      FlashBlockPairSums<R>(t, sp, tile, bk, s, st, s_buf);
      return;
    }
  }
  const float* p[R];
  for (int r = 0; r < R; ++r) p[r] = s[r];
  // Rows with holes sum their keys alone, skipping the holes (same chains otherwise).
  bool any_holey = false;
  base::RowKeys block_keys[R];
  for (int r = 0; r < R; ++r) {
    any_holey |= bk.holey[r];
    block_keys[r] = bk.holey[r] ? base::RowKeys{tile.t0, tile.t0, 0, tile.t0, 0} : bk.keys[r];
  }
  Columns<R>(tile, st, dvp, p, [&](const KeyData& kd, auto& acc) OCTATTN_LAMBDA_INLINE {
    constexpr int C = AccVecs<decltype(acc)>();
    AvRows<R, C>(kd, block_keys, acc);
    if (any_holey) FlashHoleRows<R, C>(kd, bk.keys, bk.holey, bk.holes, acc);
  });
}

// The last n < kFlashRows rows of a tile's row list, in blocks of 4, 2 and 1 rows (the
// row lists of decode: 1, 2 and 4 rows, 8 = 6 + 2, 16 = 6 + 6 + 4). Fewer block heights
// keep the build small; a row's bytes do not depend on its block.
static inline void FlashRest(const FlashTask& t, const FlashSpace& sp, const FlashTile& tile,
                             const FlashRow* rows, int64_t n, float* states, size_t stride,
                             float* s_buf, FlashPrefetch* pf) {
  for (int64_t i = 0; i < n;) {
    float* st[4];
    const int64_t h = n - i >= 4 ? 4 : n - i >= 2 ? 2 : 1;
    for (int64_t r = 0; r < h; ++r) st[r] = states + static_cast<size_t>(i + r) * stride;
    if (h == 4) FlashBlock<4>(t, sp, tile, rows + i, st, s_buf, pf);
    if (h == 2) FlashBlock<2>(t, sp, tile, rows + i, st, s_buf, pf);
    if (h == 1) FlashBlock<1>(t, sp, tile, rows + i, st, s_buf, pf);
    i += h;
  }
}

// Rows against one tile, in blocks of kFlashRows consecutive rows (kAmxRows where both
// Q K^T and the weighted sums run on AMX tiles, whose steps cost about the same for 6
// rows as for 16).
static inline void FlashHeadTile(const FlashTask& t, const FlashSpace& sp, const FlashTile& tile,
                                 const FlashRow* rows, int64_t nq, float* states, size_t stride,
                                 float* s_buf, FlashPrefetch* pf) {
  float* st[kAmxRows > kFlashRows ? kAmxRows : kFlashRows];
  int64_t i = 0;
  const bool amx = S::kAmx && tile.pairs && t.op.head_dim % 16 == 0;  // FlashAmx, FlashPairsV
  const int64_t block = amx ? kAmxRows : kFlashRows;
  const int64_t steps = (nq + block - 1) / block * (tile.tpad / kQkPanel);
  pf->per_step = (pf->end - pf->next + steps - 1) / steps;
  if constexpr (S::kAmx) {
    for (; amx && i + kAmxRows <= nq; i += kAmxRows) {
      for (int r = 0; r < kAmxRows; ++r) st[r] = states + static_cast<size_t>(i + r) * stride;
      FlashBlock<kAmxRows>(t, sp, tile, rows + i, st, s_buf, pf);
    }
  }
  for (; i + kFlashRows <= nq; i += kFlashRows) {
    for (int r = 0; r < kFlashRows; ++r) st[r] = states + static_cast<size_t>(i + r) * stride;
    FlashBlock<kFlashRows>(t, sp, tile, rows + i, st, s_buf, pf);
  }
  FlashRest(t, sp, tile, rows + i, nq - i, states + i * stride, stride, s_buf, pf);
}
