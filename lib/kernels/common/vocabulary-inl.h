// The vocabulary's operations beyond a backend's own: Transpose8x8, an 8x8 float block
// transpose, TransposeRows, eight dimensions of kLanes keys moved into vectors with the
// keys in lanes, and LoadAs, a vector of bf16 or f16 elements widened (a plain loop,
// or where the including backend says its target has AVX, OCTATTN_AVX_TRANSPOSE, x86
// only, shuffles: avx_transpose-inl.h); bf16 pairs and vdpbf16ps (avx_bf16-inl.h) and
// AMX tiles (avx_amx-inl.h) where the target has them. The families use the transposes
// only where kBlockTranspose says they are a fast block operation. Included inside each
// backend's vocabulary struct.

// An instruction this target lacks, as Highway leaves it undefined: a call that is
// compiled for the target (one its k* constant does not guard with if constexpr) is a
// compile error, never a stub that computes a wrong value.
template <class... A>
static constexpr bool kAbsent = false;
#define OCTATTN_ABSENT(R, name)                                   \
  template <class... A>                                           \
  static R name(A&&...) {                                         \
    static_assert(kAbsent<A...>, #name                            \
                  " is not an instruction of this target: guard " \
                  "its call with the target's constant");         \
    return R();                                                   \
  }
#if OCTATTN_AVX_TRANSPOSE
#include "lib/kernels/common/avx_bf16-inl.h"
#include "lib/kernels/common/avx_transpose-inl.h"
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
// f16 narrowing by the vector unit (avx_transpose-inl.h): the AVX targets only.
static constexpr bool kStoreF16 = false;
OCTATTN_ABSENT(void, StoreF16)
// bf16 narrowing in vectors (avx_transpose-inl.h): the AVX targets only.
static constexpr bool kStoreBf16 = false;
OCTATTN_ABSENT(void, StoreBf16)
// Stores past the caches (avx_transpose-inl.h): the AVX targets only.
static constexpr bool kStream = false;
OCTATTN_ABSENT(void, StreamStore)
OCTATTN_ABSENT(void, StreamStore16)
OCTATTN_ABSENT(void, StreamFence)
// INT8, Q8_0, Q4_0 and FP8 stores in vectors (avx_transpose-inl.h): the AVX targets only.
static constexpr bool kStoreI8 = false;
OCTATTN_ABSENT(uint32_t, AbsBitsMax)
OCTATTN_ABSENT(V, AbsMax4)
OCTATTN_ABSENT(V, RoundF16)
OCTATTN_ABSENT(bool, AllWithin)
OCTATTN_ABSENT(V, DivByInverse)
OCTATTN_ABSENT(uint32_t, WithinMask)
OCTATTN_ABSENT(int, FirstAbsBits32)
OCTATTN_ABSENT(void, StoreNibbles)
OCTATTN_ABSENT(float, FirstLane)
template <int, class... A>
static V Quarter(A&&...) {
  static_assert(kAbsent<A...>, "Quarter is not an instruction of this target");
  return V();
}
OCTATTN_ABSENT(void, StoreI8)
template <bool, class... A>
static void StoreRoundI8x4(A&&...) {
  static_assert(kAbsent<A...>, "StoreRoundI8x4 is not an instruction of this target");
}
OCTATTN_ABSENT(V, Interleave4)
template <bool, class... A>
static void StoreFp8(A&&...) {
  static_assert(kAbsent<A...>, "StoreFp8 is not an instruction of this target");
}
template <bool, class... A>
static void StoreFp8x4(A&&...) {
  static_assert(kAbsent<A...>, "StoreFp8x4 is not an instruction of this target");
}
// Quantized rows dequantized in registers (avx_transpose-inl.h): the AVX targets only.
static constexpr bool kQuantRows = false;
#define OCTATTN_ABSENT_T(R, name)                                              \
  template <Dtype, class... A>                                                 \
  static R name(A&&...) {                                                      \
    static_assert(kAbsent<A...>, #name " is not an operation of this target"); \
    return R();                                                                \
  }
OCTATTN_ABSENT_T(V, BytesAs)
OCTATTN_ABSENT_T(void, TransposeBytes)
OCTATTN_ABSENT_T(V, QuantValues)
OCTATTN_ABSENT_T(void, TransposeRowsHalf)
static constexpr bool kRawBytes = false;
OCTATTN_ABSENT_T(void, TransposeRawBytes)
template <Dtype, int, class... A>
static void RawValues(A&&...) {
  static_assert(kAbsent<A...>, "RawValues is not an operation of this target");
}
template <Dtype, int, class... A>
static V RawValue(A&&...) {
  static_assert(kAbsent<A...>, "RawValue is not an operation of this target");
  return V();
}
#undef OCTATTN_ABSENT_T
static constexpr bool kFp8Rows = false;
static constexpr bool kFp8Values = false;
OCTATTN_ABSENT(void, TransposeFp8)
OCTATTN_ABSENT(V, Fp8As)
// e4m3 codes with no NaN code (avx_transpose-inl.h): the AVX targets only.
static constexpr bool kE4m3Plain = false;
OCTATTN_ABSENT(bool, E4m3Nans)
OCTATTN_ABSENT(bool, E4m3NansAt)
OCTATTN_ABSENT(bool, E4m3RowsNans)
OCTATTN_ABSENT(V, E4m3PlainAs)
OCTATTN_ABSENT(void, TransposeE4m3Plain)
template <int, class... A>
static void RawE4m3Values(A&&...) {
  static_assert(kAbsent<A...>, "RawE4m3Values is not an operation of this target");
}
OCTATTN_ABSENT(float, HalfToFloat)
OCTATTN_ABSENT(V, GatherBits)
OCTATTN_ABSENT(V, GatherHalves)
// bf16 dimension pairs (avx_bf16-inl.h): the AVX targets only.
static constexpr bool kBf16Pairs = false;
OCTATTN_ABSENT(void, TransposeBf16Pairs)
OCTATTN_ABSENT(V, Bf16Even)
OCTATTN_ABSENT(V, Bf16Odd)
OCTATTN_ABSENT(void, Deinterleave)
OCTATTN_ABSENT(void, Interleave)
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
// vdpbf16ps and its helpers (avx_bf16-inl.h): the avx512_bf16 and amx_bf16 units.
static constexpr bool kDotBf16 = false;
OCTATTN_ABSENT(V, DotBf16)
OCTATTN_ABSENT(V, NarrowPairs)
OCTATTN_ABSENT(V, NarrowRowPairs)
OCTATTN_ABSENT(V, PairRows)
OCTATTN_ABSENT(void, PairRows32)
OCTATTN_ABSENT(void, PairColumns)
OCTATTN_ABSENT(void, PairLanes)
OCTATTN_ABSENT(V, Bf16Low)
// int8 dot products on vpdpbusd (avx_bf16-inl.h): the same units.
static constexpr bool kDotI8 = false;
template <Dtype, class... A>
static void QuadsU8(A&&...) {
  static_assert(kAbsent<A...>, "QuadsU8 is not an instruction of this target");
}
OCTATTN_ABSENT(V, DotI8)
OCTATTN_ABSENT(V, IntToFloat)
#endif
#if defined(OCTATTN_AMX_BF16)
#include "lib/kernels/common/avx_amx-inl.h"
#else
// AMX-BF16 tiles (avx_amx-inl.h): the amx_bf16 unit only.
static constexpr bool kAmx = false;
OCTATTN_ABSENT(void, AmxConfigure)
OCTATTN_ABSENT(void, AmxRelease)
OCTATTN_ABSENT(void, AmxDot64)
OCTATTN_ABSENT(void, AmxLoadSums)
OCTATTN_ABSENT(void, AmxStoreSums)
OCTATTN_ABSENT(void, AmxStep)
#endif
#undef OCTATTN_ABSENT
