// The body of one xsimd per-arch translation unit: the SIMD vocabulary over
// xsimd::batch<float, ARCH> and the kernel families, all inside a namespace of this arch
// so that no inline function compiled with this TU's -m flags is shared with another.
// The including file defines OCTATTN_XSIMD_ARCH, OCTATTN_XSIMD_NS, OCTATTN_XSIMD_TARGET
// and OCTATTN_XSIMD_REGS.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // the AVX block transpose and the AVX-512 FMA of the vocabulary
#endif

#include <xsimd/xsimd.hpp>

#include "lib/kernels/kernels.h"
#include "lib/kernels/xsimd/xsimd.h"

namespace octattn {
namespace kernels {
namespace OCTATTN_XSIMD_NS {

struct S {
  using V = xsimd::batch<float, OCTATTN_XSIMD_ARCH>;
  static constexpr size_t kLanes = V::size;
  static constexpr int kRegs = OCTATTN_XSIMD_REGS;
#if defined(__AVX__)
  static constexpr bool kBlockTranspose = true;  // Transpose8x8 is a fast block op here
#else
  static constexpr bool kBlockTranspose = false;
#endif
  // A vector from the target's own register type (the x86 block transposes).
  template <class R>
  static OCTATTN_INLINE V FromRaw(R r) {
    return V(r);
  }
  static OCTATTN_INLINE typename V::register_type ToRaw(V v) { return v; }
  static OCTATTN_INLINE V Zero() { return V(0.0f); }
  static OCTATTN_INLINE V Set(float x) { return V(x); }
  static OCTATTN_INLINE V Load(const float* p) { return V::load_unaligned(p); }
  static OCTATTN_INLINE void Store(V v, float* p) { v.store_unaligned(p); }
  static OCTATTN_INLINE V Add(V a, V b) { return a + b; }
  static OCTATTN_INLINE V Sub(V a, V b) { return a - b; }
  static OCTATTN_INLINE V Mul(V a, V b) { return a * b; }
  // xsimd 8.1 has no AVX-512 fma kernel (its generic one is a multiply and an add, two
  // roundings, fused or not at the compiler's will): the instruction is named here.
  static OCTATTN_INLINE V MulAdd(V a, V b, V c) {
#if defined(__AVX512F__)
    if constexpr (V::size == 16) return V(_mm512_fmadd_ps(a, b, c));
#endif
    return xsimd::fma(a, b, c);
  }
  static OCTATTN_INLINE V Max(V a, V b) { return xsimd::max(a, b); }
  // The primitives of Exp (lib/kernels/common/exp-inl.h).
  static OCTATTN_INLINE V Pow2Bits(V t) {
    using U = xsimd::batch<uint32_t, OCTATTN_XSIMD_ARCH>;
    return xsimd::bitwise_cast<V>((xsimd::bitwise_cast<U>(t) << 23) + U(0x3F800000u));
  }
  static OCTATTN_INLINE V ZeroBelow(V x, float lo, V r) {
    return xsimd::select(x < V(lo), V(0.0f), r);
  }
  static OCTATTN_INLINE V NaNOr(V x, V r) { return xsimd::select(x == x, r, x); }
#if defined(__AVX512F__)
#define OCTATTN_EXP_AVX512 1
#else
#define OCTATTN_EXP_AVX512 0
#endif
#include "lib/kernels/common/exp-inl.h"
#undef OCTATTN_EXP_AVX512
  static OCTATTN_INLINE V Min(V a, V b) { return xsimd::min(a, b); }
  static OCTATTN_INLINE V Div(V a, V b) { return a / b; }
  static OCTATTN_INLINE V Indicator(V a, float b) {
    return xsimd::select(a == V(b), V(1.0f), V(0.0f));
  }
#include "lib/kernels/common/tanh-inl.h"
  static OCTATTN_INLINE float ReduceSum(V v) { return xsimd::hadd(v); }
  static OCTATTN_INLINE float ReduceMax(V v) {
    alignas(64) float lanes[kLanes];
    v.store_aligned(lanes);
    float m = lanes[0];
    for (size_t i = 1; i < kLanes; ++i) m = lanes[i] > m ? lanes[i] : m;
    return m;
  }
#if defined(__AVX__)
#define OCTATTN_AVX_TRANSPOSE 1
#else
#define OCTATTN_AVX_TRANSPOSE 0
#endif
#include "lib/kernels/common/vocabulary-inl.h"
#undef OCTATTN_AVX_TRANSPOSE
};

#include "lib/kernels/table-inl.h"

const Table kTable = MakeTable(kXsimd, OCTATTN_XSIMD_TARGET);

}  // namespace OCTATTN_XSIMD_NS

const Table* XsimdTables::operator()(OCTATTN_XSIMD_ARCH) const { return &OCTATTN_XSIMD_NS::kTable; }

}  // namespace kernels
}  // namespace octattn
