// The cache store's rows (Table::store_rows), compiled for each target: loops of
// independent lanes that the compiler runs in the target's vectors. Each stored value is a
// comparison, a quotient and a rounding of the row's values, exact or correctly rounded in
// any lane, so every target writes the bytes of the scalar definitions (lib/run/store.cc,
// base/dtype.h); the AVX targets' Q4_0 quotients by the inverse of their scale
// (S::DivByInverse) are the division's.

// Streamed stores (S::kStream, StoreRow::stream): the lines a row's store fills whole with
// one register are written past the caches, so that none is read from memory before it is
// written over; S::StreamFence orders them before the call returns. Whether p starts a
// line.
static inline bool LineStart(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 63) == 0; }

// The largest AbsBits of each of `count` blocks of b floats from x into top[0, count)
// (a NaN's bits above every finite value's, as AbsBits orders them); in vectors where
// the target narrows to int8 and a block is whole vectors, four blocks' last steps
// shared (S::AbsMax4).
template <int = 0>  // (a template: S::AbsBitsMax and S::AbsMax4 are the AVX targets' only)
static inline void BlockTops(const float* __restrict x, int64_t b, int64_t count,
                             uint32_t* __restrict top) {
  int64_t k = 0;
  if constexpr (S::kStoreI8) {
    if (b % static_cast<int64_t>(S::kLanes) == 0) {
      constexpr int64_t L = static_cast<int64_t>(S::kLanes);
      for (; k + 4 <= count; k += 4) {
        alignas(64) float lanes[L];
        S::Store(S::template AbsMax4<>(x + k * b, b), lanes);
        for (int j = 0; j < 4; ++j) top[k + j] = BitsOf(lanes[j * L / 4]);
      }
      for (; k < count; ++k) top[k] = S::AbsBitsMax(x + k * b, b);
      return;
    }
  }
  for (; k < count; ++k) {
    uint32_t m = 0;
    for (int64_t d = k * b; d < (k + 1) * b; ++d) m = m > AbsBits(x[d]) ? m : AbsBits(x[d]);
    top[k] = m;
  }
}

// Blocks (or groups) whose maxima BlockTops finds in one call.
constexpr int64_t kTopsAtOnce = 16;

// kLanes values x / s (vs: s in every lane) rounded half to even (vm: RoundMagic), clamped
// to [-127, 127] and narrowed to int8 at o: RoundClamp's bytes, lane by lane (the AVX
// targets' S::StoreI8).
template <class W>
static OCTATTN_INLINE void QuantizeI8(const float* __restrict x, W vs, W vm, int8_t* __restrict o) {
  const W v = S::Sub(S::Add(S::Div(S::Load(x), vs), vm), vm);
  S::StoreI8(S::Min(S::Max(v, S::Set(-127.0f)), S::Set(127.0f)), o);
}

// One ggml block of 32 values x, whose largest AbsBits is `top`, into dst (type Q8_0 or
// Q4_0), as ggml quantizes: d = max|x| / 127 (Q8_0) or the value of largest magnitude
// (the first of equals) / -8 (Q4_0), rounded to f16; each value x / d rounded half to
// even and clamped; a block with a non-finite value stores the f16 NaN and zeros (Q4_0:
// nibbles 8). Values in vectors where the target narrows to int8 (S::kStoreI8).
template <int = 0>  // (a template: S::StoreI8 and S::StoreNibbles are the AVX targets' only)
static inline void StoreBlock(const float* __restrict x, Dtype t, uint8_t* __restrict dst,
                              uint32_t top, float magic) {
  const bool finite = top < 0x7F800000u;
  float m = 0.0f;
  for (int i = 0; i < kQuantBlock && t == kQ4_0; ++i)
    if (AbsBits(x[i]) == top) {
      m = x[i];
      break;
    }
  const uint16_t h = !finite ? 0x7E00 : F32ToF16(t == kQ8_0 ? FloatOf(top) / 127.0f : m / -8.0f);
  memcpy(dst, &h, 2);
  const float d = F16ToF32(h);
  const bool zero = !finite || d == 0.0f;
  uint8_t* __restrict q = dst + 2;
  if constexpr (S::kStoreI8) {
    constexpr int64_t L = static_cast<int64_t>(S::kLanes);
    const typename S::V vd = S::Set(d), vm = S::Set(magic);
    if (t == kQ8_0 && !zero) {
      for (int64_t i = 0; i < kQuantBlock; i += L)
        QuantizeI8(x + i, vd, vm, reinterpret_cast<int8_t*>(q + i));
      return;
    }
    if (t == kQ4_0 && !zero) {
      const typename S::V eight = S::Set(8.0f);
      for (int64_t i = 0; i < kQuantBlock / 2; i += L)
        S::StoreNibbles(S::Add(S::Div(S::Load(x + i), vd), eight),
                        S::Add(S::Div(S::Load(x + i + kQuantBlock / 2), vd), eight), q + i);
      return;
    }
  }
  if (t == kQ8_0) {
    for (int i = 0; i < kQuantBlock; ++i)
      q[i] = static_cast<uint8_t>(
          static_cast<int8_t>(zero ? 0 : RoundClamp(x[i] / d, -127, 127, magic)));
    return;
  }
  // Value i's nibble in byte i (low) or i - 16 (high).
  for (int i = 0; i < 16; ++i) {
    const int lo = zero ? 8 : RoundClamp(x[i] / d + 8.0f, 0, 15, magic);
    const int hi = zero ? 8 : RoundClamp(x[i + 16] / d + 8.0f, 0, 15, magic);
    q[i] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Four Q8_0 blocks from x into dst (the first block) on the targets that narrow to int8:
// StoreBlock's bytes, the four scales found and rounded to f16 in one register
// (S::AbsMax4, S::RoundF16) and each block's read from it. False, with nothing written,
// where a scale is not a normal f16 (zero, subnormal, infinite or NaN: StoreBlock's).
template <int = 0>  // (a template: S::AbsMax4, S::RoundF16 and S::Quarter are the AVX targets')
static OCTATTN_INLINE bool StoreQ8Four(const float* __restrict x, uint8_t* __restrict dst,
                                       float magic) {
  using V = typename S::V;
  constexpr int64_t L = static_cast<int64_t>(S::kLanes), B = kQuantBlock;
  constexpr int64_t Bytes = B + 2;  // a block: its f16 scale, then its values
  const V s = S::Div(S::template AbsMax4<>(x, B), S::Set(127.0f));
  const V d = S::template RoundF16<>(s);
  // Every scale a normal f16, in [2^-14, 65504] (not NaN): (2^-14's predecessor, 65504].
  if (!S::template AllWithin<>(d, 0x1.fffffep-15f, 65504.0f)) return false;
  const V vm = S::Set(magic);
  const V vd[4] = {S::template Quarter<0>(d), S::template Quarter<1>(d), S::template Quarter<2>(d),
                   S::template Quarter<3>(d)};
  for (int k = 0; k < 4; ++k) {
    // d is s rounded to f16 and widened: exactly representable, so its f16 bits are s's.
    const uint16_t h = F32ToF16(S::template FirstLane<>(vd[k]));
    memcpy(dst + k * Bytes, &h, 2);
  }
  for (int k = 0; k < 4; ++k)
    for (int64_t p = 0; p < B; p += L)
      QuantizeI8(x + k * B + p, vd[k], vm, reinterpret_cast<int8_t*>(dst + k * Bytes + 2 + p));
  return true;
}

// The Q8_0 or Q4_0 blocks of a row; Q8_0's four at a time where the target narrows to
// int8 (StoreQ8Four).
template <int = 0>
static inline void StoreBlocks(const StoreRow& r, float magic) {
  const int64_t blocks = r.n / kQuantBlock;
  int64_t k0 = 0;
  if constexpr (S::kStoreI8) {
    if (r.t == kQ8_0)
      for (; k0 + 4 <= blocks; k0 += 4) {
        const float* x = r.x + k0 * kQuantBlock;
        uint8_t* dst = static_cast<uint8_t*>(ElemAt(r.out, k0, r.t));
        if (StoreQ8Four(x, dst, magic)) continue;
        for (int64_t k = 0; k < 4; ++k)
          StoreBlock(x + k * kQuantBlock, r.t, static_cast<uint8_t*>(ElemAt(r.out, k0 + k, r.t)),
                     S::AbsBitsMax(x + k * kQuantBlock, kQuantBlock), magic);
      }
  }
  for (; k0 < blocks; k0 += kTopsAtOnce) {
    const int64_t count = MinI(kTopsAtOnce, blocks - k0);
    uint32_t top[kTopsAtOnce];
    BlockTops(r.x + k0 * kQuantBlock, kQuantBlock, count, top);
    for (int64_t k = 0; k < count; ++k)
      StoreBlock(r.x + (k0 + k) * kQuantBlock, r.t,
                 static_cast<uint8_t*>(ElemAt(r.out, k0 + k, r.t)), top[k], magic);
  }
}

// n fp8 codes of x / s (F32ToFp8's selects, for one type); whole vectors by S::StoreFp8x4
// and S::StoreFp8 where the target has them (the quotients and the cases the same, lane
// by lane; four vectors narrowed together by packs, a whole line past the caches where
// they fill one: Streamed).
template <Dtype T>
static inline void StoreFp8(const float* __restrict x, float s, int64_t n, uint8_t* __restrict o,
                            bool stream) {
  int64_t d = 0;
  if constexpr (S::kStoreI8) {
    constexpr int64_t L = static_cast<int64_t>(S::kLanes);
    const typename S::V vs = S::Set(s);
    // (Four at a time on 16 lanes only: on AVX2 a decode step's store into new rows of a
    // cache took 1.1-1.3x as long that way.)
    for (; L == 16 && d + 4 * L <= n; d += 4 * L)
      S::template StoreFp8x4<T == kE4m3>(S::Div(S::Load(x + d), vs), S::Div(S::Load(x + d + L), vs),
                                         S::Div(S::Load(x + d + 2 * L), vs),
                                         S::Div(S::Load(x + d + 3 * L), vs), o + d,
                                         stream && LineStart(o + d));
    for (; d + L <= n; d += L) S::template StoreFp8<T == kE4m3>(S::Div(S::Load(x + d), vs), o + d);
  }
  for (; d < n; ++d) o[d] = F32ToFp8(x[d] / s, T);
}

// INT8 group g0 / r.group of a row whose largest AbsBits is `top`: s = max|x| / 127 stored
// in its scale's dtype and read back (the value the cache's readers see), each value x / s
// rounded half to even and clamped to [-127, 127]; a group with a non-finite value gets a
// NaN scale and zeros, as does a group whose scale is 0. Whole vectors where the target
// narrows to int8 (S::kStoreI8): the same quotients, roundings and clamps.
template <int = 0>  // (a template: S::StoreI8 is the AVX targets' only)
static inline void StoreInt8Group(const StoreRow& r, int64_t g0, uint32_t top, float magic) {
  const float* __restrict x = r.x;
  int8_t* __restrict o = static_cast<int8_t*>(r.out);
  const int64_t g1 = g0 + r.group;
  const bool finite = top < 0x7F800000u;
  const int64_t at = g0 / r.group * r.sc_col;
  StoreElem(r.sc, at, r.sc_type, finite ? FloatOf(top) / 127.0f : __builtin_nanf(""));
  const float s = LoadElem(r.sc, at, r.sc_type);
  if (!finite || s == 0.0f) {
    memset(o + g0, 0, static_cast<size_t>(r.group));
    return;
  }
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  if constexpr (S::kStoreI8) {
    if (r.group % L == 0) {
      const typename S::V vs = S::Set(s), vm = S::Set(magic);
      for (int64_t d = g0; d < g1; d += L) QuantizeI8(x + d, vs, vm, o + d);
      return;
    }
  }
  for (int64_t d = g0; d < g1; ++d) {
    float v = RoundEven(x[d] / s, magic);
    v = v < -127.0f ? -127.0f : v;
    v = v > 127.0f ? 127.0f : v;
    o[d] = static_cast<int8_t>(v);
  }
}

// Four INT8 groups of P vectors from x (f32 scales) on the targets that narrow to int8:
// StoreInt8Group's bytes, the four scales found in one register (S::AbsMax4) and each
// group's read from it. False, with nothing written, where a scale is 0 or not finite.
template <int P>
static OCTATTN_INLINE bool StoreInt8Four(const float* __restrict x, int8_t* __restrict o,
                                         float* __restrict sc, int64_t sc_col, float magic) {
  using V = typename S::V;
  constexpr int64_t L = static_cast<int64_t>(S::kLanes), G = P * L;
  const V s = S::Div(S::template AbsMax4<>(x, G), S::Set(127.0f));
  // Each quarter's lanes hold its group's scale: all four in (0, FLT_MAX] (not NaN).
  if (!S::template AllWithin<>(s, 0.0f, 3.4028235e38f)) return false;
  const V vm = S::Set(magic);
  const V vs[4] = {S::template Quarter<0>(s), S::template Quarter<1>(s), S::template Quarter<2>(s),
                   S::template Quarter<3>(s)};
  for (int k = 0; k < 4; ++k) sc[k * sc_col] = S::template FirstLane<>(vs[k]);
  for (int k = 0; k < 4; ++k)
    for (int p = 0; p < P; ++p) QuantizeI8(x + k * G + p * L, vs[k], vm, o + k * G + p * L);
  return true;
}

// The INT8 groups of a row of f32 scales, P vectors a group, on the targets that narrow to
// int8: four groups at a time (StoreInt8Four), the rest and any four with a scale of 0 or
// not finite by StoreInt8Group.
template <int P>
static inline void StoreInt8Vectors(const StoreRow& r, float magic) {
  constexpr int64_t G = P * static_cast<int64_t>(S::kLanes);
  float* sc = static_cast<float*>(r.sc);
  int8_t* o = static_cast<int8_t*>(r.out);
  int64_t g0 = 0;
  for (; g0 + 4 * G <= r.n; g0 += 4 * G) {
    if (StoreInt8Four<P>(r.x + g0, o + g0, sc + g0 / G * r.sc_col, r.sc_col, magic)) continue;
    for (int64_t g = g0; g < g0 + 4 * G; g += G)
      StoreInt8Group(r, g, S::AbsBitsMax(r.x + g, G), magic);
  }
  for (; g0 < r.n; g0 += G) StoreInt8Group(r, g0, S::AbsBitsMax(r.x + g0, G), magic);
}

// The INT8 groups of a row (StoreInt8Group).
template <int = 0>
static inline void StoreInt8(const StoreRow& r, float magic) {
  if constexpr (S::kStoreI8) {
    constexpr int64_t L = static_cast<int64_t>(S::kLanes);
    if (r.sc_type == kF32) {
      switch (r.group == L       ? 1
              : r.group == 2 * L ? 2
              : r.group == 4 * L ? 4
              : r.group == 8 * L ? 8
                                 : 0) {
        case 1:
          return StoreInt8Vectors<1>(r, magic);
        case 2:
          return StoreInt8Vectors<2>(r, magic);
        case 4:
          return StoreInt8Vectors<4>(r, magic);
        case 8:
          return StoreInt8Vectors<8>(r, magic);
        default:
          break;
      }
    }
  }
  for (int64_t g0 = 0; g0 < r.n; g0 += kTopsAtOnce * r.group) {
    const int64_t count = MinI(kTopsAtOnce, (r.n - g0) / r.group);
    uint32_t top[kTopsAtOnce];
    BlockTops(r.x + g0, r.group, count, top);
    for (int64_t k = 0; k < count; ++k) StoreInt8Group(r, g0 + k * r.group, top[k], magic);
  }
}

// A row of f32, bf16 or f16 elements (T): with `stream`, the lines it fills whole from
// its first line boundary on Streamed (a vector a line of f32, two narrowed of the 16-bit
// types: S::StreamStore16); the rest copied (f32) or narrowed (NarrowRowV).
template <Dtype T>  // (S::StreamStore and StreamStore16 are the 16-lane AVX targets' only)
static inline void StoreWideRow(const float* __restrict x, int64_t n, void* __restrict o,
                                bool stream) {
  constexpr int64_t kBytes = T == kF32 ? 4 : 2;
  float* out = static_cast<float*>(o);  // (ElemAt's pointer type)
  auto plain = [&](int64_t d0, int64_t d1) {
    if constexpr (T == kF32) {
      memcpy(out + d0, x + d0, static_cast<size_t>(d1 - d0) * 4);
    } else {
      NarrowRowV(x + d0, d1 - d0, ElemAt(out, d0, T), 1, T);
    }
  };
  int64_t d = 0;
  if constexpr (S::kStream) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(o);
    if (stream && a % kBytes == 0) {
      d = MinI(n, static_cast<int64_t>((64 - a % 64) % 64) / kBytes);
      plain(0, d);
      constexpr int64_t L = static_cast<int64_t>(S::kLanes), E = 64 / kBytes;
      for (; d + E <= n; d += E) {
        if constexpr (T == kF32) {
          S::StreamStore(S::Load(x + d), out + d);
        } else {
          S::StreamStore16(S::Load(x + d), S::Load(x + d + L), T, ElemAt(out, d, T));
        }
      }
    }
  }
  plain(d, n);
}

static inline void StoreOneRow(const StoreRow& r, float magic, bool stream) {
  switch (r.t) {
    case kF32:
      return StoreWideRow<kF32>(r.x, r.n, r.out, stream);
    case kBf16:
      return StoreWideRow<kBf16>(r.x, r.n, r.out, stream);
    case kF16:
      return StoreWideRow<kF16>(r.x, r.n, r.out, stream);
    case kI8:
      return StoreInt8(r, magic);
    case kE4m3:
    case kE5m2: {
      uint8_t* o = static_cast<uint8_t*>(r.out);
      for (int64_t g0 = 0; g0 < r.n; g0 += r.group) {
        const float s = r.sc ? LoadElem(r.sc, g0 / r.group * r.sc_col, r.sc_type) : 1.0f;
        const int64_t m = MinI(r.group, r.n - g0);
        if (r.t == kE4m3) {
          StoreFp8<kE4m3>(r.x + g0, s, m, o + g0, stream);
        } else {
          StoreFp8<kE5m2>(r.x + g0, s, m, o + g0, stream);
        }
      }
      return;
    }
    case kQ8_0:
    case kQ4_0:
      return StoreBlocks(r, magic);
    default:
      return;
  }
}

// Q4_0 rows on the targets that narrow to int8, in units of four blocks (rows of a
// multiple of 128 values) and two phases: first the scales of kLanes / 4 units (each
// block's value of largest magnitude, the first of equals, over -8, rounded to f16) and
// their inverses in one division, then the nibbles of the units before them, by the
// inverses (S::DivByInverse), waiting on no division. (A row at a time, the quotients
// wait on their own scales, which wait on the row's reductions, and the vector unit's
// queue fills with them; each block took a scalar search and conversion.) A unit's bytes,
// scales included, are written in its second phase, in the order of the rows (two rows a
// paged store sends to one slot leave the later one's); a block whose scale is not a
// normal f16 (or holds a non-finite value) takes StoreBlock.
struct Q4Unit {
  const float* x;  // its 128 values
  uint8_t* dst;    // its four blocks
};
struct Q4Scales {
  // Lane 4u + k: unit u's block k: its scale, that scale's inverse, its f16 bits, its
  // largest AbsBits, and (bit 4u + k of ok) whether the scale is a normal f16.
  alignas(64) float d[S::kLanes], inv[S::kLanes];
  alignas(64) uint16_t h[S::kLanes];
  uint32_t top[S::kLanes], ok;
};
template <int = 0>  // (a template: the vocabulary's calls are the AVX targets' only)
static OCTATTN_INLINE void Q4Scale(const Q4Unit* units, int n, Q4Scales* out) {
  using V = typename S::V;
  constexpr int L = static_cast<int>(S::kLanes);
  alignas(64) float m[L], tops[L];
  for (int u = 0; u < L / 4; ++u) {
    const float* x = units[u < n ? u : 0].x;
    S::Store(S::template AbsMax4<>(x, kQuantBlock), tops);
    for (int k = 0; k < 4; ++k) {
      const uint32_t bits = BitsOf(tops[k * L / 4]);
      const float* b = x + k * kQuantBlock;
      out->top[4 * u + k] = bits;
      m[4 * u + k] = bits < 0x7F800000u ? b[S::template FirstAbsBits32<>(b, bits)] : FloatOf(bits);
    }
  }
  const V d = S::template RoundF16<>(S::Mul(S::Load(m), S::Set(-0.125f)));  // (m / -8, exact)
  out->ok = S::WithinMask(d, 0x1.fffffep-15f, 65504.0f);
  S::Store(d, out->d);
  S::Store(S::Div(S::Set(1.0f), d), out->inv);
  S::StoreF16(d, reinterpret_cast<float*>(out->h));  // (d is an f16 value: exact)
}
template <int = 0>
static OCTATTN_INLINE void Q4Values(const Q4Unit* units, int n, const Q4Scales& sc, float magic) {
  using V = typename S::V;
  constexpr int64_t L = static_cast<int64_t>(S::kLanes), B = kQuantBlock;
  const V eight = S::Set(8.0f);
  for (int u = 0; u < n; ++u)
    for (int k = 0; k < 4; ++k) {
      const int i = 4 * u + k;
      const float* x = units[u].x + k * B;
      uint8_t* dst = units[u].dst + k * (B / 2 + 2);
      if (!((sc.ok >> i) & 1)) {
        StoreBlock(x, kQ4_0, dst, sc.top[i], magic);
        continue;
      }
      memcpy(dst, &sc.h[i], 2);
      const V vd = S::Set(sc.d[i]), vi = S::Set(sc.inv[i]);
      for (int64_t j = 0; j < B / 2; j += L)
        S::StoreNibbles(S::Add(S::DivByInverse(S::Load(x + j), vd, vi), eight),
                        S::Add(S::DivByInverse(S::Load(x + j + B / 2), vd, vi), eight),
                        dst + 2 + j);
    }
}
template <int = 0>
static void StoreQ4Rows(const StoreRow* rows, int64_t count, float magic) {
  constexpr int U = static_cast<int>(S::kLanes) / 4;  // units a division serves
  int64_t row = 0, g0 = 0;                            // the next unit
  auto next = [&](Q4Unit* out) {
    int n = 0;
    for (; n < U && row < count; ++n) {
      out[n] = {rows[row].x + g0,
                static_cast<uint8_t*>(ElemAt(rows[row].out, g0 / kQuantBlock, kQ4_0))};
      g0 += 4 * kQuantBlock;
      if (g0 == rows[row].n) ++row, g0 = 0;
    }
    return n;
  };
  Q4Unit units[2][U];
  Q4Scales scales[2];
  int n[2];
  n[0] = next(units[0]);
  if (n[0] > 0) Q4Scale(units[0], n[0], &scales[0]);
  for (int cur = 0; n[cur] > 0; cur ^= 1) {
    n[cur ^ 1] = next(units[cur ^ 1]);
    if (n[cur ^ 1] > 0) Q4Scale(units[cur ^ 1], n[cur ^ 1], &scales[cur ^ 1]);
    Q4Values(units[cur], n[cur], scales[cur], magic);
  }
}

// INT8 rows of f32 scales (P vectors a group) and Q8_0 rows (Q8: P vectors a block) on
// the targets that narrow to int8, in units of four groups or blocks and two phases (as
// StoreQ4Rows): first the scales of kLanes / 4 units (S::AbsMax4's, joined by
// S::Interleave4; Q8_0's rounded to f16) and their inverses, a division each, then the
// values of the units before them, x / s (by the division or by the inverse,
// S::DivByInverse: the same quotients) and rounded as they are narrowed
// (S::StoreRoundI8x4: |x / s| < 127.5, so no clamp). A unit's bytes and scales are
// written in its second phase, in the order of the rows; a unit with a scale out of range
// (INT8: outside (2^-60, 2^60], the inverse's; Q8_0: not a normal f16) takes
// StoreInt8Group or StoreBlock, whose divisions are exact everywhere.
struct I8Unit {
  const float* x;     // its values
  int8_t* o;          // their bytes (Q8_0: its first block)
  float* sc;          // its first group's scale (INT8)
  const StoreRow* r;  // its row
  int64_t g0;         // its first value's index in the row
};
struct I8Scales {
  // Lane (kLanes / 4) k + u: unit u's group k: its scale, that scale's inverse, its f16
  // bits (Q8_0), its largest AbsBits, and (that bit of ok) whether the scale is in range.
  alignas(64) float s[S::kLanes], inv[S::kLanes];
  alignas(64) uint16_t h[S::kLanes];
  alignas(64) uint32_t top[S::kLanes];
  uint32_t ok;
};
template <int P, bool Q8>
static OCTATTN_INLINE void I8Scale(const I8Unit* units, int n, I8Scales* out) {
  using V = typename S::V;
  constexpr int U = static_cast<int>(S::kLanes) / 4;
  constexpr int64_t G = P * static_cast<int64_t>(S::kLanes);
  V m[U];
  for (int u = 0; u < U; ++u) m[u] = S::template AbsMax4<>(units[u < n ? u : 0].x, G);
  const V top = S::template Interleave4<>(m);
  S::Store(top, reinterpret_cast<float*>(out->top));
  V s = S::Div(top, S::Set(127.0f));  // (a NaN's bits are a NaN: not in range)
  if constexpr (Q8) {
    s = S::template RoundF16<>(s);
    out->ok = S::WithinMask(s, 0x1.fffffep-15f, 65504.0f);
    S::StoreF16(s, reinterpret_cast<float*>(out->h));  // (s is an f16 value: exact)
  } else {
    out->ok = S::WithinMask(s, 0x1p-60f, 0x1p60f);
  }
  S::Store(s, out->s);
  S::Store(S::Div(S::Set(1.0f), s), out->inv);
}
template <int P, bool Q8>
static OCTATTN_INLINE void I8Values(const I8Unit* units, int n, const I8Scales& sc, float magic,
                                    bool stream) {
  using V = typename S::V;
  constexpr int L = static_cast<int>(S::kLanes), U = L / 4;
  constexpr int64_t G = P * static_cast<int64_t>(L);
  constexpr int64_t Bytes = kQuantBlock + 2;  // a Q8_0 block: its f16 scale, then its values
  constexpr uint32_t kUnit = 1u | 1u << U | 1u << 2 * U | 1u << 3 * U;  // unit 0's ok bits
  for (int u = 0; u < n; ++u) {
    const I8Unit& a = units[u];
    if ((sc.ok & kUnit << u) != kUnit << u) {
      for (int k = 0; k < 4; ++k) {
        if constexpr (Q8) {
          StoreBlock(a.x + k * G, kQ8_0, reinterpret_cast<uint8_t*>(a.o) + k * Bytes,
                     sc.top[k * U + u], magic);
        } else {
          StoreInt8Group(*a.r, a.g0 + k * G, sc.top[k * U + u], magic);
        }
      }
      continue;
    }
    V vs[4], vi[4];
    for (int k = 0; k < 4; ++k) {
      vs[k] = S::Set(sc.s[k * U + u]);
      vi[k] = S::Set(sc.inv[k * U + u]);
    }
    for (int k = 0; k < 4; ++k) {
      if constexpr (Q8) {
        memcpy(a.o + k * Bytes, &sc.h[k * U + u], 2);
      } else {
        a.sc[k * a.r->sc_col] = sc.s[k * U + u];
      }
    }
    const bool lines = stream && LineStart(a.o);  // INT8: whole lines (Streamed)
    // Half the quotients by the divider, half by the inverse on the FMA units: both
    // exact, and each unit busy with its own half.
    for (int j = 0; j < 4 * P; j += 4) {
      V q[4];
      for (int i = 0; i < 4; ++i) {
        const V v = S::Load(a.x + (j + i) * L);
        const int k = (j + i) / P;
        q[i] = i < 2 ? S::Div(v, vs[k]) : S::DivByInverse(v, vs[k], vi[k]);
      }
      if constexpr (!Q8) {
        S::template StoreRoundI8x4<false>(q[0], q[1], q[2], q[3], a.o + j * L, nullptr, lines);
      } else if constexpr (P == 2) {  // two blocks
        S::template StoreRoundI8x4<true>(q[0], q[1], q[2], q[3], a.o + j / P * Bytes + 2,
                                         a.o + (j / P + 1) * Bytes + 2);
      } else {  // a block of 4 vectors
        S::template StoreRoundI8x4<false>(q[0], q[1], q[2], q[3], a.o + j / P * Bytes + 2);
      }
    }
  }
}
template <int P, bool Q8>
static void StoreInt8Rows(const StoreRow* rows, int64_t count, float magic, bool stream) {
  constexpr int U = static_cast<int>(S::kLanes) / 4;  // units a division serves
  constexpr int64_t G = P * static_cast<int64_t>(S::kLanes);
  int64_t row = 0, g0 = 0;  // the next unit
  auto next = [&](I8Unit* out) {
    int n = 0;
    for (; n < U && row < count; ++n) {
      const StoreRow& r = rows[row];
      if constexpr (Q8) {
        out[n] = {r.x + g0, static_cast<int8_t*>(ElemAt(r.out, g0 / kQuantBlock, kQ8_0)), nullptr,
                  &r, g0};
      } else {
        out[n] = {r.x + g0, static_cast<int8_t*>(r.out) + g0,
                  static_cast<float*>(r.sc) + g0 / G * r.sc_col, &r, g0};
      }
      g0 += 4 * G;
      if (g0 == r.n) ++row, g0 = 0;
    }
    return n;
  };
  I8Unit units[2][U];
  I8Scales scales[2];
  int n[2];
  n[0] = next(units[0]);
  if (n[0] > 0) I8Scale<P, Q8>(units[0], n[0], &scales[0]);
  for (int cur = 0; n[cur] > 0; cur ^= 1) {
    n[cur ^ 1] = next(units[cur ^ 1]);
    if (n[cur ^ 1] > 0) I8Scale<P, Q8>(units[cur ^ 1], n[cur ^ 1], &scales[cur ^ 1]);
    I8Values<P, Q8>(units[cur], n[cur], scales[cur], magic, stream);
  }
}

// Vectors a group of an INT8 row that StoreInt8Rows takes (f32 scales, whole units of four
// groups of 1, 2, 4 or 8 vectors), else 0.
static inline int Int8RowsVectors(const StoreRow& r) {
  const int64_t L = static_cast<int64_t>(S::kLanes);
  if (r.t != kI8 || r.sc_type != kF32 || r.group % L != 0 || r.n % (4 * r.group) != 0) return 0;
  const int64_t p = r.group / L;
  return p == 1 || p == 2 || p == 4 || p == 8 ? static_cast<int>(p) : 0;
}

static void StoreRowsRun(const StoreRow* rows, int64_t count) {
  const float magic = RoundMagic();
  // (A call's rows share their type; the fence waits for every store before it, so only
  // the types that stream pay it.)
  const Dtype t = count > 0 ? rows[0].t : kF32;
  const bool stream =
      S::kStream && count > 0 && rows[0].stream &&
      (t == kF32 || t == kBf16 || t == kF16 || t == kI8 || t == kE4m3 || t == kE5m2);
  int64_t i = 0;
  while (i < count) {
    if constexpr (S::kStoreI8) {
      // The longest run of Q4_0 rows from i of whole units (StoreQ4Rows).
      int64_t j = i;
      while (j < count && rows[j].t == kQ4_0 && rows[j].n % (4 * kQuantBlock) == 0) ++j;
      if (j > i) {
        StoreQ4Rows(rows + i, j - i, magic);
        i = j;
        continue;
      }
      // The longest run of INT8 rows from i of one shape that StoreInt8Rows takes.
      if (const int p = Int8RowsVectors(rows[i])) {
        const StoreRow& a = rows[i];
        while (j < count && rows[j].t == kI8 && rows[j].sc_type == kF32 &&
               rows[j].group == a.group && rows[j].n == a.n)
          ++j;
        switch (p) {
          case 1:
            StoreInt8Rows<1, false>(rows + i, j - i, magic, stream);
            break;
          case 2:
            StoreInt8Rows<2, false>(rows + i, j - i, magic, stream);
            break;
          case 4:
            StoreInt8Rows<4, false>(rows + i, j - i, magic, stream);
            break;
          default:
            StoreInt8Rows<8, false>(rows + i, j - i, magic, stream);
            break;
        }
        i = j;
        continue;
      }
      // The longest run of Q8_0 rows from i of whole units (four blocks).
      while (j < count && rows[j].t == kQ8_0 && rows[j].n % (4 * kQuantBlock) == 0) ++j;
      if (j > i) {
        StoreInt8Rows<kQuantBlock / static_cast<int>(S::kLanes), true>(rows + i, j - i, magic,
                                                                       stream);
        i = j;
        continue;
      }
    }
    StoreOneRow(rows[i++], magic, stream);
  }
  if constexpr (S::kStream)
    if (stream) S::StreamFence();
}
