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

// Key (value) row j of an op widened or dequantized into f32 (exact for 16-bit rows;
// quantized ones: their values as dtype.h defines them).
static inline void WidenKey(const Operands& op, int64_t j, float* dst) {
  if (Quantized(op.k_type)) return DequantKey(op, j, dst);
  WidenRowV(KeyRow(op, j), op.k_dim, op.k_type, op.head_dim, dst);
}
static inline void WidenValue(const Operands& op, int64_t j, float* dst) {
  if (Quantized(op.v_type)) return DequantValue(op, j, dst);
  WidenRowV(ValueRow(op, j), op.v_dim, op.v_type, op.value_dim, dst);
}

// n floats stored as elements of type t, `stride` elements apart (16-bit: rounded to
// nearest even, the F16C conversion where the target has it: the same bits).
static inline void NarrowRowV(const float* src, int64_t n, void* dst, int64_t stride, Dtype t) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  int64_t d = 0;
  if constexpr (S::kStoreF16) {
    if (t == kF16 && stride == 1)
      for (; d + L <= n; d += L)
        S::StoreF16(S::Load(src + d), ElemAt(static_cast<float*>(dst), d, kF16));
  }
  for (; d < n; ++d) StoreElem(dst, d * stride, t, src[d]);
}

// exp(x) of one float, by the vector Exp (the same bits as a lane of it).
static inline float ExpScalar(float x) { return S::ReduceMax(S::Exp(S::Set(x))); }
