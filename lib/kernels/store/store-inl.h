// The cache store's rows (Table::store_row), compiled for each target: loops of
// independent lanes that the compiler runs in the target's vectors. Each stored value is a
// comparison, a quotient and a rounding of the row's values, exact or correctly rounded in
// any lane, so every target writes the bytes of the scalar definitions (lib/run/store.cc,
// base/dtype.h).

// One ggml block of 32 values x into dst (type Q8_0 or Q4_0), as ggml quantizes: d =
// max|x| / 127 (Q8_0) or the value of largest magnitude (the first of equals) / -8 (Q4_0),
// rounded to f16; each value x / d rounded half to even and clamped; a block with a
// non-finite value stores the f16 NaN and zeros.
// (Q8_0's maximum and values in vectors where the target narrows to int8, S::kStoreI8.)
template <int = 0>  // (a template: S::AbsBitsMax and S::StoreI8 are the AVX targets' only)
static inline void StoreBlock(const float* __restrict x, Dtype t, uint8_t* __restrict dst,
                              float magic) {
  uint32_t top = 0;
  bool done = false;
  if constexpr (S::kStoreI8) {
    top = S::AbsBitsMax(x, kQuantBlock);
    done = true;
  }
  for (int i = 0; i < kQuantBlock && !done; ++i) top = top > AbsBits(x[i]) ? top : AbsBits(x[i]);
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
    if (t == kQ8_0 && !zero) {
      constexpr int64_t L = static_cast<int64_t>(S::kLanes);
      const typename S::V vd = S::Set(d), vm = S::Set(magic), lo = S::Set(-127.0f),
                          hi = S::Set(127.0f);
      for (int64_t i = 0; i < kQuantBlock; i += L) {
        const typename S::V v = S::Sub(S::Add(S::Div(S::Load(x + i), vd), vm), vm);
        S::StoreI8(S::Min(S::Max(v, lo), hi), reinterpret_cast<int8_t*>(q + i));
      }
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

// n fp8 codes of x / s (F32ToFp8's selects, for one type).
template <Dtype T>
static inline void StoreFp8(const float* __restrict x, float s, int64_t n, uint8_t* __restrict o) {
  for (int64_t d = 0; d < n; ++d) o[d] = F32ToFp8(x[d] / s, T);
}

// INT8 groups: s = max|x| / 127 of each group stored in its scale's dtype and read back
// (the value the cache's readers see), each value x / s rounded half to even and clamped
// to [-127, 127]; a group with a non-finite value gets a NaN scale and zeros, as does a
// group whose scale is 0.
// Groups of whole vectors on the targets that narrow to int8 (S::kStoreI8): the same
// maximum, quotients, roundings and clamps a vector at a time.
template <int = 0>  // (a template: S::AbsBitsMax and S::StoreI8 are the AVX targets' only)
static inline void StoreInt8(const StoreRow& r, float magic) {
  const float* __restrict x = r.x;
  int8_t* __restrict o = static_cast<int8_t*>(r.out);
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const bool vectors = S::kStoreI8 && r.group % L == 0;
  for (int64_t g0 = 0; g0 < r.n; g0 += r.group) {
    const int64_t g1 = g0 + r.group;
    uint32_t top = 0;
    if constexpr (S::kStoreI8) {
      if (vectors) top = S::AbsBitsMax(x + g0, r.group);
    }
    if (!vectors)
      for (int64_t d = g0; d < g1; ++d) top = top > AbsBits(x[d]) ? top : AbsBits(x[d]);
    const bool finite = top < 0x7F800000u;
    const int64_t at = g0 / r.group * r.sc_col;
    StoreElem(r.sc, at, r.sc_type, finite ? FloatOf(top) / 127.0f : __builtin_nanf(""));
    const float s = LoadElem(r.sc, at, r.sc_type);
    if (!finite || s == 0.0f) {
      memset(o + g0, 0, static_cast<size_t>(r.group));
      continue;
    }
    if constexpr (S::kStoreI8) {
      if (vectors) {
        const typename S::V vs = S::Set(s), vm = S::Set(magic), lo = S::Set(-127.0f),
                            hi = S::Set(127.0f);
        for (int64_t d = g0; d < g1; d += L) {
          const typename S::V v = S::Sub(S::Add(S::Div(S::Load(x + d), vs), vm), vm);
          S::StoreI8(S::Min(S::Max(v, lo), hi), o + d);
        }
        continue;
      }
    }
    for (int64_t d = g0; d < g1; ++d) {
      float v = RoundEven(x[d] / s, magic);
      v = v < -127.0f ? -127.0f : v;
      v = v > 127.0f ? 127.0f : v;
      o[d] = static_cast<int8_t>(v);
    }
  }
}

static void StoreRowRun(const StoreRow& r) {
  const float magic = RoundMagic();
  switch (r.t) {
    case kF32:
      memcpy(r.out, r.x, static_cast<size_t>(r.n) * 4);
      return;
    case kBf16: {
      uint16_t* __restrict o = static_cast<uint16_t*>(r.out);
      const float* __restrict x = r.x;
      for (int64_t d = 0; d < r.n; ++d) o[d] = F32ToBf16(x[d]);
      return;
    }
    case kF16:
      return NarrowRowV(r.x, r.n, r.out, 1, kF16);
    case kI8:
      return StoreInt8(r, magic);
    case kE4m3:
    case kE5m2: {
      uint8_t* o = static_cast<uint8_t*>(r.out);
      for (int64_t g0 = 0; g0 < r.n; g0 += r.group) {
        const float s = r.sc ? LoadElem(r.sc, g0 / r.group * r.sc_col, r.sc_type) : 1.0f;
        const int64_t m = MinI(r.group, r.n - g0);
        if (r.t == kE4m3) {
          StoreFp8<kE4m3>(r.x + g0, s, m, o + g0);
        } else {
          StoreFp8<kE5m2>(r.x + g0, s, m, o + g0);
        }
      }
      return;
    }
    case kQ8_0:
    case kQ4_0:
      for (int64_t k = 0; k < r.n / kQuantBlock; ++k)
        StoreBlock(r.x + k * kQuantBlock, r.t, static_cast<uint8_t*>(ElemAt(r.out, k, r.t)), magic);
      return;
    default:
      return;
  }
}
