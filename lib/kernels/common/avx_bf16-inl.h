// bf16 on x86 targets with AVX: dimension pairs moved by the transposes without
// widening and split into f32 (every AVX target), and vdpbf16ps with its helpers (the
// avx512_bf16 and amx_bf16 units, OCTATTN_DOT_BF16). Included by vocabulary-inl.h after
// avx_transpose-inl.h.

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

#if defined(OCTATTN_DOT_BF16)
// vdpbf16ps (the avx512_bf16 unit only, which defines OCTATTN_DOT_BF16): acc plus, lane
// by lane, the products of the bf16 pairs of q and k, dimension 2p + 1 first, then 2p,
// each added with one rounding (a product of bf16 values is exact in f32), as two FMAs
// would; bf16 subnormals are read as zero and subnormal sums flushed to zero.
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
// Two rows of sixteen floats as bf16 pairs rounded as NarrowPairs rounds: lane c = a[c]
// (low half) and b[c] (high half).
template <class W = V>
static OCTATTN_INLINE V NarrowRowPairs(W a, W b) {
  alignas(64) static constexpr uint16_t kIdx[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                    21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                    11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i w = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(ToRaw(b), ToRaw(a)));
  return FromRaw(_mm512_castsi512_ps(_mm512_permutexvar_epi16(_mm512_load_si512(kIdx), w)));
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
// Thirty-two bf16 columns of two value rows a (low halves) and b (high halves) as pairs
// by in-lane unpacks, two shuffles where PairRows takes four: lane 4q + i of lo holds
// column 8q + i, of hi column 8q + 4 + i (q, i < 4). PairColumns and PairLanes move
// vectors between that order and the columns' (lo, hi: columns 0-15, 16-31).
static OCTATTN_INLINE void PairRows32(const float* a, const float* b, V* lo, V* hi) {
  const __m512i x = _mm512_loadu_si512(a), y = _mm512_loadu_si512(b);
  *lo = FromRaw(_mm512_castsi512_ps(_mm512_unpacklo_epi16(x, y)));
  *hi = FromRaw(_mm512_castsi512_ps(_mm512_unpackhi_epi16(x, y)));
}
static OCTATTN_INLINE void PairColumns(V lo, V hi, V* c0, V* c1) {
  const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i i1 =
      _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  *c0 = FromRaw(_mm512_permutex2var_ps(ToRaw(lo), i0, ToRaw(hi)));
  *c1 = FromRaw(_mm512_permutex2var_ps(ToRaw(lo), i1, ToRaw(hi)));
}
static OCTATTN_INLINE void PairLanes(V c0, V c1, V* lo, V* hi) {
  const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
  const __m512i i1 = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  *lo = FromRaw(_mm512_permutex2var_ps(ToRaw(c0), i0, ToRaw(c1)));
  *hi = FromRaw(_mm512_permutex2var_ps(ToRaw(c0), i1, ToRaw(c1)));
}
// The low bf16 of each pair, the high one zero.
template <class W = V>
static OCTATTN_INLINE V Bf16Low(W pair) {
  return FromRaw(_mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(ToRaw(pair)), _mm512_set1_epi32(0xFFFF))));
}

// int8 dot products on vpdpbusd (AVX512_VNNI, which every CPU with AVX512_BF16 has; the
// units that define OCTATTN_DOT_BF16 are compiled and dispatched with it): integer lanes
// travel as floats' bits, as the quantized rows' bytes do.
static constexpr bool kDotI8 = true;
// The 16 bytes at byte `off` of 16 rows as four vectors of 4-byte quads, keys in lanes:
// t[c] lane e = bytes 4c .. 4c + 3 of row e's, made unsigned as vpdpbusd reads them: T's
// signed bytes (int8, q8_0) plus 128, q4_0's nibbles at `shift` (0: low, 4: high).
template <Dtype T>
static OCTATTN_INLINE void QuadsU8(const uint8_t* const* rows, int64_t off, int shift, V (&t)[4]) {
  auto piece = [&](int e) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[e] + off));
  };
  __m512i a[4];  // a[g] lane l: row 4l + g
  for (int g = 0; g < 4; ++g) {
    __m512i x = _mm512_castsi128_si512(piece(g));
    x = _mm512_inserti32x4(x, piece(4 + g), 1);
    x = _mm512_inserti32x4(x, piece(8 + g), 2);
    a[g] = _mm512_inserti32x4(x, piece(12 + g), 3);
  }
  const __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]), t1 = _mm512_unpackhi_epi32(a[0], a[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]), t3 = _mm512_unpackhi_epi32(a[2], a[3]);
  const __m512i q[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                        _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};
  for (int c = 0; c < 4; ++c) {
    __m512i u;
    if constexpr (kSignedBytes<T>) {
      u = _mm512_xor_si512(q[c], _mm512_set1_epi8(static_cast<char>(0x80)));
    } else {
      u = _mm512_and_si512(_mm512_srl_epi16(q[c], _mm_cvtsi32_si128(shift)),
                           _mm512_set1_epi8(0x0F));
    }
    t[c] = FromRaw(_mm512_castsi512_ps(u));
  }
}
// acc's int32 lanes plus, lane by lane, the four products of k's unsigned bytes and the
// signed bytes of q (four int8 in 32 bits, the same in every lane).
template <class W = V>
static OCTATTN_INLINE V DotI8(W acc, W k, int32_t q) {
  return FromRaw(_mm512_castsi512_ps(_mm512_dpbusd_epi32(
      _mm512_castps_si512(ToRaw(acc)), _mm512_castps_si512(ToRaw(k)), _mm512_set1_epi32(q))));
}
// The int32 lanes of x minus c, as floats (exact where below 2^24 in magnitude).
template <class W = V>
static OCTATTN_INLINE V IntToFloat(W x, int32_t c) {
  return FromRaw(
      _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_castps_si512(ToRaw(x)), _mm512_set1_epi32(c))));
}
#endif  // OCTATTN_DOT_BF16
