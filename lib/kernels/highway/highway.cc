// The Highway backend: the kernel families compiled once per Highway target
// (foreach_target), each copy with its own target attributes, and their dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/kernels/highway/highway.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <immintrin.h>  // the AVX block transpose of the vocabulary (x86 only)

#include <hwy/highway.h>

#include "lib/kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace octattn {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// This target in the library's numbering; a target this file does not know is a build
// error, never a silent scalar.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr Target kThisTarget = kAvx512;  // AVX3_DL (some compilers) is AVX-512 too
#elif HWY_TARGET == HWY_AVX2
constexpr Target kThisTarget = kAvx2;
#elif HWY_TARGET == HWY_SSE4
constexpr Target kThisTarget = kSse4;
#elif HWY_TARGET == HWY_SSSE3
constexpr Target kThisTarget = kSsse3;
#elif HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
constexpr Target kThisTarget = kScalar;
#else
#error "octattn: a Highway target this library does not map (add it to highway.cc)"
#endif

// The SIMD vocabulary the kernel families are written against.
struct S {
  using D = hn::ScalableTag<float>;
  using V = hn::Vec<D>;
  static constexpr size_t kLanes = hn::MaxLanes(D());
  static constexpr int kRegs = kThisTarget == kAvx512 ? 32 : 16;
  // Whether Transpose8x8 is a fast block operation here (else the families' plain loops
  // are as good).
  static constexpr bool kBlockTranspose = kThisTarget >= kAvx2;
  static HWY_INLINE V Zero() { return hn::Zero(D()); }
  static HWY_INLINE V Set(float x) { return hn::Set(D(), x); }
  static HWY_INLINE V Load(const float* p) { return hn::LoadU(D(), p); }
  static HWY_INLINE void Store(V v, float* p) { hn::StoreU(v, D(), p); }
  static HWY_INLINE V Add(V a, V b) { return hn::Add(a, b); }
  static HWY_INLINE V Sub(V a, V b) { return hn::Sub(a, b); }
  static HWY_INLINE V Mul(V a, V b) { return hn::Mul(a, b); }
  static HWY_INLINE V MulAdd(V a, V b, V c) { return hn::MulAdd(a, b, c); }
  static HWY_INLINE V Max(V a, V b) { return hn::Max(a, b); }
  // 2^n for t = 1.5 * 2^23 + n, n an integer in [-126, 127]: n's bits moved into the
  // exponent field (unsigned lanes: the shift drops the rest, wrapping is defined).
  static HWY_INLINE V Pow2Bits(V t) {
    const hn::RebindToUnsigned<D> du;
    return hn::BitCast(D(),
                       hn::Add(hn::ShiftLeft<23>(hn::BitCast(du, t)), hn::Set(du, 0x3F800000u)));
  }
  // r where x >= lo, else 0 (NaN x: r).
  static HWY_INLINE V ZeroBelow(V x, float lo, V r) {
    return hn::IfThenZeroElse(hn::Lt(x, Set(lo)), r);
  }
  // x where x is NaN, else r.
  static HWY_INLINE V NaNOr(V x, V r) { return hn::IfThenElse(hn::Eq(x, x), r, x); }
#include "lib/kernels/common/exp-inl.h"
  static HWY_INLINE V Min(V a, V b) { return hn::Min(a, b); }
  static HWY_INLINE V Div(V a, V b) { return hn::Div(a, b); }
  // 1 where a == b, else 0.
  static HWY_INLINE V Indicator(V a, float b) {
    return hn::IfThenElseZero(hn::Eq(a, Set(b)), Set(1.0f));
  }
#include "lib/kernels/common/tanh-inl.h"
  static HWY_INLINE float ReduceSum(V v) { return hn::GetLane(hn::SumOfLanes(D(), v)); }
  // Not MaxOfLanes: on EMU128 it starts from the lowest finite value, so a vector of
  // -inf (a fully masked row) would come back as -FLT_MAX.
  static HWY_INLINE float ReduceMax(V v) {
    alignas(64) float lanes[kLanes];
    hn::StoreU(v, D(), lanes);
    float m = lanes[0];
    for (size_t i = 1; i < kLanes; ++i) m = lanes[i] > m ? lanes[i] : m;
    return m;
  }
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
#define OCTATTN_AVX_TRANSPOSE 1
#else
#define OCTATTN_AVX_TRANSPOSE 0
#endif
#include "lib/kernels/common/transpose-inl.h"
#undef OCTATTN_AVX_TRANSPOSE
};

#include "lib/kernels/table-inl.h"

const Table kTable = MakeTable(kHighway, kThisTarget);

const Table* GetTable() { return &kTable; }

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace octattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace octattn {
namespace kernels {

HWY_EXPORT(GetTable);

const Table* HighwayBest() { return HWY_DYNAMIC_DISPATCH(GetTable)(); }

const Table* HighwayTable(Target target) {
  const int64_t supported = hwy::SupportedTargets();
  switch (target) {
#if HWY_TARGETS & HWY_AVX3
    case kAvx512:
      return (supported & HWY_AVX3) ? N_AVX3::GetTable() : nullptr;
#endif
#if HWY_TARGETS & HWY_AVX2
    case kAvx2:
      return (supported & HWY_AVX2) ? N_AVX2::GetTable() : nullptr;
#endif
#if HWY_TARGETS & HWY_SSE4
    case kSse4:
      return (supported & HWY_SSE4) ? N_SSE4::GetTable() : nullptr;
#endif
#if HWY_TARGETS & HWY_SSSE3
    case kSsse3:
      return (supported & HWY_SSSE3) ? N_SSSE3::GetTable() : nullptr;
#endif
#if HWY_TARGETS & HWY_SCALAR
    case kScalar:
      return N_SCALAR::GetTable();
#elif HWY_TARGETS & HWY_EMU128
    case kScalar:
      return N_EMU128::GetTable();
#endif
    default:
      return nullptr;
  }
}

}  // namespace kernels
}  // namespace octattn
#endif  // HWY_ONCE
