// Transpose8x8 and TransposeRows on x86 targets with AVX (eight floats per ymm register,
// sixteen per zmm register): unpack, shuffle, then move 128-bit lanes; and LoadAs and
// StoreF16, 16-bit elements widened and f16 narrowed by the vector unit. Included by
// vocabulary-inl.h, inside a backend's vocabulary struct, only where the backend says
// its target has AVX (OCTATTN_AVX_TRANSPOSE), after <immintrin.h>.

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

// Stores past the caches (non-temporal: no line is read before it is written), for the
// lines a caller writes whole, on the 16-lane targets: one register fills a line. (On
// AVX2 a line's two 32-byte streamed stores ran 0.87-0.93x the cached stores into new
// rows on a Zen 4 core; a 16-bit row's 32-byte halves streamed alone 0.51-0.87x, so
// StreamStore16 joins two.) StreamStore: kLanes floats at p, aligned to 64 bytes;
// StreamFence orders them before the stores that follow it.
static constexpr bool kStream = kLanes == 16;
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE void StreamStore(W v, float* p) {
  static_assert(N == 16, "sixteen lanes");
  _mm512_stream_ps(p, ToRaw(v));
}
static OCTATTN_INLINE void StreamFence() { _mm_sfence(); }

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

// kLanes floats narrowed to bf16 at p: F32ToBf16's integer steps in the lanes (round to
// nearest even on the bits, a NaN's top half with its quiet bit set), so the bytes are
// the scalar definition's (vcvtneps2bf16 would flush subnormals).
static constexpr bool kStoreBf16 = true;
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE __m256i Bf16Bits16(W v) {
  static_assert(N == 16, "sixteen lanes");
  const __m512i x = _mm512_castps_si512(ToRaw(v)), hi = _mm512_srli_epi32(x, 16);
  const __m512i up = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)),
                                      _mm512_and_si512(hi, _mm512_set1_epi32(1)));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  const __m512i r =
      _mm512_mask_or_epi32(_mm512_srli_epi32(up, 16), nan, hi, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE void StoreBf16(W v, float* p) {
  if constexpr (N == 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Bf16Bits16(v));
  } else {
    const __m256i x = _mm256_castps_si256(ToRaw(v)), hi = _mm256_srli_epi32(x, 16);
    const __m256i up = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)),
                                        _mm256_and_si256(hi, _mm256_set1_epi32(1)));
    // (Both sides of the compare are below 2^31: a signed compare orders them.)
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)),
                                           _mm256_set1_epi32(0x7F800000));
    const __m256i r = _mm256_blendv_epi8(_mm256_srli_epi32(up, 16),
                                         _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    // Each 128-bit lane's four halves packed into its low 64 bits, then the two joined.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
}

// 2 kLanes floats narrowed to 16-bit elements of type t (kBf16, kF16: StoreBf16's and
// StoreF16's bits), the whole line at p (aligned to 64 bytes) written past the caches as
// StreamStore writes.
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE void StreamStore16(W a, W b, Dtype t, void* p) {
  static_assert(N == 16, "sixteen lanes");
  __m256i lo, hi;
  if (t == kBf16) {
    lo = Bf16Bits16(a), hi = Bf16Bits16(b);
  } else {
    lo = _mm512_cvtps_ph(ToRaw(a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    hi = _mm512_cvtps_ph(ToRaw(b), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  _mm512_stream_si512(reinterpret_cast<__m512i*>(p),
                      _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}

// INT8, Q8_0 and Q4_0 stores in vectors: the largest AbsBits of n floats (n a multiple of
// kLanes; a NaN's bits above every finite value's, as AbsBits orders them), of four
// groups at once, quotients by a scale's inverse, the narrowing of integral floats to
// int8 and Q4_0's nibble pairs.
static constexpr bool kStoreI8 = true;
template <size_t N = kLanes>
static OCTATTN_INLINE uint32_t AbsBitsMax(const float* x, int64_t n) {
  if constexpr (N == 16) {
    const __m512i mask = _mm512_set1_epi32(0x7FFFFFFF);
    __m512i m = _mm512_setzero_si512();
    for (int64_t d = 0; d < n; d += 16)
      m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_loadu_si512(x + d), mask));
    return static_cast<uint32_t>(_mm512_reduce_max_epu32(m));
  } else {
    const __m256i mask = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i m = _mm256_setzero_si256();
    for (int64_t d = 0; d < n; d += 8)
      m = _mm256_max_epu32(
          m, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + d)), mask));
    __m128i a = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    a = _mm_max_epu32(a, _mm_shuffle_epi32(a, _MM_SHUFFLE(1, 0, 3, 2)));
    a = _mm_max_epu32(a, _mm_shuffle_epi32(a, _MM_SHUFFLE(2, 3, 0, 1)));
    return static_cast<uint32_t>(_mm_cvtsi128_si32(a));
  }
}
// The largest |x| of each of four consecutive groups of g floats (g a multiple of
// kLanes) in one register: in quarter k (lanes k * kLanes / 4 on) group k's, by its bits
// (a NaN's above every finite value's, as AbsBits orders them). The groups' lanes are
// reduced together, their last steps shared by the four groups.
template <size_t N = kLanes>
static OCTATTN_INLINE V AbsMax4(const float* x, int64_t g) {
  if constexpr (N == 16) {
    const __m512i mask = _mm512_set1_epi32(0x7FFFFFFF);
    __m512i m[4];
    for (int k = 0; k < 4; ++k) {
      m[k] = _mm512_and_si512(_mm512_loadu_si512(x + k * g), mask);
      for (int64_t d = 16; d < g; d += 16)
        m[k] = _mm512_max_epu32(m[k], _mm512_and_si512(_mm512_loadu_si512(x + k * g + d), mask));
    }
    // 256-bit halves of groups 0/1 and 2/3, then 128-bit blocks of all four: block k
    // holds group k's four lanes, reduced within the block.
    const __m512i a = _mm512_max_epu32(_mm512_shuffle_i64x2(m[0], m[1], 0x44),
                                       _mm512_shuffle_i64x2(m[0], m[1], 0xEE));
    const __m512i b = _mm512_max_epu32(_mm512_shuffle_i64x2(m[2], m[3], 0x44),
                                       _mm512_shuffle_i64x2(m[2], m[3], 0xEE));
    __m512i c =
        _mm512_max_epu32(_mm512_shuffle_i64x2(a, b, 0x88), _mm512_shuffle_i64x2(a, b, 0xDD));
    c = _mm512_max_epu32(c, _mm512_shuffle_epi32(c, _MM_PERM_BADC));
    c = _mm512_max_epu32(c, _mm512_shuffle_epi32(c, _MM_PERM_CDAB));
    return FromRaw(_mm512_castsi512_ps(c));
  } else {
    const __m256i mask = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i m[4];
    for (int k = 0; k < 4; ++k) {
      m[k] =
          _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k * g)), mask);
      for (int64_t d = 8; d < g; d += 8)
        m[k] = _mm256_max_epu32(
            m[k], _mm256_and_si256(
                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k * g + d)), mask));
    }
    // 128-bit blocks: groups 0 and 1 in a, 2 and 3 in b, each reduced within its block;
    // then the pairs of lanes of groups 0, 1, 2, 3 in order.
    __m256i a = _mm256_max_epu32(_mm256_permute2x128_si256(m[0], m[1], 0x20),
                                 _mm256_permute2x128_si256(m[0], m[1], 0x31));
    __m256i b = _mm256_max_epu32(_mm256_permute2x128_si256(m[2], m[3], 0x20),
                                 _mm256_permute2x128_si256(m[2], m[3], 0x31));
    a = _mm256_max_epu32(a, _mm256_shuffle_epi32(a, _MM_SHUFFLE(1, 0, 3, 2)));
    b = _mm256_max_epu32(b, _mm256_shuffle_epi32(b, _MM_SHUFFLE(1, 0, 3, 2)));
    a = _mm256_max_epu32(a, _mm256_shuffle_epi32(a, _MM_SHUFFLE(2, 3, 0, 1)));
    b = _mm256_max_epu32(b, _mm256_shuffle_epi32(b, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m256i c = _mm256_permute4x64_epi64(_mm256_blend_epi32(a, b, 0xCC), 0xD8);
    return FromRaw(_mm256_castsi256_ps(c));
  }
}
// x / s rounded to nearest even, as the division rounds it, from inv = 1 / s rounded to
// nearest (s and inv in every lane), at the cost of a multiply and two fused multiply-adds
// instead of a division: y = x * inv is within an ulp of the quotient, y * s - x is then
// exact, and y less it times inv is the rounded quotient (Markstein's theorem). For |s| in
// [2^-60, 2^60] wherever the quotient is finite and at least 2^-20 in magnitude (no step
// underflows), and zeros keep their sign (the residual subtracted, not added); smaller
// quotients come out within a few ulps of theirs, with their sign.
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE W DivByInverse(W x, W s, W inv) {
  if constexpr (N == 16) {
    const __m512 y = _mm512_mul_ps(ToRaw(x), ToRaw(inv));
    return FromRaw(_mm512_fnmadd_ps(_mm512_fmsub_ps(y, ToRaw(s), ToRaw(x)), ToRaw(inv), y));
  } else {
    const __m256 y = _mm256_mul_ps(ToRaw(x), ToRaw(inv));
    return FromRaw(_mm256_fnmadd_ps(_mm256_fmsub_ps(y, ToRaw(s), ToRaw(x)), ToRaw(inv), y));
  }
}
// The lanes of v whose magnitude is in (lo, hi] (NaN: none), as bits of a mask.
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE uint32_t WithinMask(W v, float lo, float hi) {
  if constexpr (N == 16) {
    const __m512 a = _mm512_abs_ps(ToRaw(v));
    return _mm512_cmp_ps_mask(a, _mm512_set1_ps(lo), _CMP_GT_OQ) &
           _mm512_cmp_ps_mask(a, _mm512_set1_ps(hi), _CMP_LE_OQ);
  } else {
    const __m256 a = _mm256_and_ps(ToRaw(v), _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
    return static_cast<uint32_t>(
        _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(a, _mm256_set1_ps(lo), _CMP_GT_OQ),
                                         _mm256_cmp_ps(a, _mm256_set1_ps(hi), _CMP_LE_OQ))));
  }
}
// The index of the first of 32 floats x whose AbsBits are `bits` (32: none).
template <size_t N = kLanes>
static OCTATTN_INLINE int FirstAbsBits32(const float* x, uint32_t bits) {
  uint32_t m = 0;
  if constexpr (N == 16) {
    const __m512i mask = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i b = _mm512_set1_epi32(static_cast<int>(bits));
    m = _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(x), mask), b) |
        static_cast<uint32_t>(
            _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(x + 16), mask), b))
            << 16;
  } else {
    const __m256i mask = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i b = _mm256_set1_epi32(static_cast<int>(bits));
    for (int i = 0; i < 4; ++i) {
      const __m256i e = _mm256_cmpeq_epi32(
          _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8 * i)), mask),
          b);
      m |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(e))) << (8 * i);
    }
  }
  return m == 0 ? 32 : __builtin_ctz(m);
}
// Q4_0's nibble pairs of kLanes values: lo and hi (a block's values i and i + 16 over its
// scale, plus 8; |x| < 2^22) rounded half to even (the conversion in the default rounding
// mode, as RoundEven), clamped to [0, 15], and lo | hi << 4 stored as kLanes bytes at p.
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE void StoreNibbles(W lo, W hi, uint8_t* p) {
  if constexpr (N == 16) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512i zero = _mm512_setzero_si512(), fifteen = _mm512_set1_epi32(15);
    const __m512i a = _mm512_min_epi32(
        _mm512_max_epi32(_mm512_cvt_roundps_epi32(ToRaw(lo), kRound), zero), fifteen);
    const __m512i b = _mm512_min_epi32(
        _mm512_max_epi32(_mm512_cvt_roundps_epi32(ToRaw(hi), kRound), zero), fifteen);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm512_cvtepi32_epi8(_mm512_or_si512(a, _mm512_slli_epi32(b, 4))));
  } else {
    const __m256i zero = _mm256_setzero_si256(), fifteen = _mm256_set1_epi32(15);
    const __m256i a =
        _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(ToRaw(lo)), zero), fifteen);
    const __m256i b =
        _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(ToRaw(hi)), zero), fifteen);
    const __m256i c = _mm256_or_si256(a, _mm256_slli_epi32(b, 4));
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(w, w));
  }
}
// Whether every lane of v is in (lo, hi] (NaN: false), without leaving the registers.
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE bool AllWithin(W v, float lo, float hi) {
  if constexpr (N == 16) {
    const __m512 r = ToRaw(v);
    return (_mm512_cmp_ps_mask(r, _mm512_set1_ps(lo), _CMP_GT_OQ) &
            _mm512_cmp_ps_mask(r, _mm512_set1_ps(hi), _CMP_LE_OQ)) == 0xFFFF;
  } else {
    const __m256 r = ToRaw(v);
    return _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(r, _mm256_set1_ps(lo), _CMP_GT_OQ),
                                            _mm256_cmp_ps(r, _mm256_set1_ps(hi), _CMP_LE_OQ))) ==
           0xFF;
  }
}
// Lane 0 of v.
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE float FirstLane(W v) {
  if constexpr (N == 16) {
    return _mm512_cvtss_f32(ToRaw(v));
  } else {
    return _mm256_cvtss_f32(ToRaw(v));
  }
}
// Every lane of v set to lane k * kLanes / 4 (quarter k's first).
template <int K, size_t N = kLanes, class W = V>
static OCTATTN_INLINE W Quarter(W v) {
  if constexpr (N == 16) {
    return FromRaw(_mm512_shuffle_f32x4(ToRaw(v), ToRaw(v), K * 0x55));
  } else {
    return FromRaw(_mm256_permutevar8x32_ps(ToRaw(v), _mm256_set1_epi32(2 * K)));
  }
}
// v rounded to f16 and widened back (F16C: round to nearest even, as F32ToF16).
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE W RoundF16(W v) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  if constexpr (N == 16) {
    return FromRaw(_mm512_cvtph_ps(_mm512_cvtps_ph(ToRaw(v), kRound)));
  } else {
    return FromRaw(_mm256_cvtph_ps(_mm256_cvtps_ph(ToRaw(v), kRound)));
  }
}
// kLanes integral floats in [-127, 127] narrowed to int8 at p.
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE void StoreI8(W v, int8_t* p) {
  if constexpr (N == 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(ToRaw(v))));
  } else {
    const __m256i i = _mm256_cvttps_epi32(ToRaw(v));
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packs_epi16(w, w));
  }
}

// Four vectors of int32 lanes narrowed to bytes (Unsigned: codes in [0, 255], else
// values in [-128, 127]), by saturating packs that leave each 128-bit block holding four
// bytes of each vector and one permutation that puts them in order: a's and b's bytes at
// p, then c's and d's (at p + 2 kLanes, or with Split at p2); a whole register's store
// only where it fills aligned lines (a store across two lines waits for both, and a
// cache's rows are mostly apart in memory, each line a miss); on 16 lanes, past the
// caches where `stream` (kStream; not with Split).
template <bool Unsigned, bool Split, size_t N = kLanes, class I>
static OCTATTN_INLINE void NarrowBytes4(I a, I b, I c, I d, void* out, void* out2,
                                        bool stream = false) {
  char* p = static_cast<char*>(out);
  char* p2 = static_cast<char*>(out2);
  if constexpr (N == 16) {
    const __m512i r = _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
        Unsigned ? _mm512_packus_epi16(_mm512_packus_epi32(a, b), _mm512_packus_epi32(c, d))
                 : _mm512_packs_epi16(_mm512_packs_epi32(a, b), _mm512_packs_epi32(c, d)));
    if constexpr (Split) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_castsi512_si256(r));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p2), _mm512_extracti64x4_epi64(r, 1));
    } else if ((reinterpret_cast<uintptr_t>(p) & 63) == 0) {
      if (stream) {
        _mm512_stream_si512(reinterpret_cast<__m512i*>(p), r);
      } else {
        _mm512_storeu_si512(p, r);
      }
    } else {  // in 16-byte pieces, none across a line
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_castsi512_si128(r));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 16), _mm512_extracti32x4_epi32(r, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 32), _mm512_extracti32x4_epi32(r, 2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 48), _mm512_extracti32x4_epi32(r, 3));
    }
  } else {
    const __m256i r = _mm256_permutevar8x32_epi32(
        Unsigned ? _mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(c, d))
                 : _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d)),
        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    if constexpr (Split) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(r));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p2), _mm256_extracti128_si256(r, 1));
    } else if ((reinterpret_cast<uintptr_t>(p) & 31) == 0) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), r);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(r));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 16), _mm256_extracti128_si256(r, 1));
    }
  }
}
// Four vectors of quotients in (-127.5, 127.5) rounded half to even (the conversion's
// rounding: embedded in AVX-512, the default mode in AVX2, as RoundEven) and narrowed to
// int8 (NarrowBytes4, `stream` its).
template <bool Split = false, size_t N = kLanes, class W = V>
static OCTATTN_INLINE void StoreRoundI8x4(W a, W b, W c, W d, int8_t* p, int8_t* p2 = nullptr,
                                          bool stream = false) {
  if constexpr (N == 16) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    NarrowBytes4<false, Split>(_mm512_cvt_roundps_epi32(ToRaw(a), kRound),
                               _mm512_cvt_roundps_epi32(ToRaw(b), kRound),
                               _mm512_cvt_roundps_epi32(ToRaw(c), kRound),
                               _mm512_cvt_roundps_epi32(ToRaw(d), kRound), p, p2, stream);
  } else {
    NarrowBytes4<false, Split>(_mm256_cvtps_epi32(ToRaw(a)), _mm256_cvtps_epi32(ToRaw(b)),
                               _mm256_cvtps_epi32(ToRaw(c)), _mm256_cvtps_epi32(ToRaw(d)), p, p2,
                               stream);
  }
}
// Lane (kLanes / 4) * k + u from a[u]'s quarter k, for u < kLanes / 4 (AbsMax4's results,
// whose quarters each hold one value): kLanes groups' values in one register.
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE W Interleave4(const W* a) {
  if constexpr (N == 16) {
    __m512 r = _mm512_mask_blend_ps(0x2222, ToRaw(a[0]), ToRaw(a[1]));
    r = _mm512_mask_blend_ps(0x4444, r, ToRaw(a[2]));
    return FromRaw(_mm512_mask_blend_ps(0x8888, r, ToRaw(a[3])));
  } else {
    return FromRaw(_mm256_blend_ps(ToRaw(a[0]), ToRaw(a[1]), 0xAA));
  }
}

// The fp8 codes of kLanes floats (E4M3: e4m3fn, else e5m2), as int32 lanes: F32ToFp8's cases
// (subnormals by the add of a magic, normals by the rebiased exponent and the mantissa
// rounded half to even, saturation, Inf, NaN) on the lanes' bits, picked in its order by
// compares (|x|'s bits are below 2^31, so signed compares order them), in the compiler's
// vectors of the register's width.
template <bool E4M3, size_t N = kLanes, class W = V>
static OCTATTN_INLINE auto Fp8Codes(W v) {
  typedef int32_t I16 __attribute__((vector_size(64)));
  typedef int32_t I8 __attribute__((vector_size(32)));
  typedef float F16 __attribute__((vector_size(64)));
  typedef float F8 __attribute__((vector_size(32)));
  using I = std::conditional_t<N == 16, I16, I8>;
  using F = std::conditional_t<N == 16, F16, F8>;
  constexpr int mbits = E4M3 ? 3 : 2, bias = E4M3 ? 7 : 15;
  constexpr int nan = E4M3 ? 0x7F : 0x7E, inf = E4M3 ? 0x7F : 0x7C, top = E4M3 ? 0x7E : 0x7B;
  constexpr int largest = E4M3 ? 0x43E00000 : 0x47600000, min_normal = (128 - bias) << 23;
  constexpr int magic = (127 + 24 - bias - mbits) << 23, rebias = (127 - bias) << 23;
  constexpr int half = (1 << (22 - mbits)) - 1;
  const I x = __builtin_bit_cast(I, ToRaw(v)), zero = {};
  const I ax = x & 0x7FFFFFFF, sign = (x >> 24) & 0x80;
  const I sub =
      __builtin_bit_cast(I, __builtin_bit_cast(F, ax) + __builtin_bit_cast(F, zero + magic)) -
      magic;
  const I normal = (ax - rebias + half + ((ax >> (23 - mbits)) & 1)) >> (23 - mbits);
  I code = ax < min_normal ? sub : normal;
  code = ax >= largest ? zero + top : code;
  code = ax == 0x7F800000 ? zero + inf : code;
  code = ax > 0x7F800000 ? zero + nan : code;
  code |= sign;  // every lane below 256
  if constexpr (N == 16) {
    return __builtin_bit_cast(__m512i, code);
  } else {
    return __builtin_bit_cast(__m256i, code);
  }
}
// kLanes floats' fp8 codes at p.
template <bool E4M3, size_t N = kLanes, class W = V>
static OCTATTN_INLINE void StoreFp8(W v, uint8_t* p) {
  const auto code = Fp8Codes<E4M3>(v);
  if constexpr (N == 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(code));
  } else {
    const __m128i w =
        _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(w, w));
  }
}
// Four vectors' fp8 codes at p (NarrowBytes4, `stream` its), a's first.
template <bool E4M3, size_t N = kLanes, class W = V>
static OCTATTN_INLINE void StoreFp8x4(W a, W b, W c, W d, uint8_t* p, bool stream = false) {
  NarrowBytes4<true, false>(Fp8Codes<E4M3>(a), Fp8Codes<E4M3>(b), Fp8Codes<E4M3>(c),
                            Fp8Codes<E4M3>(d), p, nullptr, stream);
}

// t[i] lane e = element i of row8(e), the eight floats (or floats' bits) of key e, for e <
// kLanes: keys in lanes. AVX-512: keys e and e + 8 share a zmm register, whose two halves
// are transposed as two 8x8 blocks; a two-source permute then joins keys 0-7 and 8-15 of
// each dimension. (Eight lanes of f32 and f16 rows in decode: TransposeRowsHalf.)
template <size_t N = kLanes, class Row8Of>
static OCTATTN_INLINE void TransposeRowsOf(Row8Of row8, V (&t)[8]) {
  if constexpr (N == 16) {
    __m512 r[8];
    for (int i = 0; i < 8; ++i)
      r[i] = _mm512_insertf32x8(_mm512_zextps256_ps512(row8(i)), row8(i + 8), 1);
    Transpose16x8Regs(r, t);
  } else {
    static_assert(N == 8, "eight or sixteen lanes");
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = row8(i);
    Transpose8x8Regs(r);
    for (int i = 0; i < 8; ++i) t[i] = FromRaw(r[i]);
  }
}

// The eight-lane transpose from registers that pair4(e, h) fills with elements 4h .. 4h + 3
// of key e in the low 128-bit lane and of key e + 4 in the high one (e < 4): the loads (or
// F16C's widening) move the lanes, so that the transpose is two 4x4 ones within the
// lanes, sixteen in-lane shuffles where Transpose8x8Regs takes 24 with eight lane-crossing
// ones, which cores with 128-bit units (AMD Zen 1) split into several micro-ops each.
// t[i] lane e = element 4h + i of key e (i < 4).
template <class Pair4>
static OCTATTN_INLINE void TransposeHalf(Pair4 pair4, int h, V* t) {
  __m256 r[4];
  for (int e = 0; e < 4; ++e) r[e] = pair4(e, h);
  const __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 a2 = _mm256_unpacklo_ps(r[2], r[3]), a3 = _mm256_unpackhi_ps(r[2], r[3]);
  t[0] = FromRaw(_mm256_shuffle_ps(a0, a2, _MM_SHUFFLE(1, 0, 1, 0)));
  t[1] = FromRaw(_mm256_shuffle_ps(a0, a2, _MM_SHUFFLE(3, 2, 3, 2)));
  t[2] = FromRaw(_mm256_shuffle_ps(a1, a3, _MM_SHUFFLE(1, 0, 1, 0)));
  t[3] = FromRaw(_mm256_shuffle_ps(a1, a3, _MM_SHUFFLE(3, 2, 3, 2)));
}

// Elements 4h .. 4h + 3 of type T at a (low lane) and at b (high lane), widened to f32
// (f16: F16C's conversion of both at once). bf16 rows keep Row8's widening from memory,
// which cost as much as the lane moves saved.
template <Dtype T>
static OCTATTN_INLINE __m256 Pair4(const float* a, const float* b, int h) {
  static_assert(T == kF32 || T == kF16, "f32 or f16 rows");
  if constexpr (T == kF32) return _mm256_loadu2_m128(b + 4 * h, a + 4 * h);
  auto four = [h](const float* p) {
    return _mm_loadl_epi64(
        reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(p) + 4 * h));
  };
  return _mm256_cvtph_ps(_mm_unpacklo_epi64(four(a), four(b)));
}

// t[i] lane e = rows[e * row + i] for e < kLanes and i < 8: eight dimensions of kLanes
// keys, keys in lanes, read from the keys' rows (elements of type T, strides in
// elements) in place (no copy).
template <Dtype T = kF32>
static OCTATTN_INLINE void TransposeRows(const float* rows, int64_t row, V (&t)[8]) {
  TransposeRowsOf([&](int e) { return Row8<T>(ElemAt(rows, e * row, T)); }, t);
}
// Eight lanes: t[i] lane e = rows[e * row + 4h + i] for i < 4, half h of TransposeRows
// (four vectors live, not eight: for targets with 16 registers); f32 and f16 rows.
template <Dtype T = kF32, size_t N = kLanes>
static OCTATTN_INLINE void TransposeRowsHalf(const float* rows, int64_t row, int h, V (&t)[4]) {
  static_assert(N == 8, "eight lanes");
  TransposeHalf(
      [&](int e, int k) {
        return Pair4<T>(ElemAt(rows, e * row, T), ElemAt(rows, (e + 4) * row, T), k);
      },
      h, t);
}

// Quantized cache rows dequantized in registers (direct tiles of int8, fp8, q8_0 and
// q4_0 caches): bytes widened to 32-bit lanes (int8 and q8_0 sign extended, fp8 codes and
// q4_0's nibble bytes zero extended), moved as floats' bits by the transposes, then
// turned into their values by QuantValues.
static constexpr bool kQuantRows = true;
template <Dtype T>
static constexpr bool kSignedBytes = T == kI8 || T == kQ8_0;

// Eight bytes at p widened to eight 32-bit lanes.
template <Dtype T>
static OCTATTN_INLINE __m256i Bytes8(const uint8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  if constexpr (kSignedBytes<T>) return _mm256_cvtepi8_epi32(b);
  return _mm256_cvtepu8_epi32(b);
}

// kLanes bytes at p widened to 32-bit lanes (a float vector of their bits).
template <Dtype T, size_t N = kLanes>
static OCTATTN_INLINE V BytesAs(const uint8_t* p) {
  if constexpr (N == 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (kSignedBytes<T>) return FromRaw(_mm512_castsi512_ps(_mm512_cvtepi8_epi32(b)));
    return FromRaw(_mm512_castsi512_ps(_mm512_cvtepu8_epi32(b)));
  } else {
    return FromRaw(_mm256_castsi256_ps(Bytes8<T>(p)));
  }
}

// TransposeRows of bytes: t[i] lane e = byte off + i of rows[e], widened to 32 bits.
// (Eight lanes: not TransposeHalf, whose four-byte loads cost as much as its lane moves
// save.)
template <Dtype T>
static OCTATTN_INLINE void TransposeBytes(const uint8_t* const* rows, int64_t off, V (&t)[8]) {
  TransposeRowsOf([&](int e) { return _mm256_castsi256_ps(Bytes8<T>(rows[e] + off)); }, t);
}

// The values (before any scale) of lanes of widened bytes, as base/dtype.h defines them:
// int8 and q8_0 (T kI8 or kQ8_0) the integer; q4_0 the nibble at `shift` minus 8; fp8
// (T kE4m3 or kE5m2: the format is `fp8`'s) WidenFp8's integer steps, subnormals as
// m * 2^-k and specials picked by masks (the same bits).
template <Dtype T, size_t N = kLanes, class W = V>
static OCTATTN_INLINE V QuantValues(W raw, int shift, Dtype fp8) {
  const bool e4 = fp8 == kE4m3;
  const int mbits = e4 ? 3 : 2;
  const int rebias = (e4 ? 120 : 112) << 23;
  const float sub = e4 ? 0x1p-9f : 0x1p-16f;
  // Specials: e4m3's one NaN code, e5m2's infinities and NaNs (payload kept).
  const int special = e4 ? 0x7F : 0x7C, base = e4 ? 0x7FC00000 : 0x7F800000, payload = e4 ? 0 : 3;
  if constexpr (N == 16) {
    __m512i x = _mm512_castps_si512(ToRaw(raw));
    auto c = [](int v) { return _mm512_set1_epi32(v); };
    if constexpr (T == kI8 || T == kQ8_0) {
      return FromRaw(_mm512_cvtepi32_ps(x));
    } else if constexpr (T == kQ4_0) {
      x = _mm512_and_si512(_mm512_srl_epi32(x, _mm_cvtsi32_si128(shift)), c(15));
      return FromRaw(_mm512_cvtepi32_ps(_mm512_sub_epi32(x, c(8))));
    } else {
      const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, c(0x80)), 24);
      const __m512i em = _mm512_and_si512(x, c(0x7F));
      const __m512i normal =
          _mm512_or_si512(sign, _mm512_add_epi32(_mm512_sllv_epi32(em, c(23 - mbits)), c(rebias)));
      const __m512i subn = _mm512_or_si512(
          sign, _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(em), _mm512_set1_ps(sub))));
      __m512i r = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(em, c(1 << mbits)), normal, subn);
      const __m512i sp = _mm512_or_si512(_mm512_or_si512(sign, c(base)),
                                         _mm512_slli_epi32(_mm512_and_si512(em, c(payload)), 21));
      r = _mm512_mask_blend_epi32(_mm512_cmpge_epu32_mask(em, c(special)), r, sp);
      return FromRaw(_mm512_castsi512_ps(r));
    }
  } else {
    __m256i x = _mm256_castps_si256(ToRaw(raw));
    auto c = [](int v) { return _mm256_set1_epi32(v); };
    if constexpr (T == kI8 || T == kQ8_0) {
      return FromRaw(_mm256_cvtepi32_ps(x));
    } else if constexpr (T == kQ4_0) {
      x = _mm256_and_si256(_mm256_srl_epi32(x, _mm_cvtsi32_si128(shift)), c(15));
      return FromRaw(_mm256_cvtepi32_ps(_mm256_sub_epi32(x, c(8))));
    } else {
      const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, c(0x80)), 24);
      const __m256i em = _mm256_and_si256(x, c(0x7F));
      const __m256i normal =
          _mm256_or_si256(sign, _mm256_add_epi32(_mm256_sllv_epi32(em, c(23 - mbits)), c(rebias)));
      const __m256i subn = _mm256_or_si256(
          sign, _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(em), _mm256_set1_ps(sub))));
      // (em is below 128: the signed comparisons order it.)
      __m256i r = _mm256_blendv_epi8(normal, subn, _mm256_cmpgt_epi32(c(1 << mbits), em));
      const __m256i sp = _mm256_or_si256(_mm256_or_si256(sign, c(base)),
                                         _mm256_slli_epi32(_mm256_and_si256(em, c(payload)), 21));
      return FromRaw(
          _mm256_castsi256_ps(_mm256_blendv_epi8(r, sp, _mm256_cmpgt_epi32(em, c(special - 1)))));
    }
  }
}

// fp8 codes as their values (QuantValues' bits) through F16C: e5m2 is an f16's high
// byte, and an e4m3 code's exponent and mantissa under an f16's are its value times 2^-8
// (subnormals too: VCVTPH2PS widens f16 subnormals exactly whatever MXCSR.DAZ says), so
// that a few 128-bit operations on the codes and one conversion replace QuantValues' ymm
// ones. e4m3's NaN codes become f16 NaNs first; e5m2's NaNs come out quiet where
// QuantValues keeps a signaling one, the same bits once any arithmetic has read them.
// Fp8Row8: the eight codes at p (e4: e4m3, else e5m2); `whole` false leaves e4m3's
// values times 2^-8 (a caller whose scale takes the 2^8 saves the multiply).
static OCTATTN_INLINE __m256 Fp8Row8(const uint8_t* p, bool e4, bool whole = true) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  if (!e4) return _mm256_cvtph_ps(_mm_slli_epi16(b, 8));
  const __m128i em = _mm_and_si128(b, _mm_set1_epi16(0x7F));
  const __m128i sign = _mm_and_si128(_mm_slli_epi16(b, 8), _mm_set1_epi16(-0x8000));
  const __m128i h = _mm_blendv_epi8(_mm_slli_epi16(em, 7), _mm_set1_epi16(0x7E00),
                                    _mm_cmpeq_epi16(em, _mm_set1_epi16(0x7F)));
  const __m256 x = _mm256_cvtph_ps(_mm_or_si128(h, sign));
  return whole ? _mm256_mul_ps(x, _mm256_set1_ps(256.0f)) : x;
}
// Fp8Row8's steps on sixteen codes, the low bytes of b's 16-bit words (the high ones
// are not read), in 256-bit integer operations (the NaN codes picked by a mask register
// where the unit is compiled with AVX512VL, the avx512_bf16 and amx_bf16 ones: that
// leaves the upper sixteen vector registers to the compiler, as a byte blend does not);
// Fp8Row16: the sixteen codes at p.
template <size_t N = kLanes>
static OCTATTN_INLINE V Fp8Words16(__m256i b, bool e4, bool whole = true) {
  static_assert(N == 16, "sixteen lanes");
  if (!e4) return FromRaw(_mm512_cvtph_ps(_mm256_slli_epi16(b, 8)));
  const __m256i em = _mm256_and_si256(b, _mm256_set1_epi16(0x7F));
  const __m256i sign = _mm256_and_si256(_mm256_slli_epi16(b, 8), _mm256_set1_epi16(-0x8000));
#ifdef __AVX512VL__
  const __m256i h = _mm256_mask_mov_epi16(_mm256_slli_epi16(em, 7),
                                          _mm256_cmpeq_epi16_mask(em, _mm256_set1_epi16(0x7F)),
                                          _mm256_set1_epi16(0x7E00));
#else
  const __m256i h = _mm256_blendv_epi8(_mm256_slli_epi16(em, 7), _mm256_set1_epi16(0x7E00),
                                       _mm256_cmpeq_epi16(em, _mm256_set1_epi16(0x7F)));
#endif
  const __m512 x = _mm512_cvtph_ps(_mm256_or_si256(h, sign));
  return FromRaw(whole ? _mm512_mul_ps(x, _mm512_set1_ps(256.0f)) : x);
}
template <size_t N = kLanes>
static OCTATTN_INLINE V Fp8Row16(const uint8_t* p, bool e4, bool whole = true) {
  return Fp8Words16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), e4,
                    whole);
}
// fp8 codes (T kE4m3; the format is `fp8`'s): on eight lanes TransposeBytes and
// QuantValues as one (TransposeFp8: Fp8Row8 before the transpose), and on every AVX
// target BytesAs and QuantValues as one (Fp8As; `whole` as Fp8Row8's).
static constexpr bool kFp8Rows = kLanes == 8;
static constexpr bool kFp8Values = true;
template <size_t N = kLanes>
static OCTATTN_INLINE void TransposeFp8(const uint8_t* const* rows, int64_t off, Dtype fp8,
                                        V (&t)[8], bool whole = true) {
  static_assert(N == 8, "eight lanes");
  const bool e4 = fp8 == kE4m3;
  TransposeRowsOf([&](int e) { return Fp8Row8(rows[e] + off, e4, whole); }, t);
}
template <size_t N = kLanes>
static OCTATTN_INLINE V Fp8As(const uint8_t* p, Dtype fp8, bool whole = true) {
  if constexpr (N == 16) return Fp8Row16(p, fp8 == kE4m3, whole);
  if constexpr (N == 8) return FromRaw(Fp8Row8(p, fp8 == kE4m3, whole));
}

// The fp8 codes of dimensions k & ~1 (low byte) and k | 1 (high byte) of the 32 whose
// bytes TransposeRawBytes moved, as 16-bit lanes: one narrowing for two dimensions (the
// compiler finds it once for both).
template <int k, class W = V>
static OCTATTN_INLINE __m256i Fp8Pair(const W (&words)[8]) {
  __m512i w = _mm512_castps_si512(ToRaw(words[k / 4]));
  if constexpr (k % 4 >= 2) w = _mm512_srli_epi32(w, 16);
  return _mm512_cvtepi32_epi16(w);
}
// e4m3 codes that hold no NaN code (callers look for one first, E4m3Nans, E4m3NansAt,
// E4m3RowsNans, and take Fp8Row8's or Fp8Words16's steps where one is): a code sign
// extended to 16 bits and shifted left by seven holds the sign in bit 15 and the exponent
// and mantissa under an f16's, and only bit 14, a copy of the sign, to clear; two integer
// operations after the widening before F16C's conversion in place of seven (the same
// values; `whole` as Fp8Row8's).
static constexpr bool kE4m3Plain = true;
// Whether any of the e4m3 codes in the bytes of x[0 .. n) is a NaN code (sixteen lanes:
// the words of TransposeRawBytes).
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE bool E4m3Nans(const W* x, int n) {
  static_assert(N == 16, "sixteen lanes");
  const __m512i top = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i m = _mm512_or_si512(_mm512_castps_si512(ToRaw(x[0])), top);
  for (int i = 1; i < n; ++i)
    m = _mm512_max_epu8(m, _mm512_or_si512(_mm512_castps_si512(ToRaw(x[i])), top));
  return _mm512_cmpeq_epi8_mask(m, _mm512_set1_epi8(-1)) != 0;
}
// Eight lanes: m, each byte the maximum of itself and of the n codes at p (n a multiple
// of 8) with their top bit set; a NaN code among them leaves a byte 0xFF (E4m3Any).
static OCTATTN_INLINE __m256i E4m3Max(__m256i m, const uint8_t* p, int64_t n) {
  const __m256i top = _mm256_set1_epi8(static_cast<char>(0x80));
  auto add = [&](__m256i x) { m = _mm256_max_epu8(m, _mm256_or_si256(x, top)); };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) add(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
  if (i + 16 <= n) {
    add(_mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i))));
    i += 16;
  }
  if (i < n) add(_mm256_zextsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i))));
  return m;
}
static OCTATTN_INLINE bool E4m3Any(__m256i m) {
  return _mm256_movemask_epi8(_mm256_cmpeq_epi8(m, _mm256_set1_epi8(-1))) != 0;
}
// The same for the n codes at p (sixteen lanes: n <= 64, a masked load; eight lanes: n a
// multiple of 8). No byte past them is read.
template <size_t N = kLanes>
static OCTATTN_INLINE bool E4m3NansAt(const uint8_t* p, int n) {
  if constexpr (N == 16) {
    const __m512i x =
        n == 64 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8((uint64_t{1} << (n & 63)) - 1, p);
    const __m512i m = _mm512_or_si512(x, _mm512_set1_epi8(static_cast<char>(0x80)));
    return _mm512_cmpeq_epi8_mask(m, _mm512_set1_epi8(-1)) != 0;
  } else {
    return E4m3Any(E4m3Max(_mm256_setzero_si256(), p, n));
  }
}
// Whether any of bytes [0, n) of the eight rows is a NaN code (eight lanes: a key vector's
// rows checked once for all its dimensions; n a multiple of 8).
template <size_t N = kLanes>
static OCTATTN_INLINE bool E4m3RowsNans(const uint8_t* const* rows, int64_t n) {
  static_assert(N == 8, "eight lanes");
  __m256i m = _mm256_setzero_si256();
  for (int e = 0; e < 8; ++e) m = E4m3Max(m, rows[e], n);
  return E4m3Any(m);
}
// e4m3 codes with no NaN code from their 16-bit lanes h, each lane's bits 7-13 the code's
// exponent and mantissa and bits 14 and 15 its sign: bit 14 and bits 0-6 cleared, then
// widened by F16C.
template <size_t N = kLanes>
static OCTATTN_INLINE V E4m3Half(__m256i h, bool whole) {
  static_assert(N == 16, "sixteen lanes");
  const __m512 x = _mm512_cvtph_ps(_mm256_and_si256(h, _mm256_set1_epi16(-0x4080)));
  return FromRaw(whole ? _mm512_mul_ps(x, _mm512_set1_ps(256.0f)) : x);
}
// The eight e4m3 codes at p, none a NaN code (Fp8Row8's values).
static OCTATTN_INLINE __m256 E4m3Row8(const uint8_t* p, bool whole = true) {
  const __m128i w = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256 x = _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16(-0x4080)));
  return whole ? _mm256_mul_ps(x, _mm256_set1_ps(256.0f)) : x;
}
// A vector of e4m3 codes at p, none a NaN code (Fp8As' values).
template <size_t N = kLanes>
static OCTATTN_INLINE V E4m3PlainAs(const uint8_t* p, bool whole = true) {
  if constexpr (N == 16) {
    const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return E4m3Half<N>(_mm256_slli_epi16(w, 7), whole);
  } else {
    return FromRaw(E4m3Row8(p, whole));
  }
}
// TransposeFp8 on e4m3 rows without a NaN code among the bytes read (E4m3RowsNans).
template <size_t N = kLanes>
static OCTATTN_INLINE void TransposeE4m3Plain(const uint8_t* const* rows, int64_t off, V (&t)[8],
                                              bool whole = true) {
  static_assert(N == 8, "eight lanes");
  TransposeRowsOf([&](int e) { return E4m3Row8(rows[e] + off, whole); }, t);
}
// Dimension k of the 32 e4m3 codes whose bytes TransposeRawBytes moved, none a NaN code
// (RawValue's): the code in the high byte of Fp8Pair's lanes, shifted right by one with
// its sign.
template <int k, size_t N = kLanes, class W = V>
static OCTATTN_INLINE W RawE4m3(const W (&words)[8], bool whole = true) {
  static_assert(N == 16, "sixteen lanes");
  __m256i n = Fp8Pair<k>(words);
  if constexpr (k % 2 == 0) n = _mm256_slli_epi16(n, 8);
  return E4m3Half<N>(_mm256_srai_epi16(n, 1), whole);
}
template <int Step, int I = 0, size_t N = kLanes, class W = V>
static OCTATTN_INLINE void RawE4m3Values(const W (&words)[8], W (&x)[8], bool whole = true) {
  if constexpr (N == 16 && I < 8) {
    x[I] = RawE4m3<8 * Step + I>(words, whole);
    RawE4m3Values<Step, I + 1>(words, x, whole);
  }
}

// Quantized keys' bytes 32 at a time on sixteen lanes (16 bytes for q4_0, whose 32
// nibbles they hold): the bytes at rows[e] + off moved as eight 4-byte words by
// TransposeRows' shuffles (t[m] lane e = bytes 4m .. 4m + 3 of row e), each byte then
// taken from its word by shifts (RawValues). TransposeBytes widens every byte to 32
// bits before it moves it: four times the shuffles a byte, which bound the exact
// quantized decode.
static constexpr bool kRawBytes = kLanes == 16;
template <Dtype T>
static OCTATTN_INLINE void TransposeRawBytes(const uint8_t* const* rows, int64_t off, V (&t)[8]) {
  TransposeRowsOf(
      [&](int e) {
        const float* p = reinterpret_cast<const float*>(rows[e] + off);
        if constexpr (T == kQ4_0) return _mm256_zextps128_ps256(_mm_loadu_ps(p));
        return _mm256_loadu_ps(p);
      },
      t);
}
// Dimension k of the 32 whose bytes TransposeRawBytes moved, as QuantValues gives it
// (keys in lanes, before any scale): the same values as TransposeBytes' lanes give it
// (`whole` as Fp8Row8's).
template <Dtype T, int k, size_t N = kLanes, class W = V>
static OCTATTN_INLINE W RawValue(const W (&words)[8], Dtype type, bool whole = true) {
  static_assert(N == 16, "sixteen lanes");
  if constexpr (T == kQ4_0) {  // byte k % 16: low nibbles for k < 16, then high ones
    constexpr int byte = k % 16;
    return QuantValues<T>(words[byte / 4], 8 * (byte % 4) + (k >= 16 ? 4 : 0), type);
  } else if constexpr (T == kI8) {  // sign extended from the word's top byte
    __m512i w = _mm512_castps_si512(ToRaw(words[k / 4]));
    if constexpr (k % 4 < 3) w = _mm512_slli_epi32(w, 24 - 8 * (k % 4));
    return QuantValues<T>(FromRaw(_mm512_castsi512_ps(_mm512_srai_epi32(w, 24))), 0, type);
  } else {  // fp8: Fp8Pair's lanes; e5m2 the code as an f16's high byte, e4m3 Fp8Words16's
    __m256i n = Fp8Pair<k>(words);
    if (type != kE4m3) {
      n = k % 2 == 0 ? _mm256_slli_epi16(n, 8) : _mm256_and_si256(n, _mm256_set1_epi16(-0x100));
      return FromRaw(_mm512_cvtph_ps(n));
    }
    if constexpr (k % 2 == 1) n = _mm256_srli_epi16(n, 8);
    return Fp8Words16(n, true, whole);
  }
}
// Dimensions 8 * Step .. 8 * Step + 7 of them (RawValue's). (Unrolled at compile time:
// each word is a register.)
template <Dtype T, int Step, int I = 0, size_t N = kLanes, class W = V>
static OCTATTN_INLINE void RawValues(const W (&words)[8], Dtype type, W (&x)[8],
                                     bool whole = true) {
  if constexpr (N == 16 && I < 8) {
    x[I] = RawValue<T, 8 * Step + I>(words, type, whole);
    RawValues<T, Step, I + 1>(words, type, x, whole);
  }
}

// An f16 widened by F16C (exact, as base::F16ToF32).
static OCTATTN_INLINE float HalfToFloat(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
// The 32 bits at byte `off` past each of 16 pointers, in lanes: two gathers with the
// pointers as 64-bit indices (no store of scalars reloaded as a vector, which stalls).
// AVX-512 only: qemu's AVX2 vgatherqps of such indices faults, and the emulated AVX2
// CPUs are where that target's tests run on an AVX-512 host.
template <size_t N = kLanes>
static OCTATTN_INLINE V GatherBits(const void* const* ptrs, int64_t off) {
  static_assert(N == 16, "the AVX-512 targets");
  const __m512i o = _mm512_set1_epi64(off);
  const __m512i lo = _mm512_add_epi64(_mm512_loadu_si512(ptrs), o);
  const __m512i hi = _mm512_add_epi64(_mm512_loadu_si512(ptrs + 8), o);
  const __m256 x = _mm512_i64gather_ps(lo, nullptr, 1), y = _mm512_i64gather_ps(hi, nullptr, 1);
  return FromRaw(_mm512_insertf32x8(_mm512_castps256_ps512(x), y, 1));
}
// The f16 at byte `off` past each of 16 pointers, widened (the low halves of GatherBits:
// the pointers must have two readable bytes after the f16).
template <size_t N = kLanes, class W = V>
static OCTATTN_INLINE V GatherHalves(const void* const* ptrs, int64_t off) {
  const W bits = GatherBits<N>(ptrs, off);
  return FromRaw(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_castps_si512(ToRaw(bits)))));
}
