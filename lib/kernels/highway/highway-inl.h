// The Highway backend's per-target body: the SIMD vocabulary S over Highway's vectors
// and every kernel family, ending in this target's table (GetTable). Included inside
// namespace octattn::kernels::HWY_NAMESPACE, between HWY_BEFORE_NAMESPACE and
// HWY_AFTER_NAMESPACE: once per x86 or NEON target by highway.cc (foreach_target), and
// once by each SVE unit (highway_sve_256.cc, highway_sve2_128.cc), which is compiled for
// its one vector length. No include guard: each inclusion is another target.
namespace hn = hwy::HWY_NAMESPACE;

// This target in the library's numbering; a target this file does not know is a build
// error, never a silent scalar.
#if defined(OCTATTN_AMX_BF16) && defined(OCTATTN_DOT_BF16) && HWY_TARGET == HWY_AVX3 && \
    defined(__AVX512BF16__) && (defined(__AMX_BF16__) || defined(__AMXBF16__))
constexpr Target kThisTarget = kAmxBf16;  // the unit highway_amx_bf16.cc
#elif defined(OCTATTN_AMX_BF16)
#error "octattn: OCTATTN_AMX_BF16 is for AVX3 code compiled with -mavx512bf16 -mamx-tile -mamx-bf16"
#elif defined(OCTATTN_DOT_BF16) && HWY_TARGET == HWY_AVX3 && defined(__AVX512BF16__)
constexpr Target kThisTarget = kAvx512Bf16;  // the unit highway_avx512_bf16.cc
#elif defined(OCTATTN_DOT_BF16)
#error "octattn: OCTATTN_DOT_BF16 is for AVX3 code compiled with -mavx512bf16"
#elif HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr Target kThisTarget = kAvx512;  // AVX3_DL (some compilers) is AVX-512 too
#elif HWY_TARGET == HWY_AVX2
constexpr Target kThisTarget = kAvx2;
#elif HWY_TARGET == HWY_SSE4
constexpr Target kThisTarget = kSse4;
#elif HWY_TARGET == HWY_SSSE3
constexpr Target kThisTarget = kSsse3;
#elif HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
constexpr Target kThisTarget = kScalar;
#elif HWY_TARGET == HWY_NEON
constexpr Target kThisTarget = kNeon;
#elif HWY_TARGET == HWY_SVE2_128 && __ARM_FEATURE_SVE_BITS == 128
constexpr Target kThisTarget = kSve2_128;
#elif HWY_TARGET == HWY_SVE_256 && __ARM_FEATURE_SVE_BITS == 256
constexpr Target kThisTarget = kSve256;
#else
#error "octattn: a Highway target this library does not map (add it to highway-inl.h)"
#endif

#if HWY_HAVE_SCALABLE
// SVE vectors are sizeless: they cannot be array elements, and the families' register
// blocks are arrays of vectors. This translation unit is compiled for one vector length
// (-msve-vector-bits, see lib/CMakeLists.txt), whose fixed-length type can.
typedef hn::Vec<hn::ScalableTag<float>> FixedVec
    __attribute__((arm_sve_vector_bits(__ARM_FEATURE_SVE_BITS)));
#endif

// The SIMD vocabulary the kernel families are written against.
struct S {
  using D = hn::ScalableTag<float>;
  using HV = hn::Vec<D>;  // Highway's vector
#if HWY_HAVE_SCALABLE
  using V = FixedVec;  // converts to and from HV implicitly
#else
  using V = HV;
#endif
  // Lanes per vector, known when compiling: on SVE this unit's vector length.
  static constexpr size_t kLanes = hn::MaxLanes(D());
#if HWY_HAVE_SCALABLE
  static_assert(kLanes * 32 == __ARM_FEATURE_SVE_BITS, "one vector length per SVE unit");
#endif
  // Vector registers: 32 on AVX-512 and on ARM64 (NEON and SVE), 16 on the others.
  static constexpr int kRegs = kThisTarget == kAvx512 || kThisTarget == kAvx512Bf16 ||
                                       kThisTarget == kAmxBf16 || kThisTarget == kNeon ||
                                       kThisTarget == kSve2_128 || kThisTarget == kSve256
                                   ? 32
                                   : 16;
  // Whether Transpose8x8 is a fast block operation here (else the families' plain loops
  // are as good): the x86 AVX targets.
  static constexpr bool kBlockTranspose = kThisTarget == kAvx2 || kThisTarget == kAvx512 ||
                                          kThisTarget == kAvx512Bf16 || kThisTarget == kAmxBf16;
  static HWY_INLINE HV H(V v) { return v; }
  // A vector from the target's own register type (the x86 block transposes).
  template <class R>
  static HWY_INLINE V FromRaw(R r) {
    return HV{r};
  }
  // The target's own register of a vector (x86 only: a template, so that the sizeless
  // SVE vectors never instantiate it).
  template <class W = V>
  static HWY_INLINE auto ToRaw(W v) {
    return H(v).raw;
  }
  static HWY_INLINE V Zero() { return hn::Zero(D()); }
  static HWY_INLINE V Set(float x) { return hn::Set(D(), x); }
  static HWY_INLINE V Load(const float* p) { return hn::LoadU(D(), p); }
  static HWY_INLINE void Store(V v, float* p) { hn::StoreU(H(v), D(), p); }
  static HWY_INLINE V Add(V a, V b) { return hn::Add(H(a), H(b)); }
  static HWY_INLINE V Sub(V a, V b) { return hn::Sub(H(a), H(b)); }
  static HWY_INLINE V Mul(V a, V b) { return hn::Mul(H(a), H(b)); }
  static HWY_INLINE V MulAdd(V a, V b, V c) { return hn::MulAdd(H(a), H(b), H(c)); }
  static HWY_INLINE V Max(V a, V b) { return hn::Max(H(a), H(b)); }
  // 2^n for t = 1.5 * 2^23 + n, n an integer in [-126, 127]: n's bits moved into the
  // exponent field (unsigned lanes: the shift drops the rest, wrapping is defined).
  static HWY_INLINE V Pow2Bits(V t) {
    const hn::RebindToUnsigned<D> du;
    return hn::BitCast(D(),
                       hn::Add(hn::ShiftLeft<23>(hn::BitCast(du, H(t))), hn::Set(du, 0x3F800000u)));
  }
  // r where x >= lo, else 0 (NaN x: r).
  static HWY_INLINE V ZeroBelow(V x, float lo, V r) {
    return hn::IfThenZeroElse(hn::Lt(H(x), H(Set(lo))), H(r));
  }
  // x where x is NaN, else r.
  static HWY_INLINE V NaNOr(V x, V r) { return hn::IfThenElse(hn::Eq(H(x), H(x)), H(r), H(x)); }
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define OCTATTN_EXP_AVX512 1
#else
#define OCTATTN_EXP_AVX512 0
#endif
#include "lib/kernels/common/exp-inl.h"
#undef OCTATTN_EXP_AVX512
  static HWY_INLINE V Min(V a, V b) { return hn::Min(H(a), H(b)); }
  static HWY_INLINE V Div(V a, V b) { return hn::Div(H(a), H(b)); }
  // 1 where a == b, else 0.
  static HWY_INLINE V Indicator(V a, float b) {
    return hn::IfThenElseZero(hn::Eq(H(a), H(Set(b))), H(Set(1.0f)));
  }
#include "lib/kernels/common/tanh-inl.h"
  static HWY_INLINE float ReduceSum(V v) { return hn::GetLane(hn::SumOfLanes(D(), H(v))); }
  // Not MaxOfLanes on EMU128: there it starts from the lowest finite value, so a vector
  // of -inf (a fully masked row) would come back as -FLT_MAX. The x86 targets' is a
  // shuffle tree.
  static HWY_INLINE float ReduceMax(V v) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
    return hn::GetLane(hn::MaxOfLanes(D(), H(v)));
#else
    alignas(64) float lanes[kLanes];
    hn::StoreU(H(v), D(), lanes);
    float m = lanes[0];
    for (size_t i = 1; i < kLanes; ++i) m = lanes[i] > m ? lanes[i] : m;
    return m;
#endif
  }
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
#define OCTATTN_AVX_TRANSPOSE 1
#else
#define OCTATTN_AVX_TRANSPOSE 0
#endif
#include "lib/kernels/common/vocabulary-inl.h"
#undef OCTATTN_AVX_TRANSPOSE
};

#include "lib/kernels/table-inl.h"

const Table kTable = MakeTable(kHighway, kThisTarget);

const Table* GetTable() { return &kTable; }
