// The vocabulary's Transpose8x8, an 8x8 float block transpose, TransposeRows, eight
// dimensions of kLanes keys moved into vectors with the keys in lanes, and LoadAs, a
// vector of bf16 or f16 elements widened. Its portable form is a
// plain loop; where the including backend says its target has AVX
// (OCTATTN_AVX_TRANSPOSE, x86 only) transpose_avx-inl.h defines it with shuffles. The
// families use it only where kBlockTranspose says it is a fast block operation. Included
// inside each backend's vocabulary struct.

#if OCTATTN_AVX_TRANSPOSE
#include "lib/kernels/common/transpose_avx-inl.h"
#else
// dst[c * dst_stride + r] = src[r * src_stride + c] for r, c < 8.
static OCTATTN_INLINE void Transpose8x8(const float* src, int64_t src_stride, float* dst,
                                        int64_t dst_stride) {
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c) dst[c * dst_stride + r] = src[r * src_stride + c];
}
// kLanes elements of type T at p, widened to f32.
template <Dtype T>
static OCTATTN_INLINE V LoadAs(const float* p) {
  if constexpr (T == kF32) {
    return Load(p);
  } else {
    alignas(64) float lanes[kLanes];
    WidenRow(p, 1, T, static_cast<int64_t>(kLanes), lanes);
    return Load(lanes);
  }
}
// f16 narrowing by the vector unit (transpose_avx-inl.h): the AVX targets only.
static constexpr bool kStoreF16 = false;
static OCTATTN_INLINE void StoreF16(V, float*) {}
// bf16 dimension pairs (transpose_avx-inl.h): the AVX targets only.
static constexpr bool kBf16Pairs = false;
static OCTATTN_INLINE void TransposeBf16Pairs(const float*, int64_t, V (&)[8]) {}
static OCTATTN_INLINE V Bf16Even(V pair) { return pair; }
static OCTATTN_INLINE V Bf16Odd(V pair) { return pair; }
static OCTATTN_INLINE void Deinterleave(V a, V b, V* even, V* odd) { *even = a, *odd = b; }
static OCTATTN_INLINE void Interleave(V even, V odd, V* a, V* b) { *a = even, *b = odd; }
// t[i] lane e = rows[e * row + i] for e < kLanes and i < 8 (elements of type T).
template <Dtype T = kF32>
static OCTATTN_INLINE void TransposeRows(const float* rows, int64_t row, V (&t)[8]) {
  alignas(64) float lanes[8][kLanes];
  for (size_t e = 0; e < kLanes; ++e)
    for (int i = 0; i < 8; ++i) lanes[i][e] = LoadElem(rows, static_cast<int64_t>(e) * row + i, T);
  for (int i = 0; i < 8; ++i) t[i] = Load(lanes[i]);
}
#endif
#if !defined(OCTATTN_DOT_BF16)
// vdpbf16ps and its helpers (transpose_avx-inl.h): the avx512_bf16 unit only.
static constexpr bool kDotBf16 = false;
static OCTATTN_INLINE V DotBf16(V, V, V acc) { return acc; }
static OCTATTN_INLINE V NarrowPairs(V lo, V) { return lo; }
static OCTATTN_INLINE V PairRows(const float*, const float*) { return Zero(); }
static OCTATTN_INLINE V Bf16Low(V pair) { return pair; }
#endif
#if !defined(OCTATTN_AMX_BF16)
// AMX-BF16 tiles (transpose_avx-inl.h): the amx_bf16 unit only.
static constexpr bool kAmx = false;
static OCTATTN_INLINE void AmxConfigure(int) {}
static OCTATTN_INLINE void AmxRelease() {}
static OCTATTN_INLINE void AmxDot64(const void*, int64_t, const void*, int64_t, int, int, float*) {}
static OCTATTN_INLINE void AmxLoadSums(const float*, int) {}
static OCTATTN_INLINE void AmxStoreSums(float*, int) {}
static OCTATTN_INLINE void AmxStep(const void*, int64_t, const void*, int64_t, int) {}
#endif
