// Helpers every kernel family shares: lane counts, padding, scratch pieces, and value
// rows as full vectors. Included inside a per-target namespace that defines the SIMD
// vocabulary S; no includes, no namespace of its own.

constexpr size_t kLine = 16;  // floats per cache line: scratch pieces start on one

static inline int64_t Lanes() { return static_cast<int64_t>(S::kLanes); }
// n rounded up to whole vectors.
static inline int64_t PadKeys(int64_t n) {
  return static_cast<int64_t>(base::RoundUp(base::Count(n), S::kLanes));
}
// A scratch piece of `floats` floats, rounded to a cache line (saturating).
static inline size_t Piece(size_t floats) { return base::RoundUp(floats, kLine); }
static inline size_t Piece2(int64_t a, int64_t b) {
  return Piece(base::SatMul(base::Count(a), base::Count(b)));
}

// Row stride of packed keys: one cache line more than the keys, so that the rows of the
// transposing copy do not alias each other in the L1 (they are 4 KiB apart otherwise).
static inline int64_t KtStride(int64_t kpad) { return kpad + static_cast<int64_t>(kLine); }

// Value rows as full vectors: the caller's rows when they are, else packed copies.
static inline bool ValuesDirect(int64_t v_dim, int64_t value_dim) {
  return v_dim == 1 && value_dim % Lanes() == 0;
}
static inline size_t ValuesScratch(int64_t keys, int64_t value_dim, int64_t v_dim) {
  return ValuesDirect(v_dim, value_dim) ? 0 : Piece2(keys, PadKeys(value_dim));
}

// Value rows of keys [base, end) as full vectors: returns the row of key `base` and sets
// *row to the row stride. Packed copies (zero padded) go to scratch when the caller's
// rows are not full vectors; rows below `load` are copied only if they are among the
// strided columns `below`: no row reads the others.
static inline const float* PrepareValues(const float* v, int64_t v_row, int64_t v_dim,
                                         int64_t value_dim, int64_t base, int64_t load, int64_t end,
                                         base::StridedColumns below, float* scratch, int64_t* row) {
  if (ValuesDirect(v_dim, value_dim)) {
    *row = v_row;
    return v + base * v_row;
  }
  const int64_t dvp = PadKeys(value_dim);
  for (int64_t j = base; j < end; ++j) {
    float* dst = scratch + (j - base) * dvp;
    int64_t d = 0;
    if (j >= load || below.Has(j)) {
      const float* src = v + j * v_row;
      for (; d < value_dim; ++d) dst[d] = src[d * v_dim];
    }
    for (; d < dvp; ++d) dst[d] = 0.0f;
  }
  *row = dvp;
  return scratch;
}

// WidenRow with the target's vector conversions where the elements are contiguous (the
// same values: both are exact).
static inline void WidenRowV(const void* src, int64_t stride, Dtype t, int64_t n, float* dst) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  const float* s = static_cast<const float*>(src);
  int64_t d = 0;
  if (stride == 1 && t == kBf16)
    for (; d + L <= n; d += L) S::Store(S::template LoadAs<kBf16>(ElemAt(s, d, t)), dst + d);
  if (stride == 1 && t == kF16)
    for (; d + L <= n; d += L) S::Store(S::template LoadAs<kF16>(ElemAt(s, d, t)), dst + d);
  WidenRow(ElemAt(s, d * stride, t), stride, t, n - d, dst + d);
}

// n fp8 values (e4m3fn: mbits 3; e5m2: 2) widened, as base::Fp8ToF32: the exponent
// rebiased in integer arithmetic, subnormals as m * 2^-k (exact also where the caller's
// floating-point environment flushes denormals), specials selected by masks (no branch:
// the loop runs in vectors).
template <int mbits>
static inline void WidenFp8(const uint8_t* __restrict s, int64_t n, float* __restrict dst) {
  constexpr bool e4 = mbits == 3;
  constexpr uint32_t rebias = e4 ? 120 : 112;  // 127 - bias
  constexpr float sub = e4 ? 0x1p-9f : 0x1p-16f;
  for (int64_t d = 0; d < n; ++d) {
    const uint32_t b = s[d], sign = (b & 0x80u) << 24, em = b & 0x7Fu;
    const uint32_t normal = sign | ((em << (23 - mbits)) + (rebias << 23));
    const uint32_t subn = sign | BitsOf(static_cast<float>(static_cast<int32_t>(em)) * sub);
    const uint32_t is_sub = 0u - static_cast<uint32_t>(em < (1u << mbits));
    const uint32_t x = (subn & is_sub) | (normal & ~is_sub);
    const uint32_t special =
        0u - static_cast<uint32_t>(e4 ? em == 0x7Fu : em >= 0x7Cu);  // NaN; e5m2: also Inf
    const uint32_t sp = e4 ? (sign | 0x7FC00000u) : (sign | 0x7F800000u | ((em & 3u) << 21));
    dst[d] = FloatOf((sp & special) | (x & ~special));
  }
}

// A q4_0 block's 32 values d * (nibble - 8): the low nibbles are values 0-15, the high
// ones 16-31. Each half is a loop of its own over the 16 bytes, the difference taken in
// integers (exact either way), and the pointers restricted: so the compiler runs it in
// vectors; nibbles gathered through a buffer cost a stalled store-to-load forward.
static inline void Q4Block(const uint8_t* __restrict qs, float d, float* __restrict o) {
  for (int i = 0; i < 16; ++i) o[i] = d * static_cast<float>(static_cast<int>(qs[i] & 15) - 8);
  for (int i = 0; i < 16; ++i) o[16 + i] = d * static_cast<float>(static_cast<int>(qs[i] >> 4) - 8);
}

// DequantRow (base/dtype.h) in loops of independent lanes, which the compiler runs in the
// target's vectors: the same values (each is a conversion, exact, and at most one
// product).
static inline void DequantRowV(const void* src, int64_t stride, Dtype t, int64_t n, const void* sc,
                               Dtype st, int64_t sc_col, int64_t group, float* dst) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  if (t == kDsMla) {  // the e4m3 values, each group's times its scale, then the bf16 values
    const int64_t m = base::MinI(n, kDsMlaFp8);
    WidenFp8<3>(s, m, dst);
    for (int64_t g0 = 0; g0 < m; g0 += kDsMlaGroup) {
      float f;
      memcpy(&f, s + kDsMlaScales + 4 * (g0 / kDsMlaGroup), 4);
      const int64_t g1 = base::MinI(g0 + kDsMlaGroup, m);
      for (int64_t d = g0; d < g1; ++d) dst[d] = f * dst[d];
    }
    if (n > kDsMlaFp8) WidenRow(s + kDsMlaRope, 1, kBf16, n - kDsMlaFp8, dst + kDsMlaFp8);
    return;
  }
  if (Blocked(t)) {
    const int64_t bytes = DtypeBytes(t);
    for (int64_t b = 0; b < n / kQuantBlock; ++b) {
      const uint8_t* blk = s + b * bytes;
      uint16_t h;
      memcpy(&h, blk, 2);
      const float d = F16ToF32(h);
      float* o = dst + b * kQuantBlock;
      if (t == kQ8_0) {
        for (int i = 0; i < 32; ++i) o[i] = d * static_cast<float>(static_cast<int8_t>(blk[2 + i]));
        continue;
      }
      Q4Block(blk + 2, d, o);
    }
    return;
  }
  if (stride != 1) return DequantRow(src, stride, t, n, sc, st, sc_col, group, dst);
  if (t == kI8 && sc && group > 1) {  // one pass: each group's values times its scale
    for (int64_t g0 = 0; g0 < n; g0 += group) {
      const float f = LoadElem(sc, g0 / group * sc_col, st);
      const int64_t g1 = base::MinI(g0 + group, n);
      for (int64_t d = g0; d < g1; ++d) dst[d] = f * static_cast<float>(static_cast<int8_t>(s[d]));
    }
    return;
  }
  if (t == kI8) {
    for (int64_t d = 0; d < n; ++d) dst[d] = static_cast<float>(static_cast<int8_t>(s[d]));
  } else if (t == kE4m3) {
    WidenFp8<3>(s, n, dst);
  } else {
    WidenFp8<2>(s, n, dst);
  }
  if (!sc) return;
  if (group == 1 && sc_col == 1 && st == kF32) {  // by channel (KIVI's keys)
    const float* f = static_cast<const float*>(sc);
    for (int64_t d = 0; d < n; ++d) dst[d] = f[d] * dst[d];
    return;
  }
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    const float f = LoadElem(sc, g0 / group * sc_col, st);
    const int64_t g1 = base::MinI(g0 + group, n);
    for (int64_t d = g0; d < g1; ++d) dst[d] = f * dst[d];
  }
}

// Key (value) row j of an op widened or dequantized into f32 (exact for 16-bit rows;
// quantized ones: their values as dtype.h defines them).
static inline void WidenKey(const Operands& op, int64_t j, float* dst) {
  if (Quantized(op.k_type)) {
    const Scales& s = op.k_scales;
    return DequantRowV(KeyRow(op, j), op.k_dim, op.k_type, op.head_dim, ScaleRow(op, s, j), s.type,
                       s.col, s.group, dst);
  }
  WidenRowV(KeyRow(op, j), op.k_dim, op.k_type, op.head_dim, dst);
}
static inline void WidenValue(const Operands& op, int64_t j, float* dst) {
  if (Quantized(op.v_type)) {
    const Scales& s = op.v_scales;
    return DequantRowV(ValueRow(op, j), op.v_dim, op.v_type, op.value_dim, ScaleRow(op, s, j),
                       s.type, s.col, s.group, dst);
  }
  WidenRowV(ValueRow(op, j), op.v_dim, op.v_type, op.value_dim, dst);
}

// Key row j of an integer cache (kI8, kQ8_0, kQ4_0) for OCTATTN_QK_INT8: its integers
// (int8 i, q8_0's q, q4_0's nibble - 8) into dst as floats, exact, and its scale for
// each block of op.qk_block dimensions (kI8: its group's; blocked: the block's d) into
// ksc, `ks_stride` floats apart.
static inline void KeyIntegers(const Operands& op, int64_t j, float* dst, float* ksc,
                               int64_t ks_stride) {
  const uint8_t* row = reinterpret_cast<const uint8_t*>(KeyRow(op, j));
  const int64_t hd = op.head_dim, block = op.qk_block;
  if (op.k_type == kI8) {
    const Scales& s = op.k_scales;
    const void* srow = ScaleRow(op, s, j);
    for (int64_t d = 0; d < hd; ++d)
      dst[d] = static_cast<float>(static_cast<int8_t>(row[d * op.k_dim]));
    for (int64_t b = 0; b < hd / block; ++b)
      ksc[b * ks_stride] = LoadElem(srow, b * block / s.group * s.col, s.type);
    return;
  }
  const int64_t bytes = DtypeBytes(op.k_type);
  for (int64_t b = 0; b < hd / kQuantBlock; ++b) {
    const uint8_t* blk = row + b * bytes;
    uint16_t h;
    memcpy(&h, blk, 2);
    ksc[b * ks_stride] = F16ToF32(h);
    for (int64_t i = 0; i < kQuantBlock; ++i) {
      const uint8_t x = op.k_type == kQ8_0 ? blk[2 + i] : blk[2 + (i & 15)];
      dst[b * kQuantBlock + i] =
          op.k_type == kQ8_0 ? static_cast<float>(static_cast<int8_t>(x))
                             : static_cast<float>(static_cast<int>(i < 16 ? x & 15 : x >> 4) - 8);
    }
  }
}

// n floats stored as elements of type t, `stride` elements apart (16-bit: rounded to
// nearest even, in vectors where the target has them: F16C's conversion, bf16's integer
// steps; the same bits).
static inline void NarrowRowV(const float* src, int64_t n, void* dst, int64_t stride, Dtype t) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  int64_t d = 0;
  if constexpr (S::kStoreF16) {
    if (t == kF16 && stride == 1)
      for (; d + L <= n; d += L)
        S::StoreF16(S::Load(src + d), ElemAt(static_cast<float*>(dst), d, kF16));
  }
  if constexpr (S::kStoreBf16) {
    if (t == kBf16 && stride == 1)
      for (; d + L <= n; d += L)
        S::StoreBf16(S::Load(src + d), ElemAt(static_cast<float*>(dst), d, kBf16));
  }
  for (; d < n; ++d) StoreElem(dst, d * stride, t, src[d]);
}

// exp(x) of one float, by the vector Exp (the same bits as a lane of it).
static inline float ExpScalar(float x) { return S::ReduceMax(S::Exp(S::Set(x))); }
