// Q K^T: query rows against packed keys (register blocks, tiles with the mask applied),
// and the scores stage. Included inside a per-target namespace that defines the SIMD
// vocabulary S, after common-inl.h; no includes, no namespace of its own.
//
// Every score is the same sequence of FMA chains over blocks of the head dimension in
// one lane, so its bits do not depend on which block shape, tile or call computed it.

// Where packed keys go: key jj (counted from the tile's first key) of dimension d is
// kt[(jj / width) * panel + d * row + jj % width]. One flat block (width past every key,
// panel 0) for the naive path; panels of a micro-kernel's width for the fused path, so
// that its inner loop reads one contiguous stream.
struct KeyLayout {
  int64_t width, panel, row;
  static KeyLayout Flat(int64_t row) { return KeyLayout{INT64_MAX, 0, row}; }
  // base such that key jj of the panel holding `jj0` is at base[d * row + jj].
  float* Base(float* kt, int64_t jj0) const {
    const int64_t p = jj0 / width;
    return kt + p * panel - p * width;
  }
};

// Packs keys [j_begin, j_end) of k transposed into kt (layout `lay`): keys from j_load on,
// and the strided columns `below` under j_load; zero for the other keys below j_load (no
// row of the task may read them: never loaded) and up to `padded` keys.
static inline void PackKeysT(const float* k, int64_t k_row, int64_t k_dim, int64_t j_begin,
                             int64_t j_load, int64_t j_end, base::StridedColumns below,
                             int64_t padded, int64_t head_dim, float* kt, KeyLayout lay) {
  const int64_t skip = j_load - j_begin, n = j_end - j_begin, row = lay.row;
  for (int64_t lo = 0; lo < padded;) {
    const int64_t hi =
        base::MinI(padded, lay.width == INT64_MAX ? padded : (lo / lay.width + 1) * lay.width);
    float* base = lay.Base(kt, lo);
    int64_t jj = lo;
    for (; jj < base::MinI(hi, skip); ++jj) {
      const bool readable = below.Has(j_begin + jj);
      const float* src = k + (j_begin + jj) * k_row;
      for (int64_t d = 0; d < head_dim; ++d) base[d * row + jj] = readable ? src[d * k_dim] : 0.0f;
    }
    const int64_t end = base::MaxI(jj, base::MinI(hi, n));
    int64_t j8 = jj, d8 = 0;  // the part done by 8x8 block transposes
    if constexpr (S::kBlockTranspose) {
      if (k_dim == 1) {
        j8 = jj + (end - jj) / 8 * 8;
        d8 = head_dim / 8 * 8;
        for (int64_t b = jj; b < j8; b += 8)
          for (int64_t d = 0; d < d8; d += 8)
            S::Transpose8x8(k + (j_begin + b) * k_row + d, k_row, base + d * row + b, row);
      }
    }
    for (; jj < end; ++jj) {
      const float* src = k + (j_begin + jj) * k_row;
      for (int64_t d = jj < j8 ? d8 : 0; d < head_dim; ++d) base[d * row + jj] = src[d * k_dim];
    }
    for (int64_t d = 0; d < head_dim; ++d)
      for (int64_t z = jj; z < hi; ++z) base[d * row + z] = 0.0f;
    lo = hi;
  }
}

// acc[r][c] += q_r[d] * kt[d][c * lanes + lane] for d in [d0, d1), one FMA chain per lane.
// P (bf16 pairs, S::kDotBf16): d counts dimension pairs, q_r[d] and kt's elements hold
// the bf16 pair (2d, 2d + 1) in 32 bits, and each step is one S::DotBf16.
template <int R, int C, bool P = false>
OCTATTN_INLINE void QkChain(const float* const* q, int64_t q_dim, const float* kt,
                            int64_t kt_stride, int64_t d0, int64_t d1, typename S::V (&acc)[R][C]) {
  constexpr size_t L = S::kLanes;
  for (int64_t d = d0; d < d1; ++d) {
    const float* kd = kt + d * kt_stride;
    typename S::V kv[C];
    for (int c = 0; c < C; ++c) kv[c] = S::Load(kd + c * L);
    for (int r = 0; r < R; ++r) {
      const typename S::V qb = S::Set(q[r][d * q_dim]);
      for (int c = 0; c < C; ++c) {
        if constexpr (P) {
          acc[r][c] = S::DotBf16(qb, kv[c], acc[r][c]);
        } else {
          acc[r][c] = S::MulAdd(qb, kv[c], acc[r][c]);
        }
      }
    }
  }
}

// Dimensions per partial sum of a dot product: the error of one FMA chain grows with its
// length, so a long head dimension is summed in blocks of this many.
constexpr int64_t kDotBlock = 64;

// f(add, scale) with after and last as compile-time bools: a block's end runs as one
// loop per case with no branch inside, which the compiler unrolls with the chains still
// in registers (one loop with the branches stored them all to the stack and read them
// back).
template <class F>
OCTATTN_INLINE void ByCase(bool after, bool last, F&& f) {
  using Yes = std::true_type;
  using No = std::false_type;
  if (after && last) {
    f(Yes(), Yes());
  } else if (after) {
    f(Yes(), No());
  } else if (last) {
    f(No(), Yes());
  } else {
    f(No(), No());
  }
}

// One 64-dimension block's chains stored as scores: added to the blocks' before
// (`after`), scaled after the last block (`last`). Every score of every path ends so.
template <int R, int C>
OCTATTN_INLINE void StoreDotBlock(const typename S::V (&acc)[R][C], float* const* out, bool after,
                                  bool last, typename S::V vs) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  auto store = [&](auto add, auto scale) OCTATTN_LAMBDA_INLINE {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        typename S::V x = acc[r][c];
        if constexpr (decltype(add)::value) x = S::Add(S::Load(out[r] + c * L), x);
        if constexpr (decltype(scale)::value) x = S::Mul(x, vs);
        S::Store(x, out[r] + c * L);
      }
  };
  ByCase(after, last, store);
}

// OCTATTN_QK_INT8 (Operands::qk_block): one block's integer dot products `dot` (exact,
// as floats) of R rows with C key vectors, added to the scores as (u_r * t) * dot, u_r
// the row's scale of block b (qs[r][b]) and t the keys' (kv[c]): the first block by a
// product, the others by an FMA onto the blocks' before, scaled after the last. Every
// integer score of every path ends so.
template <int R, int C>
OCTATTN_INLINE void StoreIntBlock(const typename S::V (&dot)[R][C], const float* const* qs,
                                  int64_t b, const typename S::V (&kv)[C], float* const* out,
                                  bool after, bool last, typename S::V vs) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  auto store = [&](auto add, auto scale) OCTATTN_LAMBDA_INLINE {
    for (int r = 0; r < R; ++r) {
      const typename S::V u = S::Set(qs[r][b]);
      for (int c = 0; c < C; ++c) {
        const typename S::V f = S::Mul(u, kv[c]);
        typename S::V x;
        if constexpr (decltype(add)::value) {
          x = S::MulAdd(dot[r][c], f, S::Load(out[r] + c * L));
        } else {
          x = S::Mul(dot[r][c], f);
        }
        if constexpr (decltype(scale)::value) x = S::Mul(x, vs);
        S::Store(x, out[r] + c * L);
      }
    }
  };
  ByCase(after, last, store);
}

// The integer scores of R rows (QRecords: integers as floats, then their block scales)
// for C key vectors of packed integer keys, their block scales at ksc (block b at
// ksc + b * ks_stride): one FMA chain per block of qk_block dimensions (exact), then
// StoreIntBlock.
template <int R, int C>
OCTATTN_INLINE void QkStoreInt(const float* const* q, const float* kt, int64_t kt_stride,
                               int64_t head_dim, int64_t block, const float* ksc, int64_t ks_stride,
                               float scale, float* const* out) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const typename S::V vs = S::Set(scale);
  const float* qs[R];
  for (int r = 0; r < R; ++r) qs[r] = q[r] + head_dim;
  for (int64_t d0 = 0, b = 0; d0 < head_dim; d0 += block, ++b) {
    typename S::V acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = S::Zero();
    QkChain<R, C>(q, 1, kt, kt_stride, d0, d0 + block, acc);
    typename S::V kv[C];
    for (int c = 0; c < C; ++c) kv[c] = S::Load(ksc + b * ks_stride + c * L);
    StoreIntBlock<R, C>(acc, qs, b, kv, out, d0 > 0, d0 + block == head_dim, vs);
  }
}

// out[r][c * lanes + lane] = scale * sum_d q_r[d] * kt[d][c * lanes + lane], for R rows
// and C key vectors: one FMA chain per block of kDotBlock dimensions, each block's sum
// added to the sum of the blocks before it in block order (through `out`, so that the
// partial sums take no registers), then scaled. The order is fixed by head_dim alone, so
// a score has the same bits in every call. P: bf16 pairs (QkChain), head_dim counts
// pairs, kDotBlock / 2 of them per block.
template <int R, int C, bool P = false>
OCTATTN_INLINE void QkStore(const float* const* q, int64_t q_dim, const float* kt,
                            int64_t kt_stride, int64_t head_dim, float scale, float* const* out) {
  const typename S::V vs = S::Set(scale);
  constexpr int64_t kBlock = P ? kDotBlock / 2 : kDotBlock;
  for (int64_t d0 = 0; d0 < head_dim; d0 += kBlock) {
    typename S::V acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = S::Zero();
    const int64_t d1 = base::MinI(head_dim, d0 + kBlock);
    QkChain<R, C, P>(q, q_dim, kt, kt_stride, d0, d1, acc);
    StoreDotBlock<R, C>(acc, out, d0 > 0, d1 == head_dim, vs);
  }
}

// S::kAmx: the scores of R rows for the C * lanes keys (16 to 64) of bf16 pairs laid out
// as a packed panel (kt: pair rows kt_stride floats apart, `pairs` of them, a multiple of
// 16; the packed tile's panels, or a direct tile's keys transposed), on
// AMX tiles: each block of kDotBlock dimensions is AMX's sum of its two 16-pair steps
// from zero (S::AmxDot64), the blocks added and scaled as QkStore adds and scales its
// chains (StoreDotBlock's operations). The rows' pairs are read pairs * 4 bytes apart
// from q[0] (a task's rows, PrepareRows), else from a copy.
// The AMX tile configuration a task has loaded (rows 0: none). The task owns it and
// hands it down to what runs on tiles: it starts unconfigured (other code on the thread
// may load its own tiles between tasks) and releases the tiles at its end.
struct AmxTiles {
  int rows = 0;
  // The tiles configured for R rows (S::AmxConfigure), unless they are.
  template <int R>
  OCTATTN_INLINE void Use() {
    if (rows != R) {
      S::AmxConfigure(R);
      rows = R;
    }
  }
  void Release() {
    if constexpr (S::kAmx)
      if (rows) S::AmxRelease();
    rows = 0;
  }
};
template <int R, int C>
OCTATTN_INLINE void AmxQkStore(AmxTiles* amx, const float* const* q, const float* kt,
                               int64_t kt_stride, int64_t pairs, float scale, float* const* out) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  static_assert((C * L % 16 == 0 && C * L <= 64) || !S::kAmx, "AMX blocks of 16 keys");
  static_assert(R <= 16, "a tile holds 16 rows");
  bool even = true;
  for (int r = 1; r < R; ++r) even &= q[r] == q[0] + r * pairs;
  amx->Use<R>();
  alignas(64) float c[R][64];
  alignas(64) float a[R][32];
  const typename S::V vs = S::Set(scale);
  for (int64_t d0 = 0; d0 < pairs; d0 += kDotBlock / 2) {
    const int halves = d0 + kDotBlock / 2 <= pairs ? 2 : 1;
    const float* ap = q[0] + d0;
    int64_t a_stride = pairs * 4;
    if (!even) {
      for (int r = 0; r < R; ++r) memcpy(a[r], q[r] + d0, static_cast<size_t>(halves) * 64);
      ap = a[0];
      a_stride = 128;
    }
    S::AmxDot64(ap, a_stride, kt + d0 * kt_stride, kt_stride * 4, halves,
                static_cast<int>(C * L / 16), c[0]);
    typename S::V acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int x = 0; x < C; ++x) acc[r][x] = S::Load(c[r] + x * L);
    StoreDotBlock<R, C>(acc, out, d0 > 0, d0 + kDotBlock / 2 >= pairs, vs);
  }
}

// Scores of R rows at positions qpos[r] for packed key vectors starting at pack column
// j0, scaled and masked. `kt` points at pack column j0 (rows kt_stride apart); `dst[r]`
// points at row r's score for pack column 0; pack column c holds key key_base + c; keys
// at or past `key_end` are masked. `all_allowed`: the caller has classified the block as
// full (every row reads every key up to key_end, and key_end is past the block).
// P: bf16 pairs (QkStore); A: on AMX tiles (AmxQkStore on the task's `amx`; P too).
// I: integer keys and q rows (QkStoreInt; `ints` the block size and the keys' scales).
struct IntKeys {
  int64_t block;
  const float* ksc;  // pack column j0's block scales, block b at ksc + b * kTileKeys
};
template <int R, int C, bool P = false, bool A = false, bool I = false>
OCTATTN_INLINE void QkTile(const float* const* q, int64_t q_dim, const float* kt, int64_t kt_stride,
                           int64_t head_dim, int64_t j0, int64_t key_base, int64_t key_end,
                           int64_t kv_len, const base::Mask& mask, const int64_t* qpos, float scale,
                           float* const* dst, bool all_allowed = false, AmxTiles* amx = nullptr,
                           IntKeys ints = IntKeys{0, nullptr}) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const int64_t a0 = key_base + j0;
  const int64_t a1 = base::MinI(a0 + C * L, key_end);
  float* out[R];
  int64_t qmin = qpos[0], qmax = qpos[0];
  for (int r = 0; r < R; ++r) {
    out[r] = dst[r] + j0;
    qmin = base::MinI(qmin, qpos[r]);
    qmax = base::MaxI(qmax, qpos[r]);
  }
  const base::TileKind kind = all_allowed ? base::kTileFull
                              : a1 <= a0  ? base::kTileEmpty
                                          : base::Classify(mask, qmin, qmax + 1, a0, a1, kv_len);
  if (kind == base::kTileEmpty) {
    const typename S::V ninf = S::Set(-__builtin_inff());
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) S::Store(ninf, out[r] + c * L);
    return;
  }
  if constexpr (I) {
    QkStoreInt<R, C>(q, kt, kt_stride, head_dim, ints.block, ints.ksc, kTileKeys, scale, out);
  } else if constexpr (A) {
    AmxQkStore<R, C>(amx, q, kt, kt_stride, head_dim, scale, out);
  } else {
    QkStore<R, C, P>(q, q_dim, kt, kt_stride, head_dim, scale, out);
  }
  if (kind == base::kTilePartial || a1 < a0 + C * L) {
    // Each row's keys as ranges (the mask's own description of a row): its dense run
    // [lo, hi) of the columns, and the strided columns outside it, whose scores are set
    // aside while the rest is masked in runs.
    constexpr int64_t n = C * L;
    const int64_t end = a1 - a0;
    for (int r = 0; r < R; ++r) {
      const base::RowKeys k = base::KeysOf(mask, qpos[r], kv_len);
      const int64_t lo = base::MinI(base::MaxI(k.lo - a0, 0), end);
      const int64_t hi = base::MinI(base::MaxI(k.hi - a0, lo), end);
      float kept[n];
      int64_t at[n], m = 0;
      if (k.stride > 0)
        for (int64_t j = base::NextOnStride(base::MaxI(a0, k.strided_begin), k.stride, k.phase);
             j < base::MinI(a1, k.strided_end); j += k.stride)
          if (j - a0 < lo || j - a0 >= hi) {
            at[m] = j - a0;
            kept[m++] = out[r][j - a0];
          }
      for (int64_t x = 0; x < lo; ++x) out[r][x] = -__builtin_inff();
      for (int64_t x = hi; x < n; ++x) out[r][x] = -__builtin_inff();
      for (int64_t i = 0; i < m; ++i) out[r][at[i]] = kept[i];
    }
  }
}

constexpr int kRowBlock = 4;
constexpr int kQkVecs = 2;

// Scaled, masked scores of rows [i0, i0 + R) of q into dst rows, keys [0, padded) of kt
// (`raw`: scaled, not masked, every key).
template <int R>
static inline void QkRows(const float* q, int64_t q_row, int64_t q_dim, int64_t head_dim,
                          int64_t i0, const float* kt, int64_t padded, int64_t key_end,
                          int64_t kv_len, const base::Mask& mask, float scale, float* const* dst,
                          bool raw = false) {
  const int64_t kt_stride = KtStride(padded);
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const float* qr[R];
  int64_t qpos[R];
  for (int r = 0; r < R; ++r) {
    qr[r] = q + (i0 + r) * q_row;
    qpos[r] = mask.q_start + i0 + r;
  }
  int64_t j0 = 0;
  for (; j0 + kQkVecs * L <= padded; j0 += kQkVecs * L)
    QkTile<R, kQkVecs>(qr, q_dim, kt + j0, kt_stride, head_dim, j0, 0, key_end, kv_len, mask, qpos,
                       scale, dst, raw);
  for (; j0 < padded; j0 += L)
    QkTile<R, 1>(qr, q_dim, kt + j0, kt_stride, head_dim, j0, 0, key_end, kv_len, mask, qpos, scale,
                 dst, raw);
}

// Stage: unscaled, unmasked q k^T of one head, kRowBlock rows at a time.
static size_t ScoresScratchFloats(int64_t kv_len, int64_t head_dim) {
  const int64_t kpad = PadKeys(kv_len);
  return base::SatAdd(Piece2(head_dim, KtStride(kpad)), Piece2(kRowBlock, kpad));
}

static void ScoresHead(ConstMatrix q, ConstMatrix k, Matrix scores, int64_t q_len, int64_t kv_len,
                       int64_t head_dim, float* scratch) {
  const int64_t kpad = PadKeys(kv_len);
  float* kt = scratch;
  float* s = kt + Piece2(head_dim, KtStride(kpad));
  PackKeysT(k.data, k.row, k.col, 0, 0, kv_len, base::StridedColumns{0, 0}, kpad, head_dim, kt,
            KeyLayout::Flat(KtStride(kpad)));
  const base::Mask full{0, 0, 0, 0, 0};
  for (int64_t i = 0; i < q_len; i += kRowBlock) {
    const int64_t rows = base::MinI(kRowBlock, q_len - i);
    float* dst[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) dst[r] = s + r * kpad;
    if (rows == kRowBlock) {
      QkRows<kRowBlock>(q.data, q.row, q.col, head_dim, i, kt, kpad, kv_len, kv_len, full, 1.0f,
                        dst);
    } else {
      for (int r = 0; r < rows; ++r)
        QkRows<1>(q.data, q.row, q.col, head_dim, i + r, kt, kpad, kv_len, kv_len, full, 1.0f,
                  &dst[r]);
    }
    for (int r = 0; r < rows; ++r) {
      float* w = scores.data + (i + r) * scores.row;
      for (int64_t j = 0; j < kv_len; ++j) w[j * scores.col] = dst[r][j];
    }
  }
}
