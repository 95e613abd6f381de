// Transpose8x8 and TransposeRows on x86 targets with AVX (eight floats per ymm register,
// sixteen per zmm register): unpack, shuffle, then move 128-bit lanes. Included by
// transpose-inl.h, inside a backend's vocabulary struct, only where the backend says its
// target has AVX (OCTATTN_AVX_TRANSPOSE), after <immintrin.h>.

// r[c] = column c of the 8x8 block whose row i is r[i], in registers.
static OCTATTN_INLINE void Transpose8x8Regs(__m256 (&r)[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // r[c] holds column c (c < 4) of rows 0-3 in its low half and column c + 4 in its
  // high half; r[c + 4] the same for rows 4-7.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
  for (int i = 0; i < 8; ++i) r[i] = t[i];
}

// dst[c * dst_stride + r] = src[r * src_stride + c] for r, c < 8.
static OCTATTN_INLINE void Transpose8x8(const float* src, int64_t src_stride, float* dst,
                                        int64_t dst_stride) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  Transpose8x8Regs(r);
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * dst_stride, r[i]);
}

// Eight elements of type T at p widened to f32 (bf16: moved to the high half of each
// lane; f16: F16C's conversion; both exact).
template <Dtype T>
static OCTATTN_INLINE __m256 Row8(const float* p) {
  if constexpr (T == kF32) {
    return _mm256_loadu_ps(p);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (T == kBf16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
  }
}

// kLanes elements of type T at p, widened to f32.
template <Dtype T>
static OCTATTN_INLINE V LoadAs(const float* p) {
  if constexpr (T == kF32) {
    return Load(p);
  } else if constexpr (kLanes == 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (T == kBf16)
      return FromRaw(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    return FromRaw(_mm512_cvtph_ps(h));
  } else {
    return FromRaw(Row8<T>(p));
  }
}

// The sixteen-lane transpose: r[i] holds elements 0-7 of key i in its low half and of
// key i + 8 in its high half; t[c] gets element c of keys 0-15. Two 8x8 transposes in
// the halves, then a two-source permute joins keys 0-7 and 8-15. (A template: compiled
// only where an AVX-512 target calls it.)
template <size_t N = kLanes>
static OCTATTN_INLINE void Transpose16x8Regs(__m512 (&r)[8], V (&t)[8]) {
  __m512 u[8];
  for (int i = 0; i < 8; i += 2) {
    u[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    u[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm512_shuffle_ps(u[i], u[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm512_shuffle_ps(u[i], u[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm512_shuffle_ps(u[i + 1], u[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm512_shuffle_ps(u[i + 1], u[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // r[c] (c < 4), by 128-bit lane: dimension c of keys 0-3, dimension c + 4 of keys
  // 0-3, dimension c of keys 8-11, dimension c + 4 of keys 8-11; r[c + 4] the same for
  // keys 4-7 and 12-15.
  const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int c = 0; c < 4; ++c) {
    t[c] = FromRaw(_mm512_permutex2var_ps(r[c], lo, r[c + 4]));
    t[c + 4] = FromRaw(_mm512_permutex2var_ps(r[c], hi, r[c + 4]));
  }
}

// kLanes floats narrowed to f16 at p (F16C: round to nearest even, as F32ToF16).
static constexpr bool kStoreF16 = true;
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE void StoreF16(W v, float* p) {
  if constexpr (N == 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(ToRaw(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(ToRaw(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

// t[i] lane e = rows[e * row + i] for e < kLanes and i < 8: eight dimensions of kLanes
// keys, keys in lanes, read from the keys' rows (elements of type T, strides in
// elements) in place (no copy). AVX-512: rows e and e + 8 share a zmm register, whose
// two halves are transposed as two 8x8 blocks; a two-source permute then joins keys 0-7
// and 8-15 of each dimension.
template <Dtype T = kF32, size_t N = kLanes>
static OCTATTN_INLINE void TransposeRows(const float* rows, int64_t row, V (&t)[8]) {
  if constexpr (N == 16) {
    __m512 r[8];
    for (int i = 0; i < 8; ++i)
      r[i] = _mm512_insertf32x8(_mm512_zextps256_ps512(Row8<T>(ElemAt(rows, i * row, T))),
                                Row8<T>(ElemAt(rows, (i + 8) * row, T)), 1);
    Transpose16x8Regs(r, t);
  } else {
    static_assert(N == 8, "eight or sixteen lanes");
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = Row8<T>(ElemAt(rows, i * row, T));
    Transpose8x8Regs(r);
    for (int i = 0; i < 8; ++i) t[i] = FromRaw(r[i]);
  }
}

// Sixteen bf16 dimensions of kLanes keys as eight vectors of dimension pairs: t[j] lane e
// holds dimensions 2j (low half) and 2j + 1 (high half) of key e, moved as 32-bit
// elements by the transposes above without widening: half the shuffles per dimension
// of TransposeRows<kBf16>. Bf16Even and Bf16Odd then give dimensions 2j and 2j + 1 as
// f32 (a shift, a mask: exact, and no shuffle).
template <size_t N = kLanes>
static OCTATTN_INLINE void TransposeBf16Pairs(const float* rows, int64_t row, V (&t)[8]) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(rows);
  auto at = [&](int i) { return reinterpret_cast<const __m256i*>(h + i * row); };
  if constexpr (N == 16) {
    __m512 r[8];
    for (int i = 0; i < 8; ++i)
      r[i] = _mm512_castsi512_ps(_mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(at(i))), _mm256_loadu_si256(at(i + 8)), 1));
    Transpose16x8Regs(r, t);
  } else {
    static_assert(N == 8, "eight or sixteen lanes");
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_castsi256_ps(_mm256_loadu_si256(at(i)));
    Transpose8x8Regs(r);
    for (int i = 0; i < 8; ++i) t[i] = FromRaw(r[i]);
  }
}
static constexpr bool kBf16Pairs = true;
template <size_t N = kLanes, class W = V>  // W: the branch not taken stays unchecked
static OCTATTN_INLINE V Bf16Even(W pair) {
  if constexpr (N == 16) {
    return FromRaw(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(ToRaw(pair)), 16)));
  } else {
    return FromRaw(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(ToRaw(pair)), 16)));
  }
}
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE V Bf16Odd(W pair) {
  if constexpr (N == 16) {
    return FromRaw(_mm512_castsi512_ps(_mm512_and_si512(
        _mm512_castps_si512(ToRaw(pair)), _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)))));
  } else {
    return FromRaw(_mm256_castsi256_ps(_mm256_and_si256(
        _mm256_castps_si256(ToRaw(pair)), _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)))));
  }
}

// vdpbf16ps (the avx512_bf16 unit only, which defines OCTATTN_DOT_BF16): acc plus, lane
// by lane, the products of the bf16 pairs of q and k, dimension 2p + 1 first, then 2p,
// each added with one rounding (a product of bf16 values is exact in f32), as two FMAs
// would; bf16 subnormals are read as zero and subnormal sums flushed to zero.
#if defined(OCTATTN_DOT_BF16)
static_assert(kLanes == 16, "vdpbf16ps on zmm registers");
static constexpr bool kDotBf16 = true;
template <class W = V>
static OCTATTN_INLINE V DotBf16(W q, W k, W acc) {
  return FromRaw(_mm512_dpbf16_ps(ToRaw(acc), (__m512bh)_mm512_castps_si512(ToRaw(q)),
                                  (__m512bh)_mm512_castps_si512(ToRaw(k))));
}
// Weights as bf16 pairs: 2 * kLanes floats (keys 0 .. 15 in lo, 16 .. 31 in hi) rounded
// to nearest even (vcvtne2ps2bf16: subnormals to zero), lane m = keys 2m (low half) and
// 2m + 1 (high half).
template <class W = V>
static OCTATTN_INLINE V NarrowPairs(W lo, W hi) {
  return FromRaw(
      _mm512_castsi512_ps(reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(ToRaw(hi), ToRaw(lo)))));
}
// Sixteen bf16 columns of two value rows a (low halves) and b (high halves) as pairs:
// lane c = column c of a and of b.
static OCTATTN_INLINE V PairRows(const float* a, const float* b) {
  const __m512i x = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
  alignas(64) static constexpr uint16_t kIdx[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                    21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                    11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return FromRaw(_mm512_castsi512_ps(_mm512_permutexvar_epi16(_mm512_load_si512(kIdx), x)));
}
// The low bf16 of each pair, the high one zero.
template <class W = V>
static OCTATTN_INLINE V Bf16Low(W pair) {
  return FromRaw(_mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(ToRaw(pair)), _mm512_set1_epi32(0xFFFF))));
}
// AMX-BF16 tiles (the amx_bf16 unit only, which defines OCTATTN_AMX_BF16 as well): a
// block of R <= 16 query rows against 64 packed keys, 32 dimensions (16 pairs) a
// tdpbf16ps. Tiles 0-3 hold the four 16-key column blocks of the R x 64 sums, tile 4 the
// rows' pairs, tiles 5-7 the keys' pairs (16 pair rows of 16 keys, 64 bytes each).
// A score's sum is then AMX's own: tdpbf16ps adds each tile step's 32 products to the
// sum with roundings of its own (measured: neither a chain of FMAs nor one rounding of
// the exact sum), and each element of a tile depends on its row of A and column of B
// alone (whatever the rows: measured on the CPU the tests run on).
#if defined(OCTATTN_AMX_BF16)
static constexpr bool kAmx = true;
// The tile configuration for R rows (ldtilecfg's 64-byte layout: palette 1, then the
// bytes per row of tiles 0-15 as 16-bit words at byte 16, their rows at byte 48).
static OCTATTN_INLINE void AmxConfigure(int rows) {
  alignas(64) uint8_t cfg[64] = {};
  cfg[0] = 1;
  for (int t = 0; t < 8; ++t) {
    cfg[16 + 2 * t] = 64;
    cfg[48 + t] = static_cast<uint8_t>(t < 5 ? rows : 16);
  }
  _tile_loadconfig(cfg);
}
static OCTATTN_INLINE void AmxRelease() { _tile_release(); }
// Sums in tiles 0 .. nc - 1 (nc of 1 .. 4): loaded from and stored to c (R rows of 16
// * nc floats, rows 256 bytes apart, block j at c + 16 j).
static OCTATTN_INLINE void AmxLoadSums(const float* c, int nc) {
  _tile_loadd(0, c, 256);
  if (nc > 1) _tile_loadd(1, c + 16, 256);
  if (nc > 2) _tile_loadd(2, c + 32, 256);
  if (nc > 3) _tile_loadd(3, c + 48, 256);
}
static OCTATTN_INLINE void AmxStoreSums(float* c, int nc) {
  _tile_stored(0, c, 256);
  if (nc > 1) _tile_stored(1, c + 16, 256);
  if (nc > 2) _tile_stored(2, c + 32, 256);
  if (nc > 3) _tile_stored(3, c + 48, 256);
}
// One tdpbf16ps step of the sums in tiles 0 .. nc - 1: R rows of 16 pairs at a
// (a_stride bytes apart) by 16 pair rows at b (b_stride bytes apart), block j of 16
// columns at b + 64 j bytes.
static OCTATTN_INLINE void AmxStep(const void* a, int64_t a_stride, const void* b, int64_t b_stride,
                                   int nc) {
  const char* bc = static_cast<const char*>(b);
  _tile_loadd(4, a, a_stride);
  _tile_loadd(5, bc, b_stride);
  _tile_dpbf16ps(0, 4, 5);
  if (nc > 1) {
    _tile_loadd(6, bc + 64, b_stride);
    _tile_dpbf16ps(1, 4, 6);
  }
  if (nc > 2) {
    _tile_loadd(7, bc + 128, b_stride);
    _tile_dpbf16ps(2, 4, 7);
  }
  if (nc > 3) {
    _tile_loadd(5, bc + 192, b_stride);
    _tile_dpbf16ps(3, 4, 5);
  }
}
// c[r][0, 16 nk) = the sums over `halves` (1 or 2) steps of 16 pairs of row r of a (its
// pairs from a + 64 bytes a step on, rows a_stride bytes apart) with keys 0 .. 16 nk - 1
// of b (nk of 1 .. 4; pair row p of a step at b + p * b_stride bytes, its keys' pairs
// from there on, 64 bytes per 16 keys), from zero; rows of c 256 bytes apart. The tiles
// must be configured (AmxConfigure).
static OCTATTN_INLINE void AmxDot64(const void* a, int64_t a_stride, const void* b,
                                    int64_t b_stride, int halves, int nk, float* c) {
  _tile_zero(0);
  if (nk > 1) _tile_zero(1);
  if (nk > 2) _tile_zero(2);
  if (nk > 3) _tile_zero(3);
  for (int h = 0; h < halves; ++h)
    AmxStep(static_cast<const char*>(a) + 64 * h, a_stride,
            static_cast<const char*>(b) + 16 * h * b_stride, b_stride, nk);
  AmxStoreSums(c, nk);
}
#endif  // OCTATTN_AMX_BF16 (else transpose-inl.h's stubs)
#endif  // OCTATTN_DOT_BF16 (else transpose-inl.h's stubs)

// The even and the odd lanes of the 2 * kLanes lanes [a, b] (Deinterleave), and back
// (Interleave): accumulators of bf16 value rows split by Bf16Even and Bf16Odd.
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE void Deinterleave(W a, W b, V* even, V* odd) {
  if constexpr (N == 16) {
    const __m512i e = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i o = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    *even = FromRaw(_mm512_permutex2var_ps(ToRaw(a), e, ToRaw(b)));
    *odd = FromRaw(_mm512_permutex2var_ps(ToRaw(a), o, ToRaw(b)));
  } else {
    const __m256 x = ToRaw(a), y = ToRaw(b);
    *even = FromRaw(_mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(x, y, _MM_SHUFFLE(2, 0, 2, 0))),
                              _MM_SHUFFLE(3, 1, 2, 0))));
    *odd = FromRaw(_mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(x, y, _MM_SHUFFLE(3, 1, 3, 1))),
                              _MM_SHUFFLE(3, 1, 2, 0))));
  }
}
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE void Interleave(W even, W odd, V* a, V* b) {
  if constexpr (N == 16) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi =
        _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    *a = FromRaw(_mm512_permutex2var_ps(ToRaw(even), lo, ToRaw(odd)));
    *b = FromRaw(_mm512_permutex2var_ps(ToRaw(even), hi, ToRaw(odd)));
  } else {
    const __m256 x = ToRaw(even), y = ToRaw(odd);
    const __m256 l = _mm256_unpacklo_ps(x, y), h = _mm256_unpackhi_ps(x, y);
    *a = FromRaw(_mm256_permute2f128_ps(l, h, 0x20));
    *b = FromRaw(_mm256_permute2f128_ps(l, h, 0x31));
  }
}
