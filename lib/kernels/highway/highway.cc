// The Highway backend: the kernel families (highway-inl.h) compiled once per Highway
// target of this unit (foreach_target: the x86 targets, or NEON and the scalar one on
// ARM64), each copy with its own target attributes, and the dispatch over them, the
// x86 unit highway_avx512_bf16.cc (OCTATTN_HWY_AVX512_BF16) and, on ARM64, the SVE
// units (highway_sve_256.cc, highway_sve2_128.cc, each compiled for one vector length;
// OCTATTN_HWY_SVE): Highway's CPU detection, best first, as HWY_DYNAMIC_DISPATCH would
// (AVX512_BF16, which Highway does not know, from CPUID).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/kernels/highway/highway.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // the AVX block transpose of the vocabulary
#endif

#include <hwy/highway.h>

#include "lib/kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace octattn {
namespace kernels {
namespace HWY_NAMESPACE {
#include "lib/kernels/highway/highway-inl.h"
}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace octattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <hwy/targets.h>

namespace octattn {
namespace kernels {

#if OCTATTN_HWY_AVX512_BF16
namespace bf16 {
namespace N_AVX3 {
const Table* GetTable();
}
}  // namespace bf16
#endif
#if OCTATTN_HWY_SVE
namespace N_SVE_256 {
const Table* GetTable();
}
namespace N_SVE2_128 {
const Table* GetTable();
}
#endif
#if HWY_TARGETS & HWY_SCALAR  // the scalar target: SCALAR where the build asks for it
#define OCTATTN_HWY_SCALAR_NS N_SCALAR
#else
#define OCTATTN_HWY_SCALAR_NS N_EMU128
#endif

namespace {

struct Unit {
  Target target;
  int64_t hwy_bits;  // the Highway targets whose CPUs run it
  const Table* (*table)();
  bool (*extra)();  // what else the CPU needs (null: nothing)
};

#if OCTATTN_HWY_AVX512_BF16
bool HasAvx512Bf16() {
  __builtin_cpu_init();  // idempotent; this may run before libgcc's constructor
  return __builtin_cpu_supports("avx512bf16");
}
#endif

// Best first. Highway reports SVE_256 for SVE with 256-bit vectors and SVE2_128 for SVE2
// with 128-bit ones; any other ARM64 CPU runs NEON.
constexpr Unit kUnits[] = {
#if OCTATTN_HWY_AVX512_BF16
    {kAvx512Bf16, HWY_AVX3, &bf16::N_AVX3::GetTable, &HasAvx512Bf16},
#endif
#if HWY_TARGETS & HWY_AVX3
    {kAvx512, HWY_AVX3, &N_AVX3::GetTable, nullptr},
#endif
#if HWY_TARGETS & HWY_AVX2
    {kAvx2, HWY_AVX2, &N_AVX2::GetTable, nullptr},
#endif
#if HWY_TARGETS & HWY_SSE4
    {kSse4, HWY_SSE4, &N_SSE4::GetTable, nullptr},
#endif
#if HWY_TARGETS & HWY_SSSE3
    {kSsse3, HWY_SSSE3, &N_SSSE3::GetTable, nullptr},
#endif
#if OCTATTN_HWY_SVE
    {kSve2_128, HWY_SVE2_128, &N_SVE2_128::GetTable, nullptr},
#endif
#if OCTATTN_HWY_SVE
    {kSve256, HWY_SVE_256, &N_SVE_256::GetTable, nullptr},
#endif
#if HWY_TARGETS & HWY_NEON
    {kNeon, HWY_NEON, &N_NEON::GetTable, nullptr},
#endif
    {kScalar, -1, &OCTATTN_HWY_SCALAR_NS::GetTable, nullptr},  // every CPU
};

bool Runs(const Unit& u, int64_t supported) {
  return (supported & u.hwy_bits) && (!u.extra || u.extra());
}

}  // namespace

const Table* HighwayBest() {
  const int64_t supported = hwy::SupportedTargets();
  for (const Unit& u : kUnits)
    if (Runs(u, supported)) return u.table();
  return nullptr;  // not reached: the scalar unit runs everywhere
}

const Table* HighwayTable(Target target) {
  const int64_t supported = hwy::SupportedTargets();
  for (const Unit& u : kUnits)
    if (u.target == target) return Runs(u, supported) ? u.table() : nullptr;
  return nullptr;
}

}  // namespace kernels
}  // namespace octattn
#endif  // HWY_ONCE
