// Score modifiers (softcap, ALiBi, bias) and the mask tensor on rows of scores, shared by
// the naive and fused paths and the modifier stage. Included inside a per-target
// namespace that defines the SIMD vocabulary S, after the common and mask families.
// Each runs once per row (and tile), after the row's scores: one copy per target.
//
// A row's scores are addressed by "space keys" g (the real keys, or the fused path's
// gathered strided columns), real key first + g * step; score jj of a row buffer is space
// key key_base + jj. Keys masked by the tensors (mask entry 0, bias -inf) are "holes":
// bit jj of the row's hole words, so that the weighted sum skips their value rows.

constexpr int64_t kHoleBits = 64;
// Entries of a row's mask or bias prefetched past the ones a call reads now: about the
// next key tile's (kernels.h: kTileKeys). Prefetches never fault and change no result.
constexpr int64_t kPrefetchKeys = 256;
static inline bool HoleAt(const uint64_t* holes, int64_t jj) {
  return (holes[jj / kHoleBits] >> (jj % kHoleBits)) & 1u;
}
static inline void SetHole(uint64_t* holes, int64_t jj) {
  holes[jj / kHoleBits] |= uint64_t{1} << (jj % kHoleBits);
}
static inline int64_t HoleWords(int64_t keys) { return (keys + kHoleBits - 1) / kHoleBits; }

// The modifiers of one row.
struct RowMods {
  float cap = 0.0f, inv_cap = 0.0f;  // cap 0: off
  bool alibi = false;
  float slope = 0.0f;
  int64_t qpos = 0;             // the row's position in key coordinates (ALiBi)
  const float* bias = nullptr;  // the row's bias at real key 0
  int64_t bias_col = 0;
  const uint8_t* keep = nullptr;  // the row's keep entries (Mods: bytes at real key 0, or bits)
  int64_t keep_col = 0;
  bool keep_bits = false;
  int64_t keep_from = 0;
  base::RowBlocks blocks;  // a block mask's lists of the row's query block (size 0: none)
  // Whether keys are masked by the row's own entries (mask tensor, tree, block lists).
  bool Keeps() const { return keep || blocks.size > 0; }
};

// Row `row` of query head `head` (counted from the Operands' head) at position qpos.
static inline RowMods RowModsOf(const Mods& m, int64_t head, int64_t row, int64_t qpos) {
  RowMods r;
  if (m.softcap > 0.0f) {
    r.cap = m.softcap;
    r.inv_cap = 1.0f / m.softcap;
  }
  if (m.slopes) {
    r.alibi = true;
    r.slope = m.slopes[head];
  }
  r.qpos = qpos;
  if (m.bias) {
    r.bias = m.bias + head * m.bias_head + row * m.bias_row;
    r.bias_col = m.bias_col;
  }
  if (m.keep) {
    r.keep = m.keep + head * m.keep_head + row * m.keep_row;
    r.keep_col = m.keep_col;
    r.keep_bits = m.keep_bits;
    r.keep_from = m.keep_from;
  }
  r.blocks = RowBlocksOf(m, head, row);
  return r;
}

alignas(64) static constexpr float kIota[16] = {0, 1, 2,  3,  4,  5,  6,  7,
                                                8, 9, 10, 11, 12, 13, 14, 15};

// Bits of the 8 bytes of w that are zero (bit k: byte k, little-endian order).
static inline uint32_t ZeroBytes(uint64_t w) {
  uint32_t bits = 0;
  for (int k = 0; k < 8; ++k) bits |= static_cast<uint32_t>(((w >> (8 * k)) & 0xFF) == 0) << k;
  return bits;
}

struct KeySpan {
  int64_t begin, end;
};

// Reads the mask entries of space keys [jb, je) once: their holes (entry 0) become bits
// of `holes` (relative to key_base; the caller zeroed them). Returns the space keys
// [first, last + 1) of the first and last allowed entry ([je, je) when none is).
__attribute__((noinline)) static KeySpan ScanMaskRow(const uint8_t* mask, int64_t col,
                                                     int64_t first, int64_t step, int64_t key_base,
                                                     int64_t jb, int64_t je, uint64_t* holes) {
  int64_t lo = je, hi = je;
  int64_t g = jb;
  if (step == 1 && col == 1) {
    const uint8_t* m = mask + first;
    // The row's entries of the next tile, toward the cache for the row's next visit (a
    // short run of lines per row that the hardware prefetchers do not follow).
    for (int64_t p = je; p < je + kPrefetchKeys; p += 64) __builtin_prefetch(m + p, 0, 2);
    const uint64_t high = 0x8080808080808080ull, low = 0x7F7F7F7F7F7F7F7Full;
    auto allowed8 = [&](uint64_t w) { return (((w & low) + low) | w) & high; };
    // 32 entries at a time while all are allowed (a dense mask's common case).
    for (; g + 32 <= je; g += 32) {
      uint64_t w[4];
      __builtin_memcpy(w, m + g, 32);
      if ((allowed8(w[0]) & allowed8(w[1]) & allowed8(w[2]) & allowed8(w[3])) != high) break;
      if (lo == je) lo = g;
      hi = g + 32;
    }
    for (; g + 8 <= je; g += 8) {
      uint64_t w;
      __builtin_memcpy(&w, m + g, 8);
      const uint64_t nonzero = (((w & low) + low) | w) & high;  // high bit of nonzero bytes
      if (nonzero == high) {                                    // all 8 allowed
        if (lo == je) lo = g;
        hi = g + 8;
        continue;
      }
      const uint32_t zero = nonzero == 0 ? 0xFFu : ZeroBytes(w);
      for (int k = 0; k < 8; ++k) {
        if ((zero >> k) & 1u) {
          SetHole(holes, g + k - key_base);
        } else {
          if (lo == je) lo = g + k;
          hi = g + k + 1;
        }
      }
    }
  }
  for (; g < je; ++g) {
    if (mask[(first + g * step) * col] == 0) {
      SetHole(holes, g - key_base);
    } else {
      if (lo == je) lo = g;
      hi = g + 1;
    }
  }
  return lo == je ? KeySpan{je, je} : KeySpan{lo, hi};
}

// The first and last allowed mask entries of real keys [lo, hi) of a row, read from both
// ends: the entries between them are not read here.
static inline KeySpan MaskEnvelope(const uint8_t* mask, int64_t col, int64_t lo, int64_t hi) {
  int64_t b = lo, e = hi;
  if (col == 1) {  // 8 entries at a time while they are all 0
    uint64_t w;
    while (b + 8 <= e && (__builtin_memcpy(&w, mask + b, 8), w == 0)) b += 8;
    // From the end, 64 entries (a cache line) at a time, the lines ahead fetched early:
    // hardware prefetchers follow a backward run poorly, and a masked tail (padding, the
    // upper triangle of a causal mask) is most of a row.
    while (e - 64 >= b) {
      __builtin_prefetch(mask + e - 512, 0, 0);
      uint64_t line[8], any = 0;
      __builtin_memcpy(line, mask + e - 64, 64);
      for (int i = 0; i < 8; ++i) any |= line[i];
      if (any) break;
      e -= 64;
    }
    while (e - 8 >= b && (__builtin_memcpy(&w, mask + e - 8, 8), w == 0)) e -= 8;
  }
  while (b < e && mask[b * col] == 0) ++b;
  while (e > b && mask[(e - 1) * col] == 0) --e;
  return KeySpan{b, e};
}

// ScanMaskRow for a row's keep entries, bytes or a tree's bits: the keys below the
// tree's first column are allowed without a read (one run, no holes), its columns read
// a bit each (a tree is a few hundred keys at most).
static inline KeySpan ScanKeepEntries(const RowMods& m, int64_t first, int64_t step,
                                      int64_t key_base, int64_t jb, int64_t je, uint64_t* holes) {
  if (!m.keep_bits) return ScanMaskRow(m.keep, m.keep_col, first, step, key_base, jb, je, holes);
  // The first space key whose real key (first + g * step) is a tree column.
  int64_t gf = jb;
  if (first + jb * step < m.keep_from) gf = base::MinI(je, (m.keep_from - first + step - 1) / step);
  int64_t lo = je, hi = je;
  for (int64_t g = gf; g < je; ++g) {
    const int64_t c = first + g * step - m.keep_from;
    if (((m.keep[c >> 3] >> (c & 7)) & 1u) == 0) {
      SetHole(holes, g - key_base);
    } else {
      if (lo == je) lo = g;
      hi = g + 1;
    }
  }
  if (gf > jb) return KeySpan{jb, lo < hi ? hi : gf};
  return lo == je ? KeySpan{je, je} : KeySpan{lo, hi};
}

// ScanKeepEntries under the row's block lists: the keys of blocks it does not list are
// holes, a partial block's keys its entries' (if any) and a full block's all kept.
static inline KeySpan ScanKeep(const RowMods& m, int64_t first, int64_t step, int64_t key_base,
                               int64_t jb, int64_t je, uint64_t* holes) {
  const int64_t size = m.blocks.size;
  if (size == 0) return ScanKeepEntries(m, first, step, key_base, jb, je, holes);
  int64_t lo = je, hi = je;
  for (int64_t g = jb; g < je;) {
    const int64_t j = first + g * step, kb = j / size;
    // The space keys whose real keys lie in block kb.
    const int64_t g_end = base::MinI(je, ((kb + 1) * size - first + step - 1) / step);
    const base::BlockKind kind = base::BlockKindOf(m.blocks, j);
    KeySpan run{g, g_end};
    if (kind == base::kBlockNone) {
      for (int64_t x = g; x < g_end; ++x) SetHole(holes, x - key_base);
      run = KeySpan{g_end, g_end};
    } else if (kind == base::kBlockPartial && m.keep) {
      run = ScanKeepEntries(m, first, step, key_base, g, g_end, holes);
    }
    if (run.begin < run.end) {
      if (lo == je) lo = run.begin;
      hi = run.end;
    }
    g = g_end;
  }
  return lo == je ? KeySpan{je, je} : KeySpan{lo, hi};
}

// ScanKeepEntries of a key list's space (space key g is real key keys[g]): the keep entry
// of each key read, a hole where it is 0.
static inline KeySpan ScanKeepListed(const RowMods& m, const int32_t* keys, int64_t key_base,
                                     int64_t jb, int64_t je, uint64_t* holes) {
  int64_t lo = je, hi = je;
  for (int64_t g = jb; g < je; ++g) {
    if (!base::KeepAt(m.keep, m.keep_col, m.keep_bits, m.keep_from, keys[g])) {
      SetHole(holes, g - key_base);
    } else {
      if (lo == je) lo = g;
      hi = g + 1;
    }
  }
  return lo == je ? KeySpan{je, je} : KeySpan{lo, hi};
}

// MaskEnvelope for a row's keep entries, bytes or a tree's bits (real keys [lo, hi));
// under block lists, the listed blocks' keys (the entries not read).
static inline KeySpan KeepEnvelope(const RowMods& m, int64_t lo, int64_t hi) {
  if (m.blocks.size > 0) {
    base::BlockEnvelope(m.blocks, &lo, &hi);
    return KeySpan{lo, hi};
  }
  if (!m.keep_bits) return MaskEnvelope(m.keep, m.keep_col, lo, hi);
  auto kept = [&](int64_t j) { return base::KeepAt(m.keep, 1, true, m.keep_from, j); };
  int64_t e = hi;
  while (e > lo && e > m.keep_from && !kept(e - 1)) --e;
  int64_t b = lo;
  while (b < e && !kept(b)) ++b;
  return KeySpan{b, e};
}

// Softcap, ALiBi and bias on scores [a, b) (whole vectors) of a row, in that order;
// scores of space keys at or past key_end are left alone (the caller masks them) and
// their bias is not read. Biases of -inf become holes. One loop per combination of
// modifiers (the vector loop holds no branch on them). ALiBi's distances are exact
// integers in float below 2^24, where stepping them by whole vectors gives the same
// bits as converting each; beyond, each vector's is converted.
// A key list's space (keys: space key g is real key keys[g]): each lane's distance and
// bias found through the list.
template <bool kCap, bool kAlibi, bool kBias>
static inline void ModListedLoop(float* s, int64_t a, int64_t b, int64_t key_base, int64_t key_end,
                                 const int32_t* keys, const RowMods& m, uint64_t* holes) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  using V = typename S::V;
  const V cap = S::Set(m.cap), inv = S::Set(m.inv_cap), slope = S::Set(m.slope);
  alignas(64) float dist[L], bias[L];
  bool ninf = false;
  for (int64_t jj = a; jj < b; jj += L) {
    for (int64_t l = 0; l < L; ++l) {
      const int64_t g = key_base + jj + l;
      const int64_t j = g < key_end ? keys[g] : m.qpos;
      dist[l] = static_cast<float>(j - m.qpos);
      bias[l] = kBias && g < key_end ? m.bias[j * m.bias_col] : 0.0f;
      ninf |= bias[l] == -__builtin_inff();
    }
    V x = S::Load(s + jj);
    if (kCap) x = S::Mul(S::Tanh(S::Mul(x, inv)), cap);
    if (kAlibi) x = S::MulAdd(slope, S::Load(dist), x);
    if (kBias) x = S::Add(x, S::Load(bias));
    S::Store(x, s + jj);
  }
  if (!kBias || !ninf) return;
  for (int64_t jj = a; jj < b && key_base + jj < key_end; ++jj)
    if (m.bias[keys[key_base + jj] * m.bias_col] == -__builtin_inff()) SetHole(holes, jj);
}

template <bool kCap, bool kAlibi, bool kBias>
static inline void ModRowLoop(float* s, int64_t a, int64_t b, int64_t key_base, int64_t key_end,
                              int64_t first, int64_t step, const RowMods& m, uint64_t* holes,
                              const int32_t* keys) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  using V = typename S::V;
  if (keys) return ModListedLoop<kCap, kAlibi, kBias>(s, a, b, key_base, key_end, keys, m, holes);
  const V cap = S::Set(m.cap), inv = S::Set(m.inv_cap), slope = S::Set(m.slope);
  const V offsets = S::Mul(S::Load(kIota), S::Set(static_cast<float>(step)));
  const int64_t full_end = key_base + b <= key_end ? b : a + (key_end - key_base - a) / L * L;
  const int64_t d_first = first + (key_base + a) * step - m.qpos;
  const int64_t d_last = first + (key_base + b) * step - m.qpos;
  const bool exact = d_first > -(int64_t{1} << 24) && d_first < (int64_t{1} << 24) &&
                     d_last > -(int64_t{1} << 24) && d_last < (int64_t{1} << 24);
  V dist = S::Add(S::Set(static_cast<float>(d_first)), offsets);
  const V dist_step = S::Set(static_cast<float>(L * step));
  V ninf = S::Zero();
  int64_t jj = a;
  auto one = [&](int64_t at, typename S::V bv) {
    V x = S::Load(s + at);
    if (kCap) x = S::Mul(S::Tanh(S::Mul(x, inv)), cap);
    if (kAlibi) {
      if (!exact)
        dist = S::Add(S::Set(static_cast<float>(first + (key_base + at) * step - m.qpos)), offsets);
      x = S::MulAdd(slope, dist, x);
      dist = S::Add(dist, dist_step);
    }
    if (kBias) {
      x = S::Add(x, bv);
      ninf = S::Add(ninf, S::Indicator(bv, -__builtin_inff()));
    }
    S::Store(x, s + at);
  };
  if (kBias && step == 1 && m.bias_col == 1) {
    const float* bias = m.bias + first + key_base;
    for (int64_t p = b; p < b + kPrefetchKeys; p += 16) __builtin_prefetch(bias + p, 0, 2);
    for (; jj < full_end; jj += L) one(jj, S::Load(bias + jj));
  } else if (!kBias) {
    for (; jj < full_end; jj += L) one(jj, S::Zero());
  }
  alignas(64) float tmp[L];
  for (; jj < b && key_base + jj < key_end; jj += L) {  // strided biases, or the last keys
    if (kBias) {
      const int64_t j0 = first + (key_base + jj) * step, valid = key_end - key_base - jj;
      for (int64_t l = 0; l < L; ++l)
        tmp[l] = l < valid ? m.bias[(j0 + l * step) * m.bias_col] : 0.0f;
    }
    one(jj, kBias ? S::Load(tmp) : S::Zero());
  }
  if (!kBias || !(S::ReduceSum(ninf) > 0.0f)) return;
  for (jj = a; jj < b && key_base + jj < key_end; ++jj)
    if (m.bias[(first + (key_base + jj) * step) * m.bias_col] == -__builtin_inff())
      SetHole(holes, jj);
}

static inline void ModRow(float* s, int64_t a, int64_t b, int64_t key_base, int64_t key_end,
                          int64_t first, int64_t step, const RowMods& m, uint64_t* holes,
                          const int32_t* keys = nullptr) {
  const int which = (m.cap > 0.0f ? 4 : 0) | (m.alibi ? 2 : 0) | (m.bias ? 1 : 0);
  switch (which) {
    case 1:
      return ModRowLoop<false, false, true>(s, a, b, key_base, key_end, first, step, m, holes,
                                            keys);
    case 2:
      return ModRowLoop<false, true, false>(s, a, b, key_base, key_end, first, step, m, holes,
                                            keys);
    case 3:
      return ModRowLoop<false, true, true>(s, a, b, key_base, key_end, first, step, m, holes, keys);
    case 4:
      return ModRowLoop<true, false, false>(s, a, b, key_base, key_end, first, step, m, holes,
                                            keys);
    case 5:
      return ModRowLoop<true, false, true>(s, a, b, key_base, key_end, first, step, m, holes, keys);
    case 6:
      return ModRowLoop<true, true, false>(s, a, b, key_base, key_end, first, step, m, holes, keys);
    case 7:
      return ModRowLoop<true, true, true>(s, a, b, key_base, key_end, first, step, m, holes, keys);
    default:
      return;  // nothing to apply (a mask tensor alone)
  }
}

// Scores [a, b) of a row with space keys `keys`: those of keys outside them, at or past
// key_end, or on a hole become -inf. Returns whether a hole lies among the row's keys.
static inline bool MaskRowLanes(float* s, int64_t a, int64_t b, int64_t key_base, int64_t key_end,
                                const base::RowKeys& keys, const uint64_t* holes) {
  const float ninf = -__builtin_inff();
  const int64_t lo = base::MinI(base::MaxI(keys.lo - key_base, a), b);
  const int64_t hi = base::MaxI(base::MinI(base::MinI(keys.hi, key_end) - key_base, b), lo);
  // Below the dense run: the strided columns in [strided_begin, strided_end) stay.
  int64_t jj = a;
  int64_t col_end = a;  // one past the last strided column kept
  if (keys.stride > 0 && keys.strided_end > keys.strided_begin) {
    int64_t c =
        base::NextOnStride(base::MaxI(keys.strided_begin, key_base + a), keys.stride, keys.phase) -
        key_base;
    const int64_t end = base::MinI(base::MinI(keys.strided_end, key_end) - key_base, lo);
    for (; c < end; c += keys.stride) {
      FillRun(s, 1, jj, c, ninf);
      jj = c + 1;
      col_end = jj;
    }
  }
  FillRun(s, 1, jj, lo, ninf);
  FillRun(s, 1, hi, b, ninf);
  bool inside = false;
  if (holes) {
    for (int64_t w = a / kHoleBits; w * kHoleBits < b; ++w) {
      uint64_t bits = holes[w];
      while (bits) {
        const int64_t k = w * kHoleBits + __builtin_ctzll(bits);
        bits &= bits - 1;
        if (k < a || k >= b) continue;
        const int64_t g = key_base + k;
        if ((k >= lo && k < hi) ||
            (k < col_end && g >= keys.strided_begin && g % keys.stride == keys.phase))
          inside = true;
        s[k] = ninf;
      }
    }
  }
  return inside;
}

// ModRow, then MaskRowLanes (`listed`: a key list's space, else null): one call per row
// and tile of the fused path, kept out of line so that the micro-kernel holds one copy of
// it, not one per row of its block.
__attribute__((noinline)) static bool ModifyAndMask(float* s, int64_t a, int64_t b,
                                                    int64_t key_base, int64_t key_end,
                                                    int64_t first, int64_t step, const RowMods& m,
                                                    const base::RowKeys& keys, uint64_t* holes,
                                                    const int32_t* listed) {
  ModRow(s, a, b, key_base, key_end, first, step, m, holes, listed);
  return MaskRowLanes(s, a, b, key_base, key_end, keys, holes);
}

// Stage: the modifiers of one head in place, row i at q_start + i, through a padded
// copy of each row; -inf biases mask their entries (-inf, whatever the score was).
static size_t ModifyScratchFloats(int64_t cols) {
  return base::SatAdd(Piece(base::Count(PadKeys(cols))),
                      Piece(base::SatMul(base::Count(HoleWords(cols)), 2)));
}

static void ModifyRows(Matrix s, int64_t rows, int64_t cols, int64_t q_start, const Mods& mods,
                       float* scratch) {
  const int64_t padded = PadKeys(cols);
  float* buf = scratch;
  uint64_t* holes = reinterpret_cast<uint64_t*>(scratch + Piece(base::Count(padded)));
  const base::RowKeys all{0, cols, 0, 0, 0};
  for (int64_t i = 0; i < rows; ++i) {
    float* row = s.data + i * s.row;
    for (int64_t j = 0; j < cols; ++j) buf[j] = row[j * s.col];
    for (int64_t j = cols; j < padded; ++j) buf[j] = 0.0f;
    for (int64_t w = 0; w < HoleWords(padded); ++w) holes[w] = 0;
    ModRow(buf, 0, padded, 0, cols, 0, 1, RowModsOf(mods, 0, i, q_start + i), holes);
    MaskRowLanes(buf, 0, padded, 0, cols, all, holes);
    for (int64_t j = 0; j < cols; ++j) row[j * s.col] = buf[j];
  }
}
